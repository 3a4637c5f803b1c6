// mtls-swift-example: a mutual-TLS request from Swift through libmtls, public API only.
//
// Presents the identity in a .p12, trusts only the pinned root, connects by IP address and
// validates the server as its DNS name, sends one request and prints the reply.
//
//   mtls-swift-example 127.0.0.1:8443 client.p12 p12.pw root.pem server.test
import Glibc
import MTLS

let args = CommandLine.arguments
guard args.count == 6, let colon = args[1].lastIndex(of: ":"), let port = UInt16(args[1][args[1].index(after: colon)...]) else {
    print("usage: mtls-swift-example HOST:PORT CLIENT.p12 PASSWORD-FILE ROOT.pem VERIFY-AS")
    exit(2)
}
let host = String(args[1][..<colon])
do {
    // The .p12's password: the first line of a file only its owner can read.
    let password = try FileIO.readSecret(args[3], kind: .password)
    let identity = try PKCS12.load(path: args[2], password: password).requireIdentity()

    // Only the pinned root; the server is validated as VERIFY-AS although we connect by address.
    let policy = TrustPolicy(anchors: try Certificate.load(path: args[4]), anchorsOnly: true)
    var options = TLSClientOptions()
    options.identity = .identity(identity)
    options.policy = policy
    options.validationName = args[5]
    options.serverName = args[5]

    let connection = try TLSConnection.connect(host: host, port: port, options: options)
    defer { connection.close() }
    print("connected: \(connection.tlsVersionName), server: \(connection.peerCertificate?.subjectSummary ?? "?")")
    print("evaluation: \(connection.evaluation?.trusted == true ? "trusted" : "NOT trusted")")
    _ = try connection.write(Array("GET / HTTP/1.0\r\nHost: \(args[5])\r\n\r\n".utf8))
    var reply: [UInt8] = []
    while case let chunk = try connection.read(), !chunk.isEmpty { reply += chunk }
    print(String(decoding: reply, as: UTF8.self))
} catch let error as MTLSError {
    print("error: \(error.code.name): \(error.message)")
    exit(1)
}
