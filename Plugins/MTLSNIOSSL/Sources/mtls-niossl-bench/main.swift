// mtls-niossl-bench: AsyncHTTPClient GETs to nginx (`ssl_verify_client on`, 127.0.0.1) with
// MTLSNIOSSL (identity from the .p12, root pinned, libmtls judging the server through
// `HTTPClient.Configuration.useMTLS`) against
// AsyncHTTPClient with swift-nio-ssl's own configuration from the same files (client-a-chain.pem,
// client-a.key, root.pem as the trust roots), on kept-alive connections and on a new connection
// per request. Rounds alternate the two; the result is the ratio of median times per request.
//
//   make bench-swift-plugins   (or: mtls-niossl-bench [REQUESTS [ROUNDS]])
import AsyncHTTPClient
import Foundation
import MTLS
import MTLSAsyncHTTPClient
import MTLSNIOSSL
import NIOCore
import NIOSSL

let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let requests = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 200 : 200
let rounds = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 5 : 5

func sh(_ command: String) throws {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/bash")
    p.arguments = ["-c", command]
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else { throw MTLSError(.io, "\(command): exit \(p.terminationStatus)") }
}

let dir = NSTemporaryDirectory() + "mtls-niossl-bench-" + UUID().uuidString
try sh("'\(repository)/scripts/test-pki.sh' '\(dir)/pki' && cat '\(dir)/pki/int-a.pem' '\(dir)/pki/root.pem' > '\(dir)/client-cas.pem'")
let pki = dir + "/pki"

// nginx through Tests/support/nginx_server.py, stopped when its stdin closes.
let nginx = Process()
let nginxInput = Pipe(), nginxOutput = Pipe()
nginx.executableURL = URL(fileURLWithPath: "/usr/bin/env")
nginx.arguments = ["python3", "-c", """
    import sys; sys.path.insert(0, sys.argv[1]); import nginx_server
    s = nginx_server.start(sys.argv[2], server_chain=sys.argv[3], server_key=sys.argv[4], client_ca=sys.argv[5])
    print(s.port, flush=True); sys.stdin.read(); s.stop()
    """, repository + "/Tests/support", dir + "/nginx", pki + "/server-chain.pem", pki + "/server.key", dir + "/client-cas.pem"]
nginx.standardInput = nginxInput
nginx.standardOutput = nginxOutput
try nginx.run()
var line = Data()
while let byte = try nginxOutput.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line += byte }
guard let port = Int(String(decoding: line, as: UTF8.self)) else { throw MTLSError(.connect, "nginx did not start") }
defer { try? nginxInput.fileHandleForWriting.close(); nginx.waitUntilExit() }

// The plugin: the seed scenario.
let identity = try PKCS12.load(path: pki + "/client-a.p12", password: SecretBytes("pw")).requireIdentity()
let policy = TrustPolicy(anchors: try Certificate.load(path: pki + "/root.pem"), anchorsOnly: true)
policy.addHostRule(HostRule(pattern: try HostPattern("127.0.0.1"), verifyAs: "server.test"))
let plugin = try MTLSClientTLS(identity: identity, policy: policy)

// swift-nio-ssl's own configuration from the same files.
var native = TLSConfiguration.makeClientConfiguration()
native.certificateChain = try NIOSSLCertificate.fromPEMFile(pki + "/client-a-chain.pem").map { .certificate($0) }
native.privateKey = .privateKey(try NIOSSLPrivateKey(file: pki + "/client-a.key", format: .pem))
native.trustRoots = .file(pki + "/root.pem")
native.certificateVerification = .noHostnameVerification

/// `plugin` nil: swift-nio-ssl's own configuration `tls`; else `plugin` through `useMTLS`.
func run(_ tls: TLSConfiguration, plugin: MTLSClientTLS?, newConnections: Bool) async throws -> Double {
    var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
    if let plugin { configuration.useMTLS(plugin) }
    configuration.httpVersion = .http1Only
    if newConnections { configuration.maximumUsesPerConnection = 1 }
    let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    let request = HTTPClientRequest(url: "https://127.0.0.1:\(port)/")
    let start: ContinuousClock.Instant
    do {
        // One request first: the connection (keep-alive) and the caches are warm for both.
        _ = try await client.execute(request, timeout: .seconds(10)).body.collect(upTo: 1 << 16)
        start = ContinuousClock.now
        for _ in 0..<requests {
            let response = try await client.execute(request, timeout: .seconds(10))
            _ = try await response.body.collect(upTo: 1 << 16)
            guard response.status == .ok else { throw MTLSError(.connect, "status \(response.status)") }
        }
    } catch {
        try? await client.shutdown()
        throw error
    }
    let elapsed = ContinuousClock.now - start
    try await client.shutdown()
    let (s, a) = elapsed.components
    return (Double(s) + Double(a) / 1e18) / Double(requests)
}

func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }

for newConnections in [false, true] {
    var withPlugin: [Double] = [], withNative: [Double] = []
    for _ in 0..<rounds {
        withNative.append(try await run(native, plugin: nil, newConnections: newConnections))
        withPlugin.append(try await run(native, plugin: plugin, newConnections: newConnections))
    }
    let p = median(withPlugin), n = median(withNative)
    print(String(format: "%@: MTLSNIOSSL %.1f us/request, swift-nio-ssl %.1f us/request, ratio %.3f (%d requests x %d rounds)",
                 newConnections ? "new connection per request" : "keep-alive", p * 1e6, n * 1e6, p / n, requests, rounds))
}
