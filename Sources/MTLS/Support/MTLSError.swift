internal import COpenSSL

/// An error from libmtls: a stable ``Code`` (whose raw value is the C ABI's `MTLS_E_*` number)
/// and a message that says what happened, with OpenSSL's own words appended where it spoke.
///
/// Deliberately a struct with an extensible code rather than a frozen enum, so new codes can be
/// added without breaking callers (the model is swift-certificates' `CertificateError`).
public struct MTLSError: Error, Hashable, CustomStringConvertible, Sendable {
    /// A stable error code. Raw values never change; new codes are added, never renumbered.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        // General
        public static let invalidArgument = Code(rawValue: -1)
        public static let noMemory = Code(rawValue: -2)
        public static let `internal` = Code(rawValue: -3)
        public static let io = Code(rawValue: -4)
        public static let parse = Code(rawValue: -5)
        public static let bufferTooSmall = Code(rawValue: -6)
        public static let notFound = Code(rawValue: -7)
        // PKCS#12 and keys
        public static let badPassword = Code(rawValue: -10)
        public static let corrupt = Code(rawValue: -11)
        public static let notPKCS12 = Code(rawValue: -12)
        public static let noIdentity = Code(rawValue: -13)
        public static let unsupported = Code(rawValue: -14)
        public static let keyMismatch = Code(rawValue: -15)
        public static let limitExceeded = Code(rawValue: -16)
        // Store
        public static let duplicate = Code(rawValue: -20)
        public static let badSecret = Code(rawValue: -21)
        public static let notAStore = Code(rawValue: -22)
        public static let schemaTooNew = Code(rawValue: -23)
        public static let locked = Code(rawValue: -24)
        public static let readOnly = Code(rawValue: -25)
        public static let diskFull = Code(rawValue: -26)
        // Trust
        public static let invalidPolicy = Code(rawValue: -30)
        public static let untrusted = Code(rawValue: -31)
        // Connections
        public static let connect = Code(rawValue: -40)
        public static let timeout = Code(rawValue: -41)
        public static let handshake = Code(rawValue: -42)
        public static let peerAlert = Code(rawValue: -43)
        public static let wantRead = Code(rawValue: -44)
        public static let wantWrite = Code(rawValue: -45)
        public static let closed = Code(rawValue: -46)
        public static let noMatchingIdentity = Code(rawValue: -47)
        // Tokens
        public static let token = Code(rawValue: -50)
        public static let pinIncorrect = Code(rawValue: -51)
        public static let pinLocked = Code(rawValue: -52)
        public static let tokenNotPresent = Code(rawValue: -53)
        public static let tokenRemoved = Code(rawValue: -54)
        public static let badURI = Code(rawValue: -55)
        public static let pinRequired = Code(rawValue: -56)
        // Store (0.2.0)
        /// A store made before row authentication: it opens only after an explicit upgrade
        /// (``CredentialStore/upgrade(path:secret:confirming:options:)``, `mtls store upgrade`).
        public static let upgradeRequired = Code(rawValue: -57)

        /// Every code with its stable name and its static text (the C ABI's `mtls_strerror`).
        public static let all: [(Code, String, String)] = [
            (.invalidArgument, "invalid_argument", "invalid argument"),
            (.noMemory, "no_memory", "out of memory"),
            (.internal, "internal", "internal error"),
            (.io, "io", "input/output error"),
            (.parse, "parse", "cannot parse the data"),
            (.bufferTooSmall, "buffer_too_small", "buffer too small"),
            (.notFound, "not_found", "not found"),
            (.badPassword, "bad_password", "wrong password"),
            (.corrupt, "corrupt", "corrupt or truncated data"),
            (.notPKCS12, "not_pkcs12", "not a PKCS#12 file"),
            (.noIdentity, "no_identity", "no private key with a certificate"),
            (.unsupported, "unsupported", "unsupported algorithm or feature"),
            (.keyMismatch, "key_mismatch", "private key does not match the certificate"),
            (.limitExceeded, "limit_exceeded", "input exceeds a safety limit"),
            (.duplicate, "duplicate", "an item with this label already exists"),
            (.badSecret, "bad_secret", "wrong store secret"),
            (.notAStore, "not_a_store", "not a libmtls store"),
            (.schemaTooNew, "schema_too_new", "store was written by a newer libmtls"),
            (.locked, "locked", "store is locked by another user"),
            (.readOnly, "read_only", "store location is read-only"),
            (.diskFull, "disk_full", "disk full"),
            (.invalidPolicy, "invalid_policy", "invalid trust policy"),
            (.untrusted, "untrusted", "peer is not trusted"),
            (.connect, "connect", "cannot connect"),
            (.timeout, "timeout", "operation timed out"),
            (.handshake, "handshake", "TLS handshake failed"),
            (.peerAlert, "peer_alert", "peer rejected the connection"),
            (.wantRead, "want_read", "operation would block (wants to read)"),
            (.wantWrite, "want_write", "operation would block (wants to write)"),
            (.closed, "closed", "connection closed"),
            (.noMatchingIdentity, "no_matching_identity", "no identity matches the server's request"),
            (.token, "token", "PKCS#11 token error"),
            (.pinIncorrect, "pin_incorrect", "wrong PIN"),
            (.pinLocked, "pin_locked", "PIN is locked"),
            (.tokenNotPresent, "token_not_present", "token not present"),
            (.tokenRemoved, "token_removed", "token was removed"),
            (.badURI, "bad_uri", "invalid PKCS#11 URI"),
            (.pinRequired, "pin_required", "a PIN is required"),
            (.upgradeRequired, "upgrade_required", "the store must be upgraded explicitly first"),
        ]

        /// The stable snake_case name of the code (`"bad_password"`), used in JSON output.
        public var name: String {
            Self.all.first { $0.0 == self }?.1 ?? "unknown"
        }

        /// The static text of the code.
        public var text: String {
            if rawValue == 0 { return "ok" }
            return Self.all.first { $0.0 == self }?.2 ?? "unknown error"
        }

        public var description: String { name }
    }

    /// The stable code.
    public let code: Code
    /// What happened, in a sentence.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    /// An error whose message ends with what OpenSSL put on its error queue, which is drained.
    static func openSSL(_ code: Code, _ message: String) -> MTLSError {
        let stack = OpenSSLErrorQueue.drain()
        if stack.isEmpty { return MTLSError(code, message) }
        return MTLSError(code, "\(message): \(stack.joined(separator: "; "))")
    }
}

/// OpenSSL's per-thread error queue.
enum OpenSSLErrorQueue {
    /// Removes every entry from this thread's error queue and returns their texts, oldest first.
    static func drain() -> [String] {
        var out: [String] = []
        while true {
            var file: UnsafePointer<CChar>? = nil
            var line: Int32 = 0
            var data: UnsafePointer<CChar>? = nil
            var flags: Int32 = 0
            let e = ERR_get_error_all(&file, &line, nil, &data, &flags)
            if e == 0 { break }
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(e, &buf, buf.count)
            var text = String(cBuffer: buf)
            if let data, (flags & ERR_TXT_STRING) != 0, data.pointee != 0 {
                text += " (\(String(cString: data)))"
            }
            out.append(text)
        }
        return out
    }

    /// The reason code of the most recent entry, without removing anything.
    static func peekLastReason() -> Int32 {
        ERR_GET_REASON(ERR_peek_last_error())
    }

    static func clear() { ERR_clear_error() }
}
