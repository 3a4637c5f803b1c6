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

    /// The method table, made once per process (OpenSSL keeps it until the library unloads).
    nonisolated(unsafe) private static let method: OpaquePointer? = makeMethod()

    private static func makeMethod() -> OpaquePointer? {
        // A source/sink of the descriptor family, so that SSL_get_fd and BIO_find_type find it.
        let type = BIO_get_new_index() | Int32(BIO_TYPE_SOURCE_SINK) | Int32(BIO_TYPE_DESCRIPTOR)
        guard let m = BIO_meth_new(type, "libmtls socket") else { return nil }
        BIO_meth_set_write_ex(m, { bio, data, length, written in
            guard let bio, let written else { return 0 }
            SocketBIO.clearRetry(bio)
            let fd = SocketBIO.fd(of: bio)
            guard fd >= 0 else { return 0 }
            while true {
                let n = send(fd, data, length, Int32(MSG_NOSIGNAL))
                if n >= 0 { written.pointee = n; return 1 }
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
            guard let bio, let readBytes else { return 0 }
            SocketBIO.clearRetry(bio)
            let fd = SocketBIO.fd(of: bio)
            guard fd >= 0 else { return 0 }
            while true {
                let n = recv(fd, data, length, 0)
                if n > 0 { readBytes.pointee = n; return 1 }
                if n == 0 { // end of stream: no retry flag, and BIO_eof says so (as OpenSSL's socket BIO)
                    BIO_set_flags(bio, SocketBIO.flagInEOF)
                    readBytes.pointee = 0
                    return 0
                }
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK || e == EINPROGRESS || e == EALREADY || e == ENOTCONN {
                    BIO_set_flags(bio, SocketBIO.flagRead | SocketBIO.flagShouldRetry)
                }
                errno = e
                return 0
            }
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
                guard let ptr else { return 0 }
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
            BIO_set_data(bio, nil)
            BIO_set_init(bio, 0)
            return 1
        })
        return m
    }

    /// The socket stored in the BIO's data pointer (fd + 1, so that descriptor 0 is not NULL).
    private static func fd(of bio: OpaquePointer) -> Int32 {
        guard let p = BIO_get_data(bio) else { return -1 }
        return Int32(truncatingIfNeeded: Int(bitPattern: p) - 1)
    }

    private static func clearRetry(_ bio: OpaquePointer) {
        BIO_clear_flags(bio, flagRead | flagWrite | flagIOSpecial | flagShouldRetry)
    }

    /// Makes `fd` the read and write channel of `ssl` (in place of `SSL_set_fd`). The socket
    /// stays the caller's to close.
    static func attach(_ ssl: OpaquePointer, fd: Int32) throws {
        guard let method, let bio = BIO_new(method) else {
            throw MTLSError.openSSL(.noMemory, "cannot create the socket BIO")
        }
        var descriptor = fd
        guard BIO_ctrl(bio, BIO_C_SET_FD, Int(BIO_NOCLOSE), &descriptor) == 1 else {
            BIO_free(bio)
            throw MTLSError.openSSL(.internal, "cannot attach the socket")
        }
        // SSL_set_bio takes the one reference for both directions.
        SSL_set_bio(ssl, bio, bio)
    }
}
