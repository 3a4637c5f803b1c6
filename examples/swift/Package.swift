// swift-tools-version:6.0
import PackageDescription

// A Swift program that uses libmtls from outside its package, with public API only
// (`import MTLS`): built and run against nginx by `make test` (Tests/e2e/test_swift_example.py).
let package = Package(
    name: "mtls-swift-example",
    dependencies: [.package(name: "libmtls", path: "../..")],
    targets: [
        .executableTarget(name: "mtls-swift-example", dependencies: [.product(name: "MTLS", package: "libmtls")]),
    ],
    swiftLanguageModes: [.v6]
)
