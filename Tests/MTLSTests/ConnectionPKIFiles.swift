import Foundation
@testable import MTLS

/// The connection PKI's files (scripts/test-pki.sh, made once in ``TLSConnectionTests/pkiDir``)
/// for the test classes that connect with them.
protocol ConnectionPKIFiles {}

extension ConnectionPKIFiles {
    func path(_ name: String) -> String { TLSConnectionTests.pkiDir + "/" + name }
    func cert(_ name: String) throws -> Certificate { try Certificate.load(path: path(name + ".pem"))[0] }
    func identity(_ name: String, chain: [String] = ["int-a"]) throws -> Identity {
        let key = try PrivateKey(pem: FileIO.read(path(name + ".key")), password: nil)
        return try Identity(privateKey: key, leaf: cert(name), certificates: chain.map { try cert($0) })
    }
    func policy(_ anchors: [String]) throws -> TrustPolicy {
        TrustPolicy(anchors: try anchors.map { try cert($0) }, anchorsOnly: true)
    }
}
