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
}

extension TLSConnection {
    /// The size of each of the two buffers: one TLS record's worth of plaintext.
    static let forwardBufferSize = 16 * 1024

    /// Moves bytes both ways between this (handshaken) connection and the connected plaintext
    /// socket `plain` (TCP or UNIX) until both directions have ended, on the calling thread: one
    /// `poll` over both sockets, non-blocking I/O, two buffers allocated once.
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
        Socket.setNonBlocking(fileDescriptor, true)
        Socket.setNonBlocking(plain, true)
        let size = Self.forwardBufferSize
        let fromTLS = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        let toTLS = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer {
            fromTLS.deallocate()
            toTLS.deallocate()
        }
        var (aStart, aEnd, bStart, bEnd) = (0, 0, 0, 0)
        var rewriter = requestRewriter
        var rewritten: [UInt8] = []  // with a rewriter: what goes to `plain` (aStart..<aEnd)
        var tlsEnded = false, plainShut = false, plainEnded = false, tlsShut = false
        // The event the last TLS read / write (or shutdown) waits for.
        var tlsReadWait: Int16 = 0, tlsWriteWait: Int16 = 0
        let timeoutMS: Int32 = idleTimeout.map { Int32(min(max($0, 0) * 1000, Double(Int32.max))) } ?? -1
        while true {
            var progress = true
            while progress {
                progress = false
                // The TLS peer to the plaintext socket.
                if aStart == aEnd && !tlsEnded {
                    tlsReadWait = 0
                    OpenSSLErrorQueue.clear()
                    var n = 0
                    let r = SSL_read_ex(ssl, fromTLS.baseAddress, size, &n)
                    if r == 1 {
                        (aStart, aEnd) = (0, n)
                        progress = true
                        if rewriter != nil {
                            rewritten.removeAll(keepingCapacity: true)
                            do {
                                try rewriter?.feed(UnsafeRawBufferPointer(start: fromTLS.baseAddress, count: n), into: &rewritten)
                            } catch {
                                if rewriter?.requests == 0 && bStart == bEnd {
                                    // Best effort: the connection is closed after it either way.
                                    let response = error.response
                                    var written = 0
                                    _ = response.withUnsafeBytes { SSL_write_ex(ssl, $0.baseAddress, $0.count, &written) }
                                    OpenSSLErrorQueue.clear()
                                }
                                result.error = error.error
                                return result
                            }
                            (aStart, aEnd) = (0, rewritten.count)
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
                            if Self.isUnexpectedEOF(err, cause) {
                                OpenSSLErrorQueue.clear()
                                result.truncated = true
                                tlsEnded = true
                                progress = true
                            } else {
                                result.error = ioError(err, cause, "reading from")
                                return result
                            }
                        }
                    }
                }
                if aStart < aEnd {
                    let n = rewriter == nil
                        ? send(plain, fromTLS.baseAddress! + aStart, aEnd - aStart, Int32(MSG_NOSIGNAL))
                        : rewritten.withUnsafeBytes { send(plain, $0.baseAddress! + aStart, aEnd - aStart, Int32(MSG_NOSIGNAL)) }
                    if n > 0 {
                        aStart += n
                        result.bytesFromTLS += UInt64(n)
                        counters?.addFromTLS(n)
                        progress = true
                    } else if errno == EINTR {
                        progress = true
                    } else if errno != EAGAIN {
                        result.error = MTLSError(.closed, "writing to the plaintext side: \(String(cString: strerror(errno)))")
                        return result
                    }
                }
                if aStart == aEnd && tlsEnded && !plainShut {
                    Glibc.shutdown(plain, Int32(SHUT_WR))
                    plainShut = true
                    progress = true
                }
                // The plaintext socket to the TLS peer.
                if bStart == bEnd && !plainEnded {
                    let n = recv(plain, toTLS.baseAddress, size, 0)
                    if n > 0 {
                        (bStart, bEnd) = (0, n)
                        progress = true
                    } else if n == 0 {
                        plainEnded = true
                        progress = true
                    } else if errno == EINTR {
                        progress = true
                    } else if errno != EAGAIN {
                        result.error = MTLSError(.closed, "reading from the plaintext side: \(String(cString: strerror(errno)))")
                        return result
                    }
                }
                if bStart < bEnd {
                    tlsWriteWait = 0
                    OpenSSLErrorQueue.clear()
                    var n = 0
                    // Retried with the same bytes at the same address after a WANT, as OpenSSL requires.
                    let r = SSL_write_ex(ssl, toTLS.baseAddress! + bStart, bEnd - bStart, &n)
                    if r == 1 {
                        bStart += n
                        result.bytesToTLS += UInt64(n)
                        counters?.addToTLS(n)
                        progress = true
                    } else {
                        let cause = errno
                        let err = SSL_get_error(ssl, r)
                        switch err {
                        case SSL_ERROR_WANT_READ: tlsWriteWait = Int16(POLLIN)
                        case SSL_ERROR_WANT_WRITE: tlsWriteWait = Int16(POLLOUT)
                        default:
                            result.error = ioError(err, cause, "writing to")
                            return result
                        }
                    }
                }
                if bStart == bEnd && plainEnded && !tlsShut {
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
            if tlsEnded && plainShut && plainEnded && tlsShut { return result }
            var tlsEvents: Int16 = 0, plainEvents: Int16 = 0
            if aStart == aEnd && !tlsEnded { tlsEvents |= tlsReadWait }
            if bStart < bEnd || (plainEnded && !tlsShut) { tlsEvents |= tlsWriteWait }
            if bStart == bEnd && !plainEnded { plainEvents |= Int16(POLLIN) }
            if aStart < aEnd { plainEvents |= Int16(POLLOUT) }
            // A socket waited on for nothing is left out (its hang-up would wake poll for ever).
            var fds = [pollfd(fd: tlsEvents == 0 ? -1 : fileDescriptor, events: tlsEvents, revents: 0),
                       pollfd(fd: plainEvents == 0 ? -1 : plain, events: plainEvents, revents: 0)]
            let n = poll(&fds, 2, timeoutMS)
            if n == 0 {
                result.idleTimedOut = true
                return result
            }
            if n < 0 && errno != EINTR {
                result.error = MTLSError(.io, "poll: \(String(cString: strerror(errno)))")
                return result
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
