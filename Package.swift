// swift-tools-version:6.0
import PackageDescription

// Each function in a section of its own, so that the linker can lay out the hot ones together
// (libmtls.so's symbol ordering file, below).
let sections: [SwiftSetting] = [.unsafeFlags(["-Xfrontend", "-function-sections"])]

// libmtls: the Swift core (MTLS), its C ABI (CMTLS → libmtls.so) and the `mtls` command line.
let package = Package(
    name: "libmtls",
    products: [
        // libmtls.so: the C ABI. SONAME and the export list are set in the linker settings below.
        .library(name: "mtls", type: .dynamic, targets: ["CMTLS"]),
        .library(name: "MTLS", targets: ["MTLS"]),
        // The command line: folder, target and product are all `mtls-cli` (SwiftPM cannot have a
        // product named like the library); `make install` installs it as `bin/mtls`.
        .executable(name: "mtls-cli", targets: ["mtls-cli"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CP11Kit", pkgConfig: "p11-kit-1",
                       providers: [.apt(["libp11-kit-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        // include/mtls.h as a module: the C ABI layer uses the header's own types.
        .systemLibrary(name: "CMTLSHeader"),
        // The OpenSSL 3 provider for PKCS#11 token keys (C: a provider is C dispatch tables).
        .target(name: "CMTLSProvider", linkerSettings: [.linkedLibrary("crypto")]),
        // The Swift core, one target per layer. Each target depends only on the layers below it,
        // so a back edge (a lower layer importing a higher one) is a build error. Internals shared
        // across layers are `package`; what is `public` is the Swift API. Bottom to top:
        // base: errors, the thread starter, bytes and secrets, file IO, JSON text, TLS sides.
        .target(name: "MTLSBase", dependencies: ["COpenSSL", "CMTLSHeader"], swiftSettings: sections),
        // net: sockets and deadlines, URL authority, host literals, the one HTTP/1 client (its
        // https: connections are opened by the TLS layer through HTTPSConnector).
        .target(name: "MTLSNet", dependencies: ["MTLSBase"], swiftSettings: sections),
        // X.509: certificates, keys, identities, PKCS#12, CSRs, CRL entries, lifecycle events (they
        // carry a certificate), the library's OpenSSL context, and PKCS#11 tokens (the context
        // loads the token-key provider, keys sign through it, CSRs and token keys are made here).
        .target(name: "MTLSX509", dependencies: ["MTLSNet", "COpenSSL", "CP11Kit", "CMTLSProvider", "CMTLSHeader"], swiftSettings: sections),
        // store: the credential store (SQLite).
        .target(name: "MTLSStore", dependencies: ["MTLSX509", "COpenSSL", "CP11Kit", "CSQLite"], swiftSettings: sections),
        // trust: policies, evaluation, revocation (one check stage of the evaluation).
        .target(name: "MTLSTrust", dependencies: ["MTLSStore", "COpenSSL"], swiftSettings: sections),
        // identity sources and watches: the identity a listener or client presents and what
        // replaces it (store rows, files, tokens), followed policy files and store anchors, and
        // the one watcher thread. Below TLS: TLS options and the listener hold an IdentitySource.
        .target(name: "MTLSSources", dependencies: ["MTLSTrust", "COpenSSL"], swiftSettings: sections),
        // TLS: connections, listener, contexts, identity selection in the handshake, and the one
        // HTTP responder (it serves over a TLSListener too).
        .target(name: "MTLSTLS", dependencies: ["MTLSSources", "COpenSSL"], swiftSettings: sections),
        // enrollment and issuing: ACME, EST, the local CA, PKI directories.
        .target(name: "MTLSEnrollment", dependencies: ["MTLSTLS", "COpenSSL"], swiftSettings: sections),
        // lifecycle: the renewer, the metrics endpoint, the Prometheus text, store expiry.
        .target(name: "MTLSLifecycle", dependencies: ["MTLSEnrollment"], swiftSettings: sections),
        // The umbrella: identity resolution and automatic selection; re-exports every layer, so
        // the C layer, the CLI, the tests and the swift-nio-ssl plugin `import MTLS` only.
        .target(
            name: "MTLS",
            dependencies: ["MTLSLifecycle"],
            swiftSettings: sections
        ),
        .target(
            name: "CMTLS",
            dependencies: ["MTLS", "CMTLSHeader"],
            exclude: ["libmtls.map", "libmtls.order"],
            swiftSettings: sections,
            linkerSettings: [
                .unsafeFlags([
                    "-Xlinker", "-soname=libmtls.so.0",
                    "-Xlinker", "--version-script=\(Context.packageDirectory)/Sources/CMTLS/libmtls.map",
                    // The code the handshakes and their reads and writes run, laid out together
                    // (scripts/order-file.sh made the list): a resumed TLS 1.2 client handshake
                    // ran 713 64-byte lines of it on 110 pages placed by source file, 552 on 44
                    // now (bench/REPORT.md). Names the list has and the build does not are skipped.
                    "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/Sources/CMTLS/libmtls.order",
                    "-Xlinker", "--no-warn-symbol-ordering",
                    // The Swift runtime linked in: the library needs only Debian's own libraries.
                    // Static FoundationEssentials' autolink entries miss the archives named here
                    // (lld finds them in any order). No `-z defs`: sanitizer builds (make fuzz,
                    // test-asan) leave the runtime's symbols to the program; the packaging test
                    // checks with `ldd -r` that nothing else is left undefined.
                    "-static-stdlib", "-use-ld=lld", "-l_FoundationCollections", "-l_FoundationCShims",
                ]),
            ]
        ),
        .executableTarget(
            name: "mtls-cli",
            dependencies: ["MTLS", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            // The Swift runtime and Foundation linked in, so the command needs only Debian's own
            // libraries at run time. Static Foundation's autolink entries miss the archives
            // named here; lld finds them in any order.
            linkerSettings: [.unsafeFlags(["-static-stdlib", "-use-ld=lld", "-lCoreFoundation", "-l_FoundationCollections",
                                           "-l_FoundationICU", "-l_FoundationCShims", "-lFoundationInternationalization"])]
        ),
        // COpenSSL: tests drive an application-owned SSL_CTX (bring your own context) directly.
        // CMTLSHeader: tests check the core enums' raw values against the header's macros.
        .testTarget(name: "MTLSTests", dependencies: ["MTLS", "COpenSSL", "CMTLSHeader"]),
    ],
    // Swift 6 language mode: complete concurrency checking for the library, its C ABI, the CLI and the tests.
    swiftLanguageModes: [.v6]
)
