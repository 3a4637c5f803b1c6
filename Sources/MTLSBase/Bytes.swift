internal import COpenSSL
import FoundationEssentials

/// Hex and base64 forms used across libmtls (fingerprints, pins).
package enum Encoding {
    package static func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        let digits: [Character] = Array("0123456789abcdef")
        var s = ""
        for b in bytes {
            s.append(digits[Int(b >> 4)])
            s.append(digits[Int(b & 0x0f)])
        }
        return s
    }

    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { p in
            _ = SHA256(p.baseAddress, p.count, &out)
        }
        return out
    }
}

/// A buffer of secret bytes (passwords, PINs, key material) that is wiped when released.
/// Sendable: the bytes are written only by `init` and by the wipe in `deinit`.
public final class SecretBytes: @unchecked Sendable {
    package private(set) var storage: [UInt8]

    /// Takes a copy of `bytes`; the caller wipes its own copy.
    public init(_ bytes: [UInt8]) { storage = bytes }
    /// A UTF-8 secret.
    public convenience init(_ string: String) { self.init(Array(string.utf8)) }

    /// The number of bytes.
    public var count: Int { storage.count }

    /// Scoped read access.
    public func withBytes<T>(_ body: (UnsafeBufferPointer<UInt8>) throws -> T) rethrows -> T {
        try storage.withUnsafeBufferPointer(body)
    }

    deinit { Self.wipe(&storage) }

    /// Overwrites an array's bytes in place with zeros (through OPENSSL_cleanse, which the
    /// compiler may not optimise away).
    public static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { p in
            if let base = p.baseAddress { mtls_ossl_OPENSSL_cleanse(base, p.count) }
        }
    }
}

/// Owns a memory BIO; frees it on deinit.
package final class MemoryBIO {
    package let bio: OpaquePointer

    /// A read-only BIO over a copy of `bytes`.
    package init(copying bytes: [UInt8]) throws {
        guard let b = BIO_new(BIO_s_mem()) else { throw MTLSError(.noMemory, "BIO_new failed") }
        guard bytes.count <= Int(Int32.max) else {
            BIO_free(b)
            throw MTLSError(.limitExceeded, "input of \(bytes.count) bytes is too large")
        }
        bio = b
        if !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { BIO_write(b, $0.baseAddress, Int32($0.count)) }
            guard n == Int32(bytes.count) else { BIO_free(b); throw MTLSError(.noMemory, "BIO_write failed") }
        }
    }

    /// An empty, writable BIO.
    package init() throws {
        guard let b = BIO_new(BIO_s_mem()) else { throw MTLSError(.noMemory, "BIO_new failed") }
        bio = b
    }

    /// Everything written so far.
    package var contents: [UInt8] {
        var p: UnsafeMutablePointer<CChar>? = nil
        let n = mtls_ossl_BIO_get_mem_data(bio, &p)
        guard n > 0, let p else { return [] }
        return p.withMemoryRebound(to: UInt8.self, capacity: n) { Array(UnsafeBufferPointer(start: $0, count: n)) }
    }

    deinit { BIO_free(bio) }
}

/// Calls an OpenSSL `i2d_*` function twice (size, then bytes) and returns the DER.
package func derEncode(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) -> [UInt8]? {
    let n = encode(nil)
    guard n > 0 else { return nil }
    var out = [UInt8](repeating: 0, count: Int(n))
    let written = out.withUnsafeMutableBufferPointer { buf -> Int32 in
        var p: UnsafeMutablePointer<UInt8>? = buf.baseAddress
        return encode(&p)
    }
    return written == n ? out : nil
}

extension String {
    /// The text of a C buffer that holds a NUL-terminated string (or fills the buffer without a
    /// NUL); invalid UTF-8 is repaired, never trapped on.
    package init(cBuffer buffer: [CChar]) {
        let end = buffer.firstIndex(of: 0) ?? buffer.endIndex
        self = String(decoding: buffer[..<end].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
