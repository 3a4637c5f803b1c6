import MTLS

// The server's port: the first argument, else 8443.
let port = CommandLine.arguments.dropFirst().first.flatMap { UInt16($0) } ?? 8443
let password = try FileIO.readSecret("p12.pw", kind: .password)
var options = TLSClientOptions()
options.identity = .identity(try PKCS12.load(path: "bob.p12", password: password).requireIdentity())
options.policy = TrustPolicy(anchors: try Certificate.load(path: "pki/root/cert.pem"))
options.validationName = "api.customer-a.internal"
options.handshakeTimeLimit = .after(.seconds(10))   // a Duration; nil: the default (30 s)
let connection = try TLSConnection.connect(host: "127.0.0.1", port: port, options: options)
defer { connection.close() }
try connection.write(Array("GET / HTTP/1.0\r\n\r\n".utf8))
var reply: [UInt8] = []
while case let chunk = try connection.read(), !chunk.isEmpty { reply += chunk }
print(String(decoding: reply, as: UTF8.self))   // HTTP/1.1 200 OK ... hello bob
