// swift-tools-version:6.0
import PackageDescription

// MTLSNIOSSL: libmtls's trust decisions and identities for swift-nio-ssl (AsyncHTTPClient, NIO
// servers, Hummingbird, Vapor). A package of its own so that the library, libmtls.so and
// `make demo` never build SwiftNIO: it depends on the root package by path.
let package = Package(
    name: "MTLSNIOSSL",
    products: [
        .library(name: "MTLSNIOSSL", targets: ["MTLSNIOSSL"]),
        // AsyncHTTPClient configured in one call, libmtls deciding about every server.
        .library(name: "MTLSAsyncHTTPClient", targets: ["MTLSAsyncHTTPClient"]),
    ],
    dependencies: [
        .package(name: "libmtls", path: "../.."),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // MTLSAsyncHTTPClient (only its users build it), the tests and the bench.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        .target(
            name: "MTLSNIOSSL",
            dependencies: [
                .product(name: "MTLS", package: "libmtls"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(
            name: "MTLSAsyncHTTPClient",
            dependencies: [
                "MTLSNIOSSL",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        // `make bench-swift-plugins`: AsyncHTTPClient with the plugin against swift-nio-ssl's own
        // configuration.
        .executableTarget(
            name: "mtls-niossl-bench",
            dependencies: [
                "MTLSNIOSSL",
                "MTLSAsyncHTTPClient",
                .product(name: "MTLS", package: "libmtls"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .testTarget(
            name: "MTLSNIOSSLTests",
            dependencies: [
                "MTLSNIOSSL",
                "MTLSAsyncHTTPClient",
                .product(name: "MTLS", package: "libmtls"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
