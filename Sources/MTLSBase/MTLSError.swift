internal import COpenSSL
internal import CMTLSHeader

/// An error from libmtls: a stable ``Code`` (whose raw value is the C ABI's `MTLS_E_*` number)
/// and a message that says what happened, with OpenSSL's own words appended where it spoke.
///
/// Deliberately a struct with an extensible code rather than a frozen enum, so new codes can be
/// added without breaking callers (the model is swift-certificates' `CertificateError`).
public struct MTLSError: Error, Hashable, CustomStringConvertible, Sendable {
    /// A stable error code. Raw values never change; new codes are added, never renumbered. Each
    /// is the header's `MTLS_E_*` constant (`make test-abi` checks that every one is mirrored).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The C status number (`MTLS_E_*`, negative; never renumbered).
        public let rawValue: Int32
        /// The code with C status number `rawValue`.
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// A code of the header's `mtls_status`: the numbers are written in include/mtls.h only.
        init(header status: mtls_status) { self.rawValue = status.rawValue }

        // General
        /// `MTLS_E_INVALID_ARGUMENT`: invalid argument.
        public static let invalidArgument = Code(header: MTLS_E_INVALID_ARGUMENT)
        /// `MTLS_E_NO_MEMORY`: out of memory.
        public static let noMemory = Code(header: MTLS_E_NO_MEMORY)
        /// `MTLS_E_INTERNAL`: internal error.
        public static let `internal` = Code(header: MTLS_E_INTERNAL)
        /// `MTLS_E_IO`: input/output error.
        public static let io = Code(header: MTLS_E_IO)
        /// `MTLS_E_PARSE`: cannot parse the data.
        public static let parse = Code(header: MTLS_E_PARSE)
        /// `MTLS_E_BUFFER_TOO_SMALL`: buffer too small.
        public static let bufferTooSmall = Code(header: MTLS_E_BUFFER_TOO_SMALL)
        /// `MTLS_E_NOT_FOUND`: not found.
        public static let notFound = Code(header: MTLS_E_NOT_FOUND)
        // PKCS#12 and keys
        /// `MTLS_E_BAD_PASSWORD`: wrong password.
        public static let badPassword = Code(header: MTLS_E_BAD_PASSWORD)
        /// `MTLS_E_CORRUPT`: corrupt or truncated data.
        public static let corrupt = Code(header: MTLS_E_CORRUPT)
        /// `MTLS_E_NOT_PKCS12`: not a PKCS#12 file.
        public static let notPKCS12 = Code(header: MTLS_E_NOT_PKCS12)
        /// `MTLS_E_NO_IDENTITY`: no private key with a certificate.
        public static let noIdentity = Code(header: MTLS_E_NO_IDENTITY)
        /// `MTLS_E_UNSUPPORTED`: unsupported algorithm or feature.
        public static let unsupported = Code(header: MTLS_E_UNSUPPORTED)
        /// `MTLS_E_KEY_MISMATCH`: private key does not match the certificate.
        public static let keyMismatch = Code(header: MTLS_E_KEY_MISMATCH)
        /// `MTLS_E_LIMIT`: input exceeds a safety limit.
        public static let limitExceeded = Code(header: MTLS_E_LIMIT)
        // Store
        /// `MTLS_E_DUPLICATE`: an item with this label already exists.
        public static let duplicate = Code(header: MTLS_E_DUPLICATE)
        /// `MTLS_E_BAD_SECRET`: wrong store secret.
        public static let badSecret = Code(header: MTLS_E_BAD_SECRET)
        /// `MTLS_E_NOT_A_STORE`: not a libmtls store.
        public static let notAStore = Code(header: MTLS_E_NOT_A_STORE)
        /// `MTLS_E_SCHEMA_TOO_NEW`: store was written by a newer libmtls.
        public static let schemaTooNew = Code(header: MTLS_E_SCHEMA_TOO_NEW)
        /// `MTLS_E_LOCKED`: store is locked by another user.
        public static let locked = Code(header: MTLS_E_LOCKED)
        /// `MTLS_E_READ_ONLY`: store location is read-only.
        public static let readOnly = Code(header: MTLS_E_READ_ONLY)
        /// `MTLS_E_DISK_FULL`: disk full.
        public static let diskFull = Code(header: MTLS_E_DISK_FULL)
        // Trust
        /// `MTLS_E_INVALID_POLICY`: invalid trust policy.
        public static let invalidPolicy = Code(header: MTLS_E_INVALID_POLICY)
        /// `MTLS_E_UNTRUSTED`: peer is not trusted.
        public static let untrusted = Code(header: MTLS_E_UNTRUSTED)
        // Connections
        /// `MTLS_E_CONNECT`: cannot connect.
        public static let connect = Code(header: MTLS_E_CONNECT)
        /// `MTLS_E_TIMEOUT`: operation timed out.
        public static let timeout = Code(header: MTLS_E_TIMEOUT)
        /// `MTLS_E_HANDSHAKE`: TLS handshake failed.
        public static let handshake = Code(header: MTLS_E_HANDSHAKE)
        /// `MTLS_E_PEER_ALERT`: peer rejected the connection.
        public static let peerAlert = Code(header: MTLS_E_PEER_ALERT)
        /// `MTLS_E_WANT_READ`: operation would block (wants to read).
        public static let wantRead = Code(header: MTLS_E_WANT_READ)
        /// `MTLS_E_WANT_WRITE`: operation would block (wants to write).
        public static let wantWrite = Code(header: MTLS_E_WANT_WRITE)
        /// `MTLS_E_CLOSED`: connection closed.
        public static let closed = Code(header: MTLS_E_CLOSED)
        /// `MTLS_E_NO_MATCHING_IDENTITY`: no identity matches the server's request.
        public static let noMatchingIdentity = Code(header: MTLS_E_NO_MATCHING_IDENTITY)
        // Tokens
        /// `MTLS_E_TOKEN`: PKCS#11 token error.
        public static let token = Code(header: MTLS_E_TOKEN)
        /// `MTLS_E_PIN_INCORRECT`: wrong PIN.
        public static let pinIncorrect = Code(header: MTLS_E_PIN_INCORRECT)
        /// `MTLS_E_PIN_LOCKED`: PIN is locked.
        public static let pinLocked = Code(header: MTLS_E_PIN_LOCKED)
        /// `MTLS_E_TOKEN_NOT_PRESENT`: token not present.
        public static let tokenNotPresent = Code(header: MTLS_E_TOKEN_NOT_PRESENT)
        /// `MTLS_E_TOKEN_REMOVED`: token was removed.
        public static let tokenRemoved = Code(header: MTLS_E_TOKEN_REMOVED)
        /// `MTLS_E_BAD_URI`: invalid PKCS#11 URI.
        public static let badURI = Code(header: MTLS_E_BAD_URI)
        /// `MTLS_E_PIN_REQUIRED`: a PIN is required.
        public static let pinRequired = Code(header: MTLS_E_PIN_REQUIRED)
        // Connections, added later
        /// The peer closed the connection without close_notify: what was read may be cut short.
        public static let truncated = Code(header: MTLS_E_TRUNCATED)
        // Store (0.2.0)
        /// A store made before row authentication: it opens only after an explicit upgrade
        /// (``CredentialStore/upgrade(path:secret:confirming:options:)``, `mtls store upgrade`).
        public static let upgradeRequired = Code(header: MTLS_E_UPGRADE_REQUIRED)
        // Enrollment and renewal
        /// The certificate authority (ACME, EST) refused the request; the message carries its detail.
        public static let caRejected = Code(header: MTLS_E_CA_REJECTED)
        /// A challenge was not validated, or a renewed identity could not be proven (key or chain).
        public static let challengeFailed = Code(header: MTLS_E_CHALLENGE_FAILED)

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
            (.truncated, "truncated", "connection closed without close_notify: the data may be truncated"),
            (.upgradeRequired, "upgrade_required", "the store must be upgraded explicitly first"),
            (.caRejected, "ca_rejected", "the certificate authority refused the request"),
            (.challengeFailed, "challenge_failed", "the challenge or the proof of the new identity failed"),
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

        /// The stable name (``name``).
        public var description: String { name }
    }

    /// The stable code.
    public let code: Code
    /// What happened, in a sentence: one line, whatever outside text it quotes (a file name, a
    /// label, a CA's problem detail, a server's answer) — it is cleaned as it is made, so no front end prints a control, separator or bidirectional character from it.
    public let message: String
    /// Which side of a connection failed or refused, where the step that failed knows it before
    /// there is a TLS connection to ask (``TLSConnection/failureSide`` says it after): a server
    /// that cannot be reached or does not answer in time is the server's side; a name that does
    /// not resolve, or a socket that cannot be made, the client's. nil for every other error.
    public let side: TLSSide?
    /// What a higher layer attached to the error: the TLS layer's details of the failed
    /// connection (`MTLSError.connectionFailure`). Not part of the error's equality or hash.
    package let attachment: (any Sendable)?

    /// An error with a stable code and a message saying what happened.
    public init(_ code: Code, _ message: String) {
        self.init(code, message, side: nil)
    }

    /// An error with a stable code, a message, and the side of the connection that failed.
    public init(_ code: Code, _ message: String, side: TLSSide?) {
        self.code = code
        self.message = OneLine.text(message)
        self.side = side
        self.attachment = nil
    }

    /// The same error with `side` and `attachment` set (the message is already one line).
    package init(_ error: MTLSError, side: TLSSide?, attachment: (any Sendable)?) {
        code = error.code
        message = error.message
        self.side = side
        self.attachment = attachment
    }

    /// Errors are equal when their code, message and side are.
    public static func == (a: MTLSError, b: MTLSError) -> Bool {
        a.code == b.code && a.message == b.message && a.side == b.side
    }

    /// Hashes the code, message and side.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
        hasher.combine(side)
    }

    /// The message.
    public var description: String { message }

    /// An error whose message ends with what OpenSSL put on its error queue, which is drained.
    package static func openSSL(_ code: Code, _ message: String) -> MTLSError {
        let stack = OpenSSLErrorQueue.drain()
        if stack.isEmpty { return MTLSError(code, message) }
        return MTLSError(code, "\(message): \(stack.joined(separator: "; "))")
    }
}

/// OpenSSL's per-thread error queue.
package enum OpenSSLErrorQueue {
    /// Removes every entry from this thread's error queue and returns their texts, oldest first.
    package static func drain() -> [String] {
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
    package static func peekLastReason() -> Int32 {
        ERR_GET_REASON(ERR_peek_last_error())
    }

    /// Empties this thread's error queue. An empty queue (the common case: before every
    /// `SSL_read`, `SSL_write` and handshake step) is only looked at: `ERR_clear_error` wipes
    /// all 16 slots of the queue each time, about 850 instructions (issue 40), where a look is a
    /// tenth of that. `ERR_peek_error` is 0 exactly when no entry is left (it drops cleared
    /// ones), which is also all `SSL_get_error` looks at.
    package static func clear() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }
}
