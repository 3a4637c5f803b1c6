internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// How one forwarding loop ended.
public struct ForwardResult: Sendable {
    /// Bytes read from the TLS peer and written to the plaintext socket (with a request
    /// rewriter: the rewritten bytes written).
    public var bytesFromTLS: UInt64 = 0
    /// Bytes read from the plaintext socket and written to the TLS peer.
    public var bytesToTLS: UInt64 = 0
    /// Neither side sent or took anything for the idle timeout.
    public var idleTimedOut = false
    /// The TLS peer hung up without close_notify (passed on as the end of its data).
    public var truncated = false
    /// What stopped the loop early: a TLS or socket error on either side. nil when both sides
    /// ended their data (or the idle timeout).
    public var error: MTLSError?
    /// The plaintext socket's connect, left under way for ``TLSForwarder`` (its `connectTimeout`),
    /// failed or timed out: ``error`` says how; nothing was forwarded.
    public var plainConnectFailed = false
}

/// One forwarded pair's state: a handshaken TLS connection and a plaintext socket, both
/// non-blocking. The one state machine behind both ``TLSConnection/forward(to:idleTimeout:counters:requestRewriter:)``
/// (a `poll` loop on the caller's thread) and ``TLSForwarder`` (an epoll loop over many pairs).
///
/// Bytes are read into a scratch buffer the driver lends to ``step(scratch:)`` (one per
/// thread); only what a short write leaves behind is copied into the pair's own `toPlain` /
/// `toTLS` (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, set on every connection, lets SSL_write be
/// retried from that copy), so an idle pair holds no buffer. A step runs until nothing moves:
/// after SSL_read returns data it reads again, so records OpenSSL holds decrypted or buffered
/// are drained before the driver waits on the socket (TLS readability is waited for only
/// after SSL_read said WANT_READ).
final class ForwardPair {
    let conn: TLSConnection
    let plain: Int32
    let counters: ForwardCounters?
    var rewriter: HTTPRequestRewriter?
    var result = ForwardResult()
    /// Seconds with nothing moving before the pair ends (nil: never).
    let idleTimeout: Double?
    /// When something last moved (Deadline.now()).
    var lastActivity = Deadline.now()
    /// The plaintext socket's non-blocking connect is still under way, until this time.
    var connectDeadline: Double?

    private var toPlain: [UInt8] = [], toPlainStart = 0
    /// Leading bytes of `toPlain` that are not forwarded data (the prefix): not counted.
    private var uncounted = 0
    private var toTLS: [UInt8] = [], toTLSStart = 0
    private var tlsEnded = false, plainShut = false, plainEnded = false, tlsShut = false
    // The event the last TLS read / write (or shutdown) waits for.
    private var tlsReadWait: Int16 = 0, tlsWriteWait: Int16 = 0

    /// What a step asks for next.
    enum Next {
        /// Both directions ended, or an error, the idle timeout or a failed connect: `result` says which.
        case done
        /// Wait for these poll(2) events on the TLS socket and the plaintext socket (0: none).
        case wait(tls: Int16, plain: Int16)
    }

    init(conn: TLSConnection, plain: Int32, idleTimeout: Double?, counters: ForwardCounters?,
         requestRewriter: HTTPRequestRewriter?, prefix: [UInt8] = [], connectDeadline: Double? = nil) {
        self.conn = conn
        self.plain = plain
        self.idleTimeout = idleTimeout.map { max($0, 0) }
        self.counters = counters
        self.rewriter = requestRewriter
        self.connectDeadline = connectDeadline
        toPlain = prefix
        uncounted = prefix.count
        Socket.setNonBlocking(conn.fileDescriptor, true)
        Socket.setNonBlocking(plain, true)
    }

    /// When the idle timeout or the connect deadline ends the pair (nil: never).
    var deadline: Double? {
        if let connectDeadline { return connectDeadline }
        return idleTimeout.map { lastActivity + $0 }
    }

    /// Ends the pair from outside (the forwarder closing, a deadline passed) with `error`.
    func fail(_ error: MTLSError) {
        if result.error == nil { result.error = error }
    }

    /// Checks the deadlines at `now`; true when the pair has ended by one of them.
    func expired(now: Double) -> Bool {
        if let connectDeadline, now >= connectDeadline {
            result.plainConnectFailed = true
            fail(MTLSError(.timeout, "connecting to the plaintext side timed out"))
            return true
        }
        if let idleTimeout, connectDeadline == nil, now >= lastActivity + idleTimeout {
            result.idleTimedOut = true
            return true
        }
        return false
    }

    /// Moves every byte that can move now, without blocking.
    func step(scratch: UnsafeMutableRawBufferPointer) -> Next {
        if connectDeadline != nil {
            do {
                guard try Socket.finishConnect(plain, to: "the plaintext side") else { return .wait(tls: 0, plain: Int16(POLLOUT)) }
            } catch {
                result.plainConnectFailed = true
                result.error = error as? MTLSError ?? MTLSError(.connect, "\(error)")
                return .done
            }
            connectDeadline = nil
            lastActivity = Deadline.now()
        }
        if !conn.isHandshakeComplete {
            // A non-blocking connection handed over before its handshake ended (TLSForwarder).
            do {
                try conn.handshake()
            } catch let e as MTLSError where e.code == .wantRead {
                return .wait(tls: Int16(POLLIN), plain: 0)
            } catch let e as MTLSError where e.code == .wantWrite {
                return .wait(tls: Int16(POLLOUT), plain: 0)
            } catch {
                result.error = error as? MTLSError ?? MTLSError(.handshake, "\(error)")
                return .done
            }
            lastActivity = Deadline.now()
        }
        let ssl = conn.ssl
        let size = scratch.count
        var progress = true, moved = false
        defer { if moved { lastActivity = Deadline.now() } }
        while progress {
            progress = false
            // The TLS peer to the plaintext socket.
            if toPlainStart == toPlain.count && !tlsEnded {
                tlsReadWait = 0
                OpenSSLErrorQueue.clear()
                var n = 0
                let r = SSL_read_ex(ssl, scratch.baseAddress, size, &n)
                if r == 1 {
                    progress = true
                    moved = true
                    let read = UnsafeRawBufferPointer(start: scratch.baseAddress, count: n)
                    if rewriter != nil {
                        var rewritten: [UInt8] = []
                        do {
                            try rewriter?.feed(read, into: &rewritten)
                        } catch {
                            if rewriter?.requests == 0 && toTLSStart == toTLS.count {
                                // Best effort: the connection is closed after it either way.
                                let response = error.response
                                var written = 0
                                _ = response.withUnsafeBytes { SSL_write_ex(ssl, $0.baseAddress, $0.count, &written) }
                                OpenSSLErrorQueue.clear()
                            }
                            result.error = error.error
                            return .done
                        }
                        (toPlain, toPlainStart) = (rewritten, 0)
                    } else {
                        guard let sent = sendToPlain(read) else { return .done }
                        // What the socket did not take waits in the pair's own buffer.
                        if sent < n { (toPlain, toPlainStart) = (Array(UnsafeRawBufferPointer(rebasing: read[sent...])), 0) }
                    }
                } else {
                    let cause = errno
                    let err = SSL_get_error(ssl, r)
                    switch err {
                    case SSL_ERROR_ZERO_RETURN:
                        tlsEnded = true
                        progress = true
                    case SSL_ERROR_WANT_READ: tlsReadWait = Int16(POLLIN)
                    case SSL_ERROR_WANT_WRITE: tlsReadWait = Int16(POLLOUT)
                    default:
                        if TLSConnection.isUnexpectedEOF(err, cause) {
                            OpenSSLErrorQueue.clear()
                            result.truncated = true
                            tlsEnded = true
                            progress = true
                        } else {
                            result.error = conn.ioError(err, cause, "reading from")
                            return .done
                        }
                    }
                }
            }
            if toPlainStart < toPlain.count {
                let start = toPlainStart
                guard let sent = toPlain.withUnsafeBytes({ sendToPlain(UnsafeRawBufferPointer(rebasing: $0[start...])) }) else { return .done }
                if sent > 0 { progress = true; moved = true }
                toPlainStart += sent
                if toPlainStart == toPlain.count { (toPlain, toPlainStart) = ([], 0) }
            }
            if toPlainStart == toPlain.count && tlsEnded && !plainShut {
                Glibc.shutdown(plain, Int32(SHUT_WR))
                plainShut = true
                progress = true
            }
            // The plaintext socket to the TLS peer.
            if toTLSStart == toTLS.count && !plainEnded {
                let n = recv(plain, scratch.baseAddress, size, 0)
                if n > 0 {
                    progress = true
                    moved = true
                    switch writeToTLS(UnsafeRawBufferPointer(start: scratch.baseAddress, count: n)) {
                    case .failed: return .done
                    case .wrote(let w) where w < n:
                        // What SSL_write did not take waits in the pair's own buffer.
                        toTLS = Array(UnsafeRawBufferPointer(start: scratch.baseAddress! + w, count: n - w))
                        toTLSStart = 0
                    case .wrote: break
                    }
                } else if n == 0 {
                    plainEnded = true
                    progress = true
                } else if errno == EINTR {
                    progress = true
                } else if errno != EAGAIN {
                    result.error = MTLSError(.closed, "reading from the plaintext side: \(String(cString: strerror(errno)))")
                    return .done
                }
            } else if toTLSStart < toTLS.count {
                let start = toTLSStart
                switch toTLS.withUnsafeBytes({ writeToTLS(UnsafeRawBufferPointer(rebasing: $0[start...])) }) {
                case .failed: return .done
                case .wrote(let w):
                    if w > 0 { progress = true; moved = true }
                    toTLSStart += w
                    if toTLSStart == toTLS.count { (toTLS, toTLSStart) = ([], 0) }
                }
            }
            if toTLSStart == toTLS.count && plainEnded && !tlsShut {
                tlsWriteWait = 0
                OpenSSLErrorQueue.clear()
                let r = SSL_shutdown(ssl)
                if r < 0 && SSL_get_error(ssl, r) == SSL_ERROR_WANT_WRITE {
                    tlsWriteWait = Int16(POLLOUT)
                } else {
                    // Sent (or the connection is gone, which the read side reports).
                    OpenSSLErrorQueue.clear()
                    tlsShut = true
                    progress = true
                }
            }
        }
        if tlsEnded && plainShut && plainEnded && tlsShut { return .done }
        var tlsEvents: Int16 = 0, plainEvents: Int16 = 0
        if toPlainStart == toPlain.count && !tlsEnded { tlsEvents |= tlsReadWait }
        if toTLSStart < toTLS.count || (plainEnded && !tlsShut) { tlsEvents |= tlsWriteWait }
        if toTLSStart == toTLS.count && !plainEnded { plainEvents |= Int16(POLLIN) }
        if toPlainStart < toPlain.count { plainEvents |= Int16(POLLOUT) }
        return .wait(tls: tlsEvents, plain: plainEvents)
    }

    /// Sends what of `bytes` the plaintext socket takes now: how many; nil on an error (in `result`).
    private func sendToPlain(_ bytes: UnsafeRawBufferPointer) -> Int? {
        var off = 0
        while off < bytes.count {
            let n = send(plain, bytes.baseAddress! + off, bytes.count - off, Int32(MSG_NOSIGNAL))
            if n > 0 {
                off += n
                let counted = n - min(n, uncounted)
                uncounted -= n - counted
                if counted > 0 {
                    result.bytesFromTLS += UInt64(counted)
                    counters?.addFromTLS(counted)
                }
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN {
                break
            } else {
                result.error = MTLSError(.closed, "writing to the plaintext side: \(String(cString: strerror(errno)))")
                return nil
            }
        }
        return off
    }

    private enum Written { case wrote(Int), failed }

    /// One SSL_write_ex of `bytes` (a partial write may take part of them): how many it took.
    private func writeToTLS(_ bytes: UnsafeRawBufferPointer) -> Written {
        tlsWriteWait = 0
        OpenSSLErrorQueue.clear()
        var n = 0
        let r = SSL_write_ex(conn.ssl, bytes.baseAddress, bytes.count, &n)
        if r == 1 {
            result.bytesToTLS += UInt64(n)
            counters?.addToTLS(n)
            return .wrote(n)
        }
        let cause = errno
        let err = SSL_get_error(conn.ssl, r)
        switch err {
        case SSL_ERROR_WANT_READ: tlsWriteWait = Int16(POLLIN)
        case SSL_ERROR_WANT_WRITE: tlsWriteWait = Int16(POLLOUT)
        default:
            result.error = conn.ioError(err, cause, "writing to")
            return .failed
        }
        return .wrote(0)
    }
}

extension TLSConnection {
    /// The size of the scratch buffer a forwarding thread reads into: one TLS record's worth of plaintext.
    static let forwardBufferSize = 16 * 1024

    /// Moves bytes both ways between this (handshaken) connection and the connected plaintext
    /// socket `plain` (TCP or UNIX) until both directions have ended, on the calling thread: one
    /// `poll` over both sockets, non-blocking I/O. ``TLSForwarder`` runs the same state machine
    /// for many connections on a few threads.
    ///
    /// Half-close is passed through: the TLS peer's close_notify (or a hang-up without it, marked
    /// ``ForwardResult/truncated``) becomes `shutdown(SHUT_WR)` on `plain` once everything before
    /// it was written, and the end of `plain`'s data becomes close_notify; the other direction
    /// goes on until it ends too. `idleTimeout` (seconds; nil: none) ends the loop when nothing
    /// moved for that long. Neither socket is closed here: the caller closes both.
    ///
    /// With `requestRewriter` the TLS peer's bytes are HTTP/1.x requests and pass through it on the
    /// way to `plain` (every request head gets its header, the peer's copies removed; see
    /// ``HTTPRequestRewriter``). A stream it refuses ends the loop with the refusal in
    /// ``ForwardResult/error``; if no request had been forwarded yet, the peer is sent the
    /// refusal's 400/431/501 response first. The other direction is never parsed.
    public func forward(to plain: Int32, idleTimeout: Double? = nil, counters: ForwardCounters? = nil,
                        requestRewriter: HTTPRequestRewriter? = nil) -> ForwardResult {
        var result = ForwardResult()
        do { try handshake() } catch let e as MTLSError {
            result.error = e
            return result
        } catch {
            result.error = MTLSError(.io, "\(error)")
            return result
        }
        let pair = ForwardPair(conn: self, plain: plain, idleTimeout: idleTimeout, counters: counters, requestRewriter: requestRewriter)
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.forwardBufferSize, alignment: 16)
        defer { scratch.deallocate() }
        while true {
            guard case .wait(let tlsEvents, let plainEvents) = pair.step(scratch: scratch) else { return pair.result }
            // A socket waited on for nothing is left out (its hang-up would wake poll for ever).
            var fds = [pollfd(fd: tlsEvents == 0 ? -1 : fileDescriptor, events: tlsEvents, revents: 0),
                       pollfd(fd: plainEvents == 0 ? -1 : plain, events: plainEvents, revents: 0)]
            let timeoutMS = pair.deadline.map { Int32(min(max(($0 - Deadline.now()) * 1000 + 1, 0), Double(Int32.max))) } ?? -1
            let n = poll(&fds, 2, timeoutMS)
            if n == 0 && pair.expired(now: Deadline.now()) { return pair.result }
            if n < 0 && errno != EINTR {
                pair.fail(MTLSError(.io, "poll: \(String(cString: strerror(errno)))"))
                return pair.result
            }
        }
    }

    /// What the PROXY protocol v2 SSL TLV says about this connection's client (server side).
    /// `includeCertificate` adds the client certificate's DER (``ProxyProtocolV2/TLVType/mtlsClientCertificate``).
    public func proxyProtocolTLSInfo(includeCertificate: Bool = false) -> ProxyProtocolV2.TLSInfo {
        let cert = peerCertificate
        // haproxy's spelling: RSA2048, EC256.
        var keyAlgorithm: String?
        switch cert?.keyType {
        case .rsa(let bits)?: keyAlgorithm = "RSA\(bits)"
        case .ec(_, let bits)?: keyAlgorithm = "EC\(bits)"
        case let other?: keyAlgorithm = other.shortName.uppercased()
        case nil: keyAlgorithm = nil
        }
        return ProxyProtocolV2.TLSInfo(version: tlsVersionName, cipher: cipherSuite, signatureAlgorithm: cert?.signatureAlgorithm,
                                       keyAlgorithm: keyAlgorithm, commonName: cert?.commonName,
                                       certificateOnConnection: cert != nil && !isResumed, certificateInSession: cert != nil,
                                       certificateDER: includeCertificate ? cert?.der : nil)
    }
}
