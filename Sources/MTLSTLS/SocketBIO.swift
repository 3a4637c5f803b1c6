internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// libmtls's own socket BIO: OpenSSL's socket BIO writes with write(2), so a peer that hung up
/// makes the kernel raise SIGPIPE, whose default action ends the host program. This one writes
/// with send(2) and `MSG_NOSIGNAL`, so EPIPE comes back as an error and no signal is raised,
/// without touching the process's signal dispositions or masks.
///
/// The BIO does not own the socket (the connection closes it, or the application that owns it).
enum SocketBIO {
    // OpenSSL's BIO flag values (bio.h), spelled out because the compound macros do not import.
    private static let flagRead: Int32 = 0x01
    private static let flagWrite: Int32 = 0x02
    private static let flagIOSpecial: Int32 = 0x04
    private static let flagShouldRetry: Int32 = 0x08
    private static let flagInEOF: Int32 = 0x800

    /// The method tables, made once per process (OpenSSL keeps them until the library unloads):
    /// the one of every connection (its data pointer: the descriptor), and the one of a
    /// listener's accepted connections (its data pointer: their ``Extra``, issue 40).
    nonisolated(unsafe) private static let method: OpaquePointer? = makeMethod(type: plainType)
    nonisolated(unsafe) private static let listenerMethod: OpaquePointer? = makeMethod(type: listenerType)
    // Source/sinks of the descriptor family, so that SSL_get_fd and BIO_find_type find them.
    private static let plainType = BIO_get_new_index() | Int32(BIO_TYPE_SOURCE_SINK) | Int32(BIO_TYPE_DESCRIPTOR)
    private static let listenerType = BIO_get_new_index() | Int32(BIO_TYPE_SOURCE_SINK) | Int32(BIO_TYPE_DESCRIPTOR)

    private static func makeMethod(type: Int32) -> OpaquePointer? {
        guard let m = BIO_meth_new(type, "libmtls socket") else { return nil }
        BIO_meth_set_write_ex(m, { bio, data, length, written in
            guard let bio, let written else { return 0 }
            SocketBIO.clearRetry(bio)
            let fd = SocketBIO.fd(of: bio)
            guard fd >= 0 else { return 0 }
            while true {
                let n = send(fd, data, length, Int32(MSG_NOSIGNAL))
                if n >= 0 {
                    written.pointee = n
                    if let extra = SocketBIO.extra(of: bio) { extra.pointee.wrote = true }
                    return 1
                }
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK || e == EINPROGRESS || e == EALREADY || e == ENOTCONN {
                    BIO_set_flags(bio, SocketBIO.flagWrite | SocketBIO.flagShouldRetry)
                }
                errno = e // SSL_get_error reports SSL_ERROR_SYSCALL with errno as the cause
                return 0
            }
        })
        BIO_meth_set_read_ex(m, { bio, data, length, readBytes in
            guard let bio, let data, let readBytes else { return 0 }
            return SocketBIO.read(bio, data, length, readBytes)
        })
        BIO_meth_set_puts(m, { bio, text in
            guard let bio, let text else { return -1 }
            let fd = SocketBIO.fd(of: bio)
            guard fd >= 0 else { return -1 }
            let n = send(fd, text, strlen(text), Int32(MSG_NOSIGNAL))
            return n < 0 ? -1 : Int32(truncatingIfNeeded: n)
        })
        BIO_meth_set_ctrl(m, { bio, cmd, num, ptr in
            guard let bio else { return 0 }
            switch cmd {
            case BIO_C_SET_FD:
                // A listener's BIO keeps the socket in its Extra, set once by attach.
                guard let ptr, BIO_method_type(bio) != SocketBIO.listenerType else { return 0 }
                let fd = ptr.load(as: Int32.self)
                BIO_set_data(bio, UnsafeMutableRawPointer(bitPattern: Int(fd) + 1))
                BIO_set_init(bio, 1)
                return 1
            case BIO_C_GET_FD:
                guard BIO_get_init(bio) != 0 else { return -1 }
                let fd = SocketBIO.fd(of: bio)
                if let ptr { ptr.storeBytes(of: fd, as: Int32.self) }
                return Int(fd)
            case BIO_CTRL_EOF:
                return BIO_test_flags(bio, SocketBIO.flagInEOF) != 0 ? 1 : 0
            case BIO_CTRL_FLUSH, BIO_CTRL_DUP:
                return 1
            case BIO_CTRL_GET_CLOSE:
                return Int(BIO_NOCLOSE)
            case BIO_CTRL_SET_CLOSE:
                return 1
            default:
                // Everything else (kTLS, pending counts, EOF queries...) is "not supported".
                return 0
            }
        })
        BIO_meth_set_create(m, { bio in
            guard let bio else { return 0 }
            BIO_set_data(bio, nil)
            BIO_set_init(bio, 0)
            return 1
        })
        BIO_meth_set_destroy(m, { bio in
            guard let bio else { return 0 }
            if let extra = SocketBIO.extra(of: bio) {
                extra.pointee.prefix?.deallocate()
                extra.deinitialize(count: 1)
                extra.deallocate()
            }
            BIO_set_data(bio, nil)
            BIO_set_init(bio, 0)
            return 1
        })
        return m
    }

    /// The socket stored in the BIO's data pointer (fd + 1, so that descriptor 0 is not NULL),
    /// or in its ``Extra``.
    private static func fd(of bio: OpaquePointer) -> Int32 {
        if let extra = extra(of: bio) { return extra.pointee.fd }
        guard let p = BIO_get_data(bio) else { return -1 }
        return Int32(truncatingIfNeeded: Int(bitPattern: p) - 1)
    }

    private static func clearRetry(_ bio: OpaquePointer) {
        BIO_clear_flags(bio, flagRead | flagWrite | flagIOSpecial | flagShouldRetry)
    }

    /// Makes `fd` the read and write channel of `ssl` (in place of `SSL_set_fd`). The socket
    /// stays the caller's to close. `prefix`: bytes already read from the socket (a listener's
    /// ClientHello, issue 40), which OpenSSL reads first, before the socket.
    /// `flightReads`: a client's handshake reads each of the server's flights at once (see
    /// ``Extra/flightReads``), until ``setFlightReads(_:_:)`` turns it off.
    static func attach(_ ssl: OpaquePointer, fd: Int32, prefix: [UInt8]? = nil, flightReads: Bool = false) throws {
        guard let method = prefix == nil && !flightReads ? method : listenerMethod, let bio = BIO_new(method) else {
            throw MTLSError.openSSL(.noMemory, "cannot create the socket BIO")
        }
        if prefix != nil || flightReads {
            // A listener's or a handshaking client's: its Extra (freed by the method's destroy).
            let extra = UnsafeMutablePointer<Extra>.allocate(capacity: 1)
            var bytes: UnsafeMutableRawBufferPointer?
            if let prefix, !prefix.isEmpty {
                bytes = .allocate(byteCount: prefix.count, alignment: 1)
                prefix.withUnsafeBytes { bytes!.copyMemory(from: $0) }  // memcpy, in debug builds too
            }
            extra.initialize(to: Extra(fd: fd, prefix: bytes, flightReads: flightReads))
            BIO_set_data(bio, extra)
            BIO_set_init(bio, 1)
        } else {
            var descriptor = fd
            guard BIO_ctrl(bio, BIO_C_SET_FD, Int(BIO_NOCLOSE), &descriptor) == 1 else {
                BIO_free(bio)
                throw MTLSError.openSSL(.internal, "cannot attach the socket")
            }
        }
        // SSL_set_bio takes the one reference for both directions.
        SSL_set_bio(ssl, bio, bio)
    }

    /// What a listener's socket BIO holds (issue 40), its data pointer (a listener's connections
    /// and handshaking clients have one, with their own method): its socket, the ClientHello bytes
    /// the listener already read, and how the reads of the peer's answer to a flight are made.
    struct Extra {
        /// Bytes read before OpenSSL's, served first (freed once read).
        /// The socket.
        let fd: Int32
        var prefix: UnsafeMutableRawBufferPointer?
        var offset = 0
        /// A read right after a write answers "retry" without a system call: the peer cannot have
        /// answered a flight just sent, and the caller polls before the next step anyway. For
        /// a listener's non-blocking handshake steps and a blocking client connection
        /// (``setWaitAfterWrite(_:_:)``).
        var waitAfterWrite = false
        /// Something was written since the last read.
        var wrote = false
        /// The read after that wait: the header of the peer's first record, and beyond it
        /// (``answerRead``).
        var answered = false
        /// The connection is closing: its last read takes what has come (``setClosing(_:)``).
        var closing = false
        /// A client's handshake: the first read after each of its flights takes the server's
        /// answering flight at once (``readFlight(_:_:_:_:_:)``), as a listener's handshake does
        /// after ``waitAfterWrite``.
        var flightReads = false
        /// A client's handshake is over (``setFlightReads(_:_:)`` turned its flight reads off):
        /// what a read after a wait takes is read as OpenSSL asks, not as a flight.
        var handshakeOver = false
    }

    /// What the first read of a peer's answer to a flight takes when OpenSSL asks for a record
    /// header: the header, and the 6 bytes after it. A TLS 1.3 client (middlebox compatible, as
    /// OpenSSL's, browsers and Go's) or a TLS 1.2 one answers with ChangeCipherSpec, a 6-byte
    /// record, then at least one more handshake record: its header comes with this read, so the
    /// two headers and the ChangeCipherSpec body cost one `recv` instead of three. Any other
    /// record is at least 7 bytes long (an alert) and is read by the handshake anyway; the
    /// extra bytes are served to OpenSSL's next reads, in order.
    private static let answerRead = 5 + 6

    /// The most the last read of a closing connection takes (its peer's close_notify is 24 to
    /// 31 bytes): what is left is dropped with the connection.
    private static let closingRead = 512

    /// The ``Extra`` of a listener's BIO (its data pointer), nil for other BIOs.
    private static func extra(of bio: OpaquePointer) -> UnsafeMutablePointer<Extra>? {
        guard BIO_method_type(bio) == listenerType, let p = BIO_get_data(bio) else { return nil }
        return p.assumingMemoryBound(to: Extra.self)
    }

    /// Turns on (or off) the answer "retry" to a read that follows a write at once, for the
    /// BIO of `ssl` when it has ``Extra`` (a listener's handshake, a client's connection): the
    /// caller then polls, instead of a `recv` that must fail with EAGAIN first. Only where the
    /// wait that follows is libmtls's own or level-triggered (a blocking connection's poll, a
    /// listener's, the forwarder's): a caller waiting for an edge would wait for data that came
    /// already. Returns whether it was on.
    @discardableResult
    static func setWaitAfterWrite(_ ssl: OpaquePointer, _ on: Bool) -> Bool {
        guard let bio = SSL_get_rbio(ssl), let extra = extra(of: bio) else { return false }
        let was = extra.pointee.waitAfterWrite
        extra.pointee.waitAfterWrite = on
        extra.pointee.wrote = false
        return was
    }

    /// Turns a client's flight reads off (its handshake is over: what comes now is the server's
    /// data, read as OpenSSL asks for it).
    static func setFlightReads(_ ssl: OpaquePointer, _ on: Bool) {
        guard let bio = SSL_get_rbio(ssl), let extra = extra(of: bio) else { return }
        extra.pointee.flightReads = on
        extra.pointee.handshakeOver = !on
        if !on { extra.pointee.answered = false }
    }

    /// Reads served from the prefix first, then from the socket.
    private static func read(_ bio: OpaquePointer, _ data: UnsafeMutablePointer<CChar>, _ length: Int,
                             _ readBytes: UnsafeMutablePointer<Int>) -> Int32 {
        clearRetry(bio)
        if let extra = extra(of: bio) {
            if let prefix = extra.pointee.prefix {
                let n = min(length, prefix.count - extra.pointee.offset)
                if n > 0 {
                    UnsafeMutableRawPointer(data).copyMemory(from: prefix.baseAddress! + extra.pointee.offset, byteCount: n)
                    extra.pointee.offset += n
                    readBytes.pointee = n
                }
                if extra.pointee.offset >= prefix.count {
                    prefix.deallocate()
                    extra.pointee.prefix = nil
                }
                if n > 0 { return 1 }
            }
            if extra.pointee.waitAfterWrite && extra.pointee.wrote {
                extra.pointee.wrote = false
                // In a handshake, what comes after the wait is the peer's flight.
                extra.pointee.answered = !extra.pointee.handshakeOver
                BIO_set_flags(bio, flagRead | flagShouldRetry)
                errno = EAGAIN
                return 0
            }
            if extra.pointee.flightReads && extra.pointee.wrote { extra.pointee.answered = true }
            extra.pointee.wrote = false
            var wanted = length
            if extra.pointee.closing {
                wanted = max(length, closingRead)
            } else if extra.pointee.answered && length == 5 {
                if let r = readFlight(bio, extra, data, length, readBytes) { return r }
                // A listener's first read takes the next header with a ChangeCipherSpec (see
                // answerRead); a client's reads as OpenSSL asks.
                if !extra.pointee.flightReads { wanted = answerRead }
            }
            extra.pointee.answered = false
            if wanted > length {
                return receiveAhead(bio, extra, .allocate(byteCount: wanted, alignment: 1), wanted, data, length, readBytes)
            }
        }
        let fd = fd(of: bio)
        guard fd >= 0 else { return 0 }
        let r = receive(bio, fd, data, length)
        guard r > 0 else { readBytes.pointee = 0; return 0 }
        readBytes.pointee = r
        return 1
    }

    /// The most a peer's flight is looked at in one peek (its records beyond are read as usual).
    private static let flightPeek = 16 * 1024 + 5

    /// The first read of the peer's answer to our flight, when OpenSSL asks for a record header
    /// (issue 40): the records of that answer which have come whole, in one `recv`, sized by a
    /// `MSG_PEEK` of what the socket holds, so that a TLS 1.2 client's second flight (certificate,
    /// key exchange, certificate verify, ChangeCipherSpec, Finished: ten reads of headers and
    /// bodies) costs two system calls. Only handshake bytes are taken, never what may follow them
    /// (the application's first data stays in the socket, where a poll sees it): the plaintext
    /// handshake records, a ChangeCipherSpec and the one record after it (Finished in TLS 1.2;
    /// the first encrypted handshake record in TLS 1.3), stopping at an alert or at any other
    /// record. nil when nothing whole can be taken (the caller reads as before); else the BIO's
    /// answer, with the bytes OpenSSL did not ask for yet kept in ``Extra/prefix``. When nothing
    /// has come yet (a client reads right after its flight), "retry", and the next read looks
    /// again.
    private static func readFlight(_ bio: OpaquePointer, _ extra: UnsafeMutablePointer<Extra>,
                                   _ data: UnsafeMutablePointer<CChar>, _ length: Int,
                                   _ readBytes: UnsafeMutablePointer<Int>) -> Int32? {
        let fd = extra.pointee.fd
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: flightPeek, alignment: 1)
        var peeked: Int
        repeat { peeked = recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_PEEK)) } while peeked < 0 && errno == EINTR
        if peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
            buffer.deallocate()
            BIO_set_flags(bio, flagRead | flagShouldRetry)
            readBytes.pointee = 0
            errno = EAGAIN
            return 0
        }
        extra.pointee.answered = false
        let take = peeked > 0 ? flightEnd(UnsafeRawBufferPointer(rebasing: buffer[..<peeked])) : 0
        guard take > 0 else {
            buffer.deallocate()
            return nil
        }
        // The bytes are in the socket already: this takes them all, or fails as a read would.
        return receiveAhead(bio, extra, buffer, take, data, length, readBytes)
    }

    /// One `recv` of up to `wanted` bytes into `buffer` (which this takes over): the first
    /// `length` are OpenSSL's read, the rest kept in ``Extra/prefix`` (empty to come here) for
    /// its next reads. The BIO's answer, as ``read(_:_:_:_:)`` gives it.
    private static func receiveAhead(_ bio: OpaquePointer, _ extra: UnsafeMutablePointer<Extra>,
                                     _ buffer: UnsafeMutableRawBufferPointer, _ wanted: Int,
                                     _ data: UnsafeMutablePointer<CChar>, _ length: Int,
                                     _ readBytes: UnsafeMutablePointer<Int>) -> Int32 {
        let r = extra.pointee.fd >= 0 ? receive(bio, extra.pointee.fd, buffer.baseAddress!, wanted) : 0
        guard r > 0 else {
            buffer.deallocate()
            readBytes.pointee = 0
            return 0
        }
        let n = min(r, length)
        UnsafeMutableRawPointer(data).copyMemory(from: buffer.baseAddress!, byteCount: n)
        readBytes.pointee = n
        if r > n {
            extra.pointee.prefix = UnsafeMutableRawBufferPointer(rebasing: buffer[..<r])
            extra.pointee.offset = n
        } else {
            buffer.deallocate()
        }
        return 1
    }

    /// How many leading bytes of `bytes` are whole records of a handshake flight (see
    /// ``readFlight(_:_:_:_:_:)``): handshake records, then a ChangeCipherSpec and one record
    /// after it; an alert ends it (taken), any other record ends it (not taken). 0: none.
    static func flightEnd(_ bytes: UnsafeRawBufferPointer) -> Int {
        var at = 0, end = 0, afterChangeCipherSpec = false
        while at + 5 <= bytes.count {
            let type = bytes[at], size = Int(bytes[at + 3]) << 8 | Int(bytes[at + 4])
            guard at + 5 + size <= bytes.count else { break }
            if afterChangeCipherSpec { return at + 5 + size }
            switch type {
            case 20: afterChangeCipherSpec = true  // change_cipher_spec
            case 21: return at + 5 + size          // alert: the peer is done
            case 22: break                         // handshake
            default: return end
            }
            at += 5 + size
            end = at
        }
        return end
    }

    /// One `recv` of up to `length` bytes (again after EINTR): the count, or 0 with the BIO's
    /// flags set as OpenSSL's socket BIO sets them (end of stream: BIO_eof; EAGAIN: retry).
    private static func receive(_ bio: OpaquePointer, _ fd: Int32, _ data: UnsafeMutableRawPointer, _ length: Int) -> Int {
        while true {
            let n = recv(fd, data, length, 0)
            if n > 0 { return n }
            if n == 0 { // end of stream: no retry flag, and BIO_eof says so (as OpenSSL's socket BIO)
                BIO_set_flags(bio, flagInEOF)
                return 0
            }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK || e == EINPROGRESS || e == EALREADY || e == ENOTCONN {
                BIO_set_flags(bio, flagRead | flagShouldRetry)
            }
            errno = e
            return 0
        }
    }

    /// The connection of `ssl` is closing (its last SSL_shutdown follows): when its BIO has
    /// ``Extra`` (a listener's connection), the read for its peer's close_notify takes it whole
    /// in one `recv`, not a header and then a body.
    static func setClosing(_ ssl: OpaquePointer) {
        guard let bio = SSL_get_rbio(ssl), let extra = extra(of: bio) else { return }
        extra.pointee.closing = true
    }
}
