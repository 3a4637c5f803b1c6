internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An address a tunnel listens on or forwards plaintext to: a TCP `HOST:PORT` or a UNIX socket.
///
/// Spellings: `HOST:PORT`, `[IPv6]:PORT`, `unix:PATH`, or an absolute path (`/run/app.sock`).
public enum TunnelAddress: Sendable, Equatable, CustomStringConvertible {
    /// A TCP address: a host name or IP literal (without brackets) and a port.
    case tcp(host: String, port: UInt16)
    /// A UNIX stream socket's path.
    case unix(path: String)

    /// The longest path a `sockaddr_un` holds (without its terminating zero).
    static let maxUnixPathLength = 107

    /// Parses an address; ``MTLSError/Code/invalidArgument`` when it is none of the spellings.
    public init(_ text: String) throws {
        if text.hasPrefix("unix:") || text.hasPrefix("/") {
            let path = text.hasPrefix("unix:") ? String(text.dropFirst("unix:".count)) : text
            guard !path.isEmpty, !path.utf8.contains(0) else {
                throw MTLSError(.invalidArgument, "\"\(text)\": a UNIX socket address needs a path")
            }
            guard path.utf8.count <= Self.maxUnixPathLength else {
                throw MTLSError(.invalidArgument, "\"\(text)\": a UNIX socket path is at most \(Self.maxUnixPathLength) bytes")
            }
            self = .unix(path: path)
            return
        }
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            throw MTLSError(.invalidArgument, "\"\(text)\" is not HOST:PORT, [IPv6]:PORT, unix:PATH or an absolute path")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") && host.count >= 2 {
            host = String(host.dropFirst().dropLast())
        } else if host.contains(":") {
            throw MTLSError(.invalidArgument, "\"\(text)\": write an IPv6 address in brackets, [\(host)]:\(port)")
        }
        guard !host.isEmpty else { throw MTLSError(.invalidArgument, "\"\(text)\": the host is missing") }
        self = .tcp(host: host, port: port)
    }

    /// The address as it is written on the command line (`HOST:PORT`, `[IPv6]:PORT`, `unix:PATH`).
    public var description: String {
        switch self {
        case .tcp(let host, let port): return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }

    /// Whether plaintext to or from this address stays on this machine: a UNIX socket, the name
    /// `localhost`, or a loopback IP address (127.0.0.0/8, `::1`, `::ffff:127.x.y.z`). Every
    /// other address (another machine's, a name the resolver may send anywhere, the wildcard
    /// `0.0.0.0`) is not.
    public var isLocal: Bool {
        switch self {
        case .unix: return true
        case .tcp(let host, _):
            if host.lowercased() == "localhost" { return true }
            guard let bytes = IPAddress.bytes(host) else { return false }
            if bytes.count == 4 { return bytes[0] == 127 }
            if bytes == [UInt8](repeating: 0, count: 15) + [1] { return true }
            // An IPv4-mapped loopback address.
            return bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] && bytes[12] == 127
        }
    }

    /// The rule for plaintext: a tunnel's plaintext side (`option`, the command line's flag such
    /// as `--target` or `--listen`) must be ``isLocal`` unless `allowed` (the `--unsafe-target` /
    /// `--unsafe-listen` flag named `unsafeFlag`) says the operator wants plaintext on the network.
    /// Throws ``MTLSError/Code/invalidArgument`` naming the flag that would allow it.
    public func requirePlaintextSafe(option: String, allowed: Bool, unsafeFlag: String) throws {
        guard !allowed, !isLocal else { return }
        throw MTLSError(.invalidArgument,
                        "\(option) \(self) is not a loopback address or a UNIX socket: plaintext would cross the network (give \(unsafeFlag) to allow it)")
    }

    /// Connects (TCP: any address the name resolves to, within `timeout` seconds) and returns a
    /// non-blocking, close-on-exec socket the caller closes.
    public func connect(timeout: Double?) throws -> Int32 {
        switch self {
        case .tcp(let host, let port):
            return try Socket.connect(host: host, port: port, deadline: Deadline(seconds: timeout))
        case .unix:
            let (fd, inProgress) = try startConnect(timeout: timeout)
            if inProgress {
                do {
                    try Socket.wait(fd, forWriting: true, deadline: Deadline(seconds: timeout), what: "connecting to \(self)")
                    _ = try Socket.finishConnect(fd, to: description)
                } catch {
                    Glibc.close(fd)
                    throw error
                }
            }
            return fd
        }
    }

    /// Starts connecting without waiting: a non-blocking, close-on-exec socket the caller closes,
    /// and whether the connect is still under way (then the socket becomes writable when it
    /// ends, and SO_ERROR says how: ``TLSForwarder`` waits for it). A UNIX socket or a TCP IP
    /// literal is never waited for. A TCP host name may resolve to several addresses, to be tried
    /// in turn when one refuses, so it is connected here as `connect(timeout:)` does (waiting up
    /// to `timeout` seconds) and returned connected.
    public func startConnect(timeout: Double?) throws -> (fd: Int32, inProgress: Bool) {
        switch self {
        case .tcp(let host, let port):
            guard Socket.isIPLiteral(HostLiteral.unbracketed(host)) else { return (try connect(timeout: timeout), false) }
            let fd = try Socket.connect(host: host, port: port, deadline: Deadline(seconds: nil), waitForConnection: false)
            do {
                return (fd, try !Socket.finishConnect(fd, to: description))
            } catch {
                Glibc.close(fd)
                throw error
            }
        case .unix(let path):
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { throw MTLSError(.io, "socket: \(String(cString: strerror(errno)))") }
            let rc = Self.withUnixAddress(path) { Glibc.connect(fd, $0, $1) }
            if rc == 0 { return (fd, false) }
            let e = errno
            if e == EINPROGRESS { return (fd, true) }
            Glibc.close(fd)
            throw MTLSError(.connect, "cannot connect to unix:\(path): \(String(cString: strerror(e)))")
        }
    }

    /// Binds and listens; returns the non-blocking listening socket and the bound port (0 for a
    /// UNIX socket). A UNIX socket file left at `path` by an earlier run is replaced; any other
    /// file there is an error.
    public func listen(backlog: Int32 = 128) throws -> (fd: Int32, port: UInt16) {
        switch self {
        case .tcp(let host, let port):
            let (fd, bound) = try Socket.listen(address: host, port: port, backlog: backlog)
            Socket.setNonBlocking(fd, true)
            return (fd, bound)
        case .unix(let path):
            var st = stat()
            if lstat(path, &st) == 0 {
                guard (st.st_mode & S_IFMT) == S_IFSOCK else {
                    throw MTLSError(.invalidArgument, "unix:\(path) exists and is not a socket")
                }
                unlink(path)
            }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw MTLSError(.io, "socket: \(String(cString: strerror(errno)))") }
            guard Self.withUnixAddress(path, { bind(fd, $0, $1) }) == 0, Glibc.listen(fd, backlog) == 0 else {
                let e = errno
                Glibc.close(fd)
                throw MTLSError(.connect, "cannot listen on unix:\(path): \(String(cString: strerror(e)))")
            }
            Socket.setNonBlocking(fd, true)
            return (fd, 0)
        }
    }

    /// The address a listening stream socket is bound to (`getsockname`), such as the one systemd
    /// passes under socket activation, so the plaintext rule (``requirePlaintextSafe(option:allowed:unsafeFlag:)``)
    /// judges it as it judges `--listen`. An abstract UNIX socket reads `unix:@NAME`, an unnamed one
    /// `unix:@`. ``MTLSError/Code/invalidArgument`` when `fd` is not a listening stream socket
    /// (a datagram socket, a socket that does not listen, a file, a closed descriptor).
    public static func bound(listeningSocket fd: Int32) throws -> TunnelAddress {
        guard Socket.isListeningStream(fd) else {
            throw MTLSError(.invalidArgument, "file descriptor \(fd) is not a listening stream socket")
        }
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let address: TunnelAddress? = withUnsafeMutablePointer(to: &storage) { p in
            guard p.withMemoryRebound(to: sockaddr.self, capacity: 1, { getsockname(fd, $0, &len) }) == 0 else { return nil }
            switch Int32(p.pointee.ss_family) {
            case AF_INET, AF_INET6:
                var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
                let rc = p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    getnameinfo($0, len, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
                }
                guard rc == 0, let port = Socket.boundPort(fd) else { return nil }
                return .tcp(host: String(cBuffer: host), port: port)
            case AF_UNIX:
                let offset = MemoryLayout<sa_family_t>.size
                let count = max(0, min(Int(len) - offset, maxUnixPathLength + 1))
                let raw: [UInt8] = p.withMemoryRebound(to: sockaddr_un.self, capacity: 1) { un in
                    withUnsafeBytes(of: &un.pointee.sun_path) { Array($0.prefix(count)) }
                }
                if raw.first == 0 || raw.isEmpty {  // abstract or unnamed
                    return .unix(path: "@" + String(decoding: raw.dropFirst(), as: UTF8.self))
                }
                return .unix(path: String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self))
            default:
                return nil
            }
        }
        guard let address else {
            throw MTLSError(.invalidArgument, "file descriptor \(fd) is not an IPv4, IPv6 or UNIX socket")
        }
        return address
    }

    static func withUnixAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        var sa = sockaddr_un()
        sa.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8.prefix(maxUnixPathLength))
        withUnsafeMutableBytes(of: &sa.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
        return withUnsafePointer(to: &sa) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) } }
    }
}
