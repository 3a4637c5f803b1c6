import Foundation
import MTLS
import MTLSNIOSSL
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization
import XCTest

/// Says "welcome" to a client once its handshake is complete, then closes.
final class WelcomeHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            // The TLS handler sends what is flushed before its close_notify.
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "welcome\n")), promise: nil)
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// A NIO server built with MTLSServerTLS for customer A (clients under int-a only) accepts
/// customer A's client and refuses customer B's, both `openssl s_client`.
final class NIOServerTests: XCTestCase {
    func sClient(port: Int, client: String, version: String) throws -> String {
        let pki = Fixture.pki
        // s_client exits non-zero when the server aborts the handshake: the output tells.
        return try sh("timeout 20 openssl s_client -\(version) -connect 127.0.0.1:\(port) -servername server.test -CAfile \(pki)/root.pem "
                      + "-cert \(pki)/\(client).pem -key \(pki)/\(client).key -ign_eof < /dev/null 2>&1 || true")
    }

    func testServerAcceptsCustomerAAndRefusesCustomerB() throws {
        try Fixture.make()
        let pki = Fixture.pki
        let identity = try Identity(certificatePath: pki + "/server-chain.pem", keyPath: pki + "/server.key")
        let customerA = TrustPolicy(anchors: [try Fixture.certificate("int-a")], anchorsOnly: true, purpose: .clientAuth)
        let refusals = Mutex<[MTLSPeerRejected]>([])
        let tls = try MTLSServerTLS(identity: identity, clientPolicy: customerA,
                                    onRefusal: { rejected in refusals.withLock { $0.append(rejected) } })
        let context = try NIOSSLContext(configuration: tls.tlsConfiguration)
        let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(tls.makeServerHandler(context: context, channel: channel))
                    try channel.pipeline.syncOperations.addHandler(WelcomeHandler())
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
        defer { try? channel.close().wait() }
        let port = try XCTUnwrap(channel.localAddress?.port)

        for version in ["tls1_3", "tls1_2"] {
            let a = try sClient(port: port, client: "client-a", version: version)
            XCTAssertTrue(a.contains("welcome"), "customer A refused (\(version)): \(a)")

            let before = refusals.withLock { $0.count }
            let b = try sClient(port: port, client: "client-b", version: version)
            XCTAssertFalse(b.contains("welcome"), "customer B accepted (\(version)): \(b)")
            let refused = refusals.withLock { $0.dropFirst(before) }
            XCTAssertEqual(refused.count, 1, "\(version): \(refused)")
            XCTAssertTrue(refused.first.map { !$0.result.trusted && $0.peer.host == "127.0.0.1" } ?? false, "\(refused)")
        }
    }
}
