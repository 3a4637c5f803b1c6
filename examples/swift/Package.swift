// swift-tools-version:6.0
import PackageDescription

// A Swift program that uses libmtls from outside its package, with public API only
// (`import MTLS`): built and run against nginx by `make test` (Tests/e2e/test_swift_example.py);
// mtls-quickstart is README.md's Swift quick start, run against `mtls serve` (Tests/e2e/test_readme.py).
let package = Package(
    name: "mtls-swift-example",
    dependencies: [.package(name: "libmtls", path: "../..")],
    targets: [
        .executableTarget(name: "mtls-swift-example", dependencies: [.product(name: "MTLS", package: "libmtls")]),
        // README.md's Swift quick start, as written there (Tests/e2e/test_readme.py).
        .executableTarget(name: "mtls-quickstart", dependencies: [.product(name: "MTLS", package: "libmtls")]),
    ],
    swiftLanguageModes: [.v6]
)
