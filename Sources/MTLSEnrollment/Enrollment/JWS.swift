internal import COpenSSL
import FoundationEssentials

/// base64url without padding (RFC 7515 §2), as JWS and ACME use it.
package enum Base64URL {
    package static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacing("+", with: "-")
            .replacing("/", with: "_").replacing("=", with: "")
    }

    static func encode(_ text: String) -> String { encode(Array(text.utf8)) }

    /// Decodes base64url (padding optional); nil for anything else.
    package static func decode(_ text: String) -> [UInt8]? {
        var s = text.replacing("-", with: "+").replacing("_", with: "/")
        guard !s.contains("=") || text.hasSuffix("=") else { return nil }
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map { Array($0) }
    }
}

/// A JSON value written by libmtls: members stay in the order given, so the JWK thumbprint's
/// canonical form (RFC 7638: lexicographic member order, no spaces) is written exactly.
package indirect enum JSONOut: Sendable {
    case string(String), bool(Bool), int(Int), array([JSONOut]), object([(String, JSONOut)]), raw(String)

    package var text: String {
        switch self {
        case .string(let s): return JSONText.quoted(s)
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .array(let a): return "[" + a.map(\.text).joined(separator: ",") + "]"
        case .object(let o): return "{" + o.map { JSONText.quoted($0.0) + ":" + $0.1.text }.joined(separator: ",") + "}"
        case .raw(let r): return r
        }
    }
}

extension JSONValue {
    /// Parses JSON text; ``MTLSError/Code/parse`` naming `what` when it is not JSON.
    package static func parse(_ bytes: [UInt8], _ what: String) throws -> JSONValue {
        guard JSONValue.nestingDepth(bytes) <= JSONValue.maximumDepth else { throw MTLSError(.parse, "\(what) nests too deeply") }
        do { return try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) } catch {
            throw MTLSError(.parse, "\(what) is not JSON")
        }
    }

    package subscript(_ key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    package var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    package var arrayValue: [JSONValue] {
        if case .array(let a) = self { return a }
        return []
    }

    var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }
}

/// JSON Web Signatures for ACME (RFC 8555 §6.2, RFC 7515 flattened JSON): ES256 with a P-256
/// account key, signed by OpenSSL. The only work done here is encoding: OpenSSL's DER
/// ECDSA-Sig-Value is taken apart with OpenSSL (`d2i_ECDSA_SIG`) into the fixed-width `r || s`
/// that JWS requires.
package enum JWS {
    /// The account key's public JWK, members in RFC 7638 order.
    package static func jwk(_ key: PrivateKey) throws -> JSONOut {
        guard key.keyType.shortName == "p256" else {
            throw MTLSError(.unsupported, "an ACME account key must be EC P-256 (ES256)")
        }
        var point = [UInt8](repeating: 0, count: 65)
        var n = 0
        guard EVP_PKEY_get_octet_string_param(key.pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, &point, point.count, &n) == 1,
              n == 65, point[0] == 4 else {
            throw MTLSError.openSSL(.internal, "cannot read the account key's public point")
        }
        return .object([("crv", .string("P-256")), ("kty", .string("EC")),
                        ("x", .string(Base64URL.encode(Array(point[1..<33])))),
                        ("y", .string(Base64URL.encode(Array(point[33..<65]))))])
    }

    /// RFC 7638 thumbprint of the account key (base64url of SHA-256 of the canonical JWK).
    static func thumbprint(_ key: PrivateKey) throws -> String {
        Base64URL.encode(Encoding.sha256(Array(try jwk(key).text.utf8)))
    }

    /// ES256 signature of `input`: SHA-256 and ECDSA by OpenSSL, then `r || s` (32 bytes each).
    package static func es256(_ input: [UInt8], key: PrivateKey) throws -> [UInt8] {
        guard let md = EVP_MD_CTX_new() else { throw MTLSError(.noMemory, "out of memory") }
        defer { EVP_MD_CTX_free(md) }
        guard EVP_DigestSignInit_ex(md, nil, "SHA256", LibraryContext.shared.ctx, nil, key.pkey, nil) == 1 else {
            throw MTLSError.openSSL(.internal, "cannot start an ES256 signature")
        }
        var len = 0
        guard EVP_DigestSign(md, nil, &len, input, input.count) == 1 else { throw MTLSError.openSSL(.internal, "ES256 signing failed") }
        var der = [UInt8](repeating: 0, count: len)
        guard EVP_DigestSign(md, &der, &len, input, input.count) == 1 else { throw MTLSError.openSSL(.internal, "ES256 signing failed") }
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_ECDSA_SIG(nil, &p, len)
        }
        guard let sig else { throw MTLSError.openSSL(.internal, "OpenSSL gave an unreadable ECDSA signature") }
        defer { ECDSA_SIG_free(sig) }
        var r: OpaquePointer? = nil, s: OpaquePointer? = nil
        ECDSA_SIG_get0(sig, &r, &s)
        var out = [UInt8](repeating: 0, count: 64)
        guard let r, let s,
              out.withUnsafeMutableBufferPointer({ BN_bn2binpad(r, $0.baseAddress, 32) }) == 32,
              out.withUnsafeMutableBufferPointer({ BN_bn2binpad(s, $0.baseAddress! + 32, 32) }) == 32 else {
            throw MTLSError.openSSL(.internal, "cannot encode the ECDSA signature")
        }
        return out
    }

    /// HMAC-SHA256 (external account binding, HS256), computed by OpenSSL.
    static func hs256(_ input: [UInt8], key: SecretBytes) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var n = 0
        let ok = key.withBytes { k in
            EVP_Q_mac(LibraryContext.shared.ctx, "HMAC", nil, "SHA256", nil, k.baseAddress, k.count, input, input.count, &out, out.count, &n)
        }
        guard ok != nil, n == 32 else { throw MTLSError.openSSL(.internal, "HMAC-SHA256 failed") }
        return out
    }

    /// A flattened JWS: `protected` header members, then the payload (nil: the empty
    /// POST-as-GET payload), signed with ES256.
    static func sign(protected: [(String, JSONOut)], payload: JSONOut?, key: PrivateKey) throws -> [UInt8] {
        let header = Base64URL.encode(JSONOut.object([("alg", .string("ES256"))] + protected).text)
        let body = payload.map { Base64URL.encode($0.text) } ?? ""
        let signature = try es256(Array("\(header).\(body)".utf8), key: key)
        return Array(JSONOut.object([("protected", .string(header)), ("payload", .string(body)),
                                     ("signature", .string(Base64URL.encode(signature)))]).text.utf8)
    }
}
