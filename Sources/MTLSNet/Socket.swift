internal import COpenSSL
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A point in time on the monotonic clock after which an operation gives up.
package struct Deadline {
    private let end: Double?

    /// No deadline when `seconds` is nil or not positive.
    package init(seconds: Double?) {
        if let seconds, seconds > 0 { end = Deadline.now() + seconds } else { end = nil }
    }

    package static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Seconds left (nil: no deadline; 0 once expired).
    package var remaining: Double? { end.map { max(0, $0 - Deadline.now()) } }

    /// Milliseconds left for poll(2): -1 for no deadline, 0 once expired.
    package var pollTimeout: Int32 {
        guard let end else { return -1 }
        let left = end - Deadline.now()
        return left <= 0 ? 0 : Int32(min(left * 1000 + 1, Double(Int32.max)))
    }
}

/// Plain TCP sockets under the TLS layer: resolve, connect with a timeout, listen, wait.
package enum Socket {
    /// Resolves `host` (a DNS name or an IPv4/IPv6 literal, with or without brackets) and connects
    /// to the first address that answers. The socket is returned non-blocking.
    ///
    /// With `waitForConnection` false the first address's connect is started and the socket
    /// returned at once, still connecting (see ``finishConnect(_:host:port:)``).
    package static func connect(host: String, port: UInt16, deadline: Deadline, waitForConnection: Bool = true) throws -> Int32 {
        let name = HostLiteral.unbracketed(host)
        if let literal = IPSocketAddress(name, port: port) {
            // An IP literal needs no resolver.
            return try literal.withSockaddr { sa, len in
                try connectOne(sa, len, family: literal.family, host: host, port: port, deadline: deadline,
                               wait: waitForConnection)
            }
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV
        if getaddrinfo(name, String(port), &hints, &list) != 0 {
            // AI_ADDRCONFIG hides loopback-only families on hosts without a configured address.
            hints.ai_flags = AI_NUMERICSERV
            let rc2 = getaddrinfo(name, String(port), &hints, &list)
            guard rc2 == 0 else {
                throw MTLSError(.connect, "cannot resolve \(name): \(String(cString: gai_strerror(rc2)))", side: .client)
            }
        }
        defer { freeaddrinfo(list) }
        var errors: [MTLSError] = []
        var ai = list
        while let a = ai {
            defer { ai = a.pointee.ai_next }
            do {
                return try connectOne(a.pointee.ai_addr, a.pointee.ai_addrlen, family: a.pointee.ai_family,
                                      host: host, port: port, deadline: deadline, wait: waitForConnection)
            } catch let e as MTLSError {
                errors.append(e)
            }
        }
        if let timeout = errors.first(where: { $0.code == .timeout }), errors.allSatisfy({ $0.code == .timeout }) { throw timeout }
        throw errors.first { $0.code != .timeout } ?? MTLSError(.connect, "cannot connect to \(host) port \(port): no address", side: .client)
    }

    /// Connects a new non-blocking socket to one address, within the deadline.
    private static func connectOne(_ sa: UnsafePointer<sockaddr>, _ len: socklen_t, family: Int32, host: String,
                                   port: UInt16, deadline: Deadline, wait: Bool) throws -> Int32 {
        let (fd, connected) = try startConnect(sa, len, family: family, host: host, port: port)
        if connected || !wait { return fd }
        do { try awaitConnection(fd, host: host, port: port, deadline: deadline) { describe(sa, len) } } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// A new non-blocking socket (TCP_NODELAY) whose connect to one address has started: whether
    /// it is connected already. Throws, the socket closed, when the connect failed at once.
    private static func startConnect(_ sa: UnsafePointer<sockaddr>, _ len: socklen_t, family: Int32, host: String,
                                     port: UInt16) throws -> (fd: Int32, connected: Bool) {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw MTLSError(.connect, "socket: \(String(cString: strerror(errno)))", side: .client) }
        setNoDelay(fd)
        if Glibc.connect(fd, sa, len) == 0 { return (fd, true) }
        let e = errno
        if e == EINPROGRESS { return (fd, false) }
        close(fd)
        throw connectFailed(e, host: host, port: port, address: describe(sa, len))
    }

    /// Starts the TCP connect to `host` when it is an IP literal, without waiting for it: its
    /// socket (the caller's) and whether it is connected already. nil when `host` is a name
    /// (``connect(host:port:deadline:waitForConnection:)`` tries its addresses in turn, so it must
    /// know whether each went through). The caller's first write tells: it goes through once the
    /// connection is made, fails with EAGAIN while it is under way (then
    /// ``awaitConnection(_:literal:port:deadline:)``), and with the connect's own error
    /// (``connectError(afterWrite:_:literal:port:)``) when it failed. A blocking client that writes its
    /// ClientHello at once saves the poll between the connect and that write (issue 40). Errors
    /// as ``connect(host:port:deadline:waitForConnection:)``.
    package static func connectNow(host: String, port: UInt16) throws -> (fd: Int32, connected: Bool)? {
        guard let literal = IPSocketAddress(HostLiteral.unbracketed(host), port: port) else { return nil }
        return try literal.withSockaddr { sa, len in try startConnect(sa, len, family: literal.family, host: host, port: port) }
    }

    /// Waits within `deadline` for ``connectNow(host:port:)``'s connect to `host` to finish:
    /// returns once connected, throws ``MTLSError/Code/timeout`` or ``MTLSError/Code/connect``
    /// (the server's side), as ``connect(host:port:deadline:waitForConnection:)`` does. The socket
    /// stays the caller's.
    package static func awaitConnection(_ fd: Int32, literal host: String, port: UInt16, deadline: Deadline) throws {
        try awaitConnection(fd, host: host, port: port, deadline: deadline) { literalAddress(host, port) }
    }

    /// The wait of a connect under way; `address` names it in an error (made only then).
    private static func awaitConnection(_ fd: Int32, host: String, port: UInt16, deadline: Deadline,
                                        address: () -> String) throws {
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        var n: Int32
        repeat { n = poll(&p, 1, deadline.pollTimeout) } while n < 0 && errno == EINTR
        if n == 0 {
            throw MTLSError(.timeout, "connecting to \(host) port \(port) (\(address())) timed out", side: .server)
        }
        // Writable and nothing else: connected (a failed connect also raises POLLERR or POLLHUP),
        // so the error is only asked for otherwise (issue 40: one system call less per connection).
        if n > 0 && p.revents == Int16(POLLOUT) { return }
        let e = n < 0 ? errno : pendingError(fd)
        if e != 0 { throw connectFailed(e, host: host, port: port, address: address()) }
    }

    /// The error a failed connect left on socket `fd` (SO_ERROR, which clears it), 0 for none.
    private static func pendingError(_ fd: Int32) -> Int32 {
        var soError: Int32 = 0
        var slen = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &slen)
        return soError
    }

    /// After the first write on ``connectNow(host:port:)``'s socket `fd` failed with errno `cause`:
    /// the connect's error when the connect failed (send(2) returns it; EPIPE or no errno when the
    /// socket still holds it, which SO_ERROR gives), nil when it did not (the write's failure is
    /// then the caller's to report).
    package static func connectError(afterWrite cause: Int32, _ fd: Int32, literal host: String, port: UInt16) -> MTLSError? {
        let left = cause == 0 || cause == EPIPE ? pendingError(fd) : 0
        guard cause != 0 || left != 0 else { return nil }
        return connectFailed(left != 0 ? left : cause, host: host, port: port, address: literalAddress(host, port))
    }

    /// The one message of a TCP connect that failed with errno `e`.
    private static func connectFailed(_ e: Int32, host: String, port: UInt16, address: String) -> MTLSError {
        MTLSError(.connect, "cannot connect to \(host) port \(port) (\(address)): \(String(cString: strerror(e)))", side: .server)
    }

    /// The address an IP literal `host` names, as the connect errors write it.
    private static func literalAddress(_ host: String, _ port: UInt16) -> String {
        IPSocketAddress(HostLiteral.unbracketed(host), port: port).map { $0.withSockaddr { describe($0, $1) } } ?? host
    }

    /// For a socket from `connect(..., waitForConnection: false)`: false while the TCP connect
    /// is still under way, true once it succeeded; throws ``MTLSError/Code/connect`` when it failed.
    package static func finishConnect(_ fd: Int32, host: String, port: UInt16) throws -> Bool {
        try finishConnect(fd, to: "\(host) port \(port)")
    }

    /// The same for any non-blocking connect (TCP or UNIX); `to` names the address in the error.
    package static func finishConnect(_ fd: Int32, to: String) throws -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        guard poll(&p, 1, 0) > 0 else { return false }
        if p.revents == Int16(POLLOUT) { return true }  // connected (as in awaitConnection)
        let soError = pendingError(fd)
        if soError != 0 {
            throw MTLSError(.connect, "cannot connect to \(to): \(String(cString: strerror(soError)))", side: .server)
        }
        return true
    }

    /// Binds and listens on `address` ("" or nil for every IPv4 address, "::" for IPv6) and
    /// `port` (0 picks a free port). Returns the socket and the bound port.
    package static func listen(address: String?, port: UInt16, backlog: Int32 = 128) throws -> (Int32, UInt16) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let host = (address?.isEmpty ?? true) ? "0.0.0.0" : address!
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let a = list else {
            throw MTLSError(.connect, "cannot resolve listen address \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), a.pointee.ai_protocol)
        guard fd >= 0 else { throw MTLSError(.io, "socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 else {
            let e = errno; close(fd)
            throw MTLSError(.connect, "cannot bind \(host) port \(port): \(String(cString: strerror(e)))")
        }
        guard Glibc.listen(fd, backlog) == 0 else {
            let e = errno; close(fd)
            throw MTLSError(.connect, "cannot listen on \(host) port \(port): \(String(cString: strerror(e)))")
        }
        return (fd, boundPort(fd) ?? port)
    }

    /// The port a TCP socket is bound to (`getsockname`), or nil when it is no IPv4 or IPv6 socket.
    package static func boundPort(_ fd: Int32) -> UInt16? {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutablePointer(to: &storage) { p -> UInt16? in
            guard p.withMemoryRebound(to: sockaddr.self, capacity: 1, { getsockname(fd, $0, &len) }) == 0 else { return nil }
            switch Int32(p.pointee.ss_family) {
            case AF_INET6: return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            case AF_INET: return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            default: return nil
            }
        }
    }

    /// The port of a listening TCP socket (one systemd passed), or nil when `fd` is not one.
    package static func listeningPort(_ fd: Int32) -> UInt16? {
        guard isListeningStream(fd) else { return nil }
        return boundPort(fd)
    }

    /// Whether `fd` is a stream socket that listens (`SO_ACCEPTCONN` and `SO_TYPE`): what systemd
    /// must have passed under socket activation before a server accepts on it.
    package static func isListeningStream(_ fd: Int32) -> Bool {
        var accepting: Int32 = 0, type: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0, accepting == 1 else { return false }
        len = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == Int32(SOCK_STREAM.rawValue)
    }

    /// Accepts one connection, waiting up to the deadline. Returns the socket and the peer's
    /// address as text.
    package static func accept(_ listener: Int32, deadline: Deadline) throws -> (Int32, String) {
        while true {
            if let accepted = try acceptNow(listener) { return accepted }
            // A UNIX listening socket that was shut down polls readable and accepts EAGAIN
            // forever: without this the caller's deadline (and its drain check) never came.
            if deadline.remaining == 0 { throw MTLSError(.timeout, "accept timed out") }
            try wait(listener, forWriting: false, deadline: deadline, what: "accept")
        }
    }

    /// Accepts a client waiting on the non-blocking `listener`, or returns nil when none waits.
    /// The socket comes non-blocking and close-on-exec (set by `accept4` itself: no `fcntl`
    /// calls per connection) with TCP_NODELAY. Throws for anything else (EMFILE: out of file
    /// descriptors...).
    package static func acceptNow(_ listener: Int32) throws -> (Int32, String)? {
        try acceptClient(listener).map { ($0.fd, $0.peer) }
    }

    /// ``acceptNow(_:)``, with the peer's numeric host apart (as `getnameinfo` wrote it: no
    /// brackets, an IPv6 zone kept; nil for a UNIX socket's peer), so that a listener need not
    /// read it back out of the text (issue 40).
    /// `noDelay`: how the listener's accepted sockets get TCP_NODELAY (nil: set on each).
    package static func acceptClient(_ listener: Int32, noDelay: AcceptedNoDelay? = nil) throws -> (fd: Int32, peer: String, host: String?)? {
        while true {
            var storage = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { mtls_accept_nonblocking(listener, $0, &len) }
            }
            if fd >= 0 {
                if let noDelay { noDelay.apply(to: fd) } else { setNoDelay(fd) }
                let named = withUnsafePointer(to: &storage) { p in
                    p.withMemoryRebound(to: sockaddr.self, capacity: 1) { numericName($0, len) }
                }
                return (fd, named.map(describe) ?? "?", named?.host)
            }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EAGAIN: return nil
            default: throw MTLSError(.io, "accept: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Waits until `fd` is readable (or writable), or throws ``MTLSError/Code/timeout``. `what`
    /// names the wait in that error; it is only written then (issue 40: every blocking read of a
    /// connection waits here, and the text costs more than the poll's set-up).
    package static func wait(_ fd: Int32, forWriting: Bool, deadline: Deadline, what: @autoclosure () -> String) throws {
        var p = pollfd(fd: fd, events: Int16(forWriting ? POLLOUT : POLLIN), revents: 0)
        while true {
            let n = poll(&p, 1, deadline.pollTimeout)
            if n > 0 { return }
            if n == 0 { throw MTLSError(.timeout, "\(what()) timed out") }
            if errno != EINTR { throw MTLSError(.io, "poll: \(String(cString: strerror(errno)))") }
        }
    }

    package static func setNonBlocking(_ fd: Int32, _ on: Bool) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }

    static func isNonBlocking(_ fd: Int32) -> Bool { (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0 }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Whether TCP_NODELAY is on for `fd`; nil when `fd` is no TCP socket (or the call failed).
    static func noDelay(_ fd: Int32) -> Bool? {
        var on: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, &len) == 0 else { return nil }
        return on != 0
    }

    /// "127.0.0.1:443" or "[::1]:443".
    static func describe(_ sa: UnsafePointer<sockaddr>?, _ len: socklen_t) -> String {
        numericName(sa, len).map(describe) ?? "?"
    }

    /// ``numericName(_:_:)`` of an IPv4 address, or of an IPv6 address without a scope (whose
    /// zone getnameinfo would name); nil for any other.
    private static func plainNumericName(_ sa: UnsafePointer<sockaddr>, _ len: socklen_t) -> (host: String, service: String)? {
        let family = Int32(sa.pointee.sa_family)
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN) + 1) { buf -> (String, String)? in
            let size = socklen_t(buf.count)
            if family == AF_INET, Int(len) >= MemoryLayout<sockaddr_in>.size {
                return sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    var addr = sin.pointee.sin_addr
                    guard inet_ntop(AF_INET, &addr, buf.baseAddress, size) != nil else { return nil }
                    return (String(cString: buf.baseAddress!), String(UInt16(bigEndian: sin.pointee.sin_port)))
                }
            }
            if family == AF_INET6, Int(len) >= MemoryLayout<sockaddr_in6>.size {
                return sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    guard sin6.pointee.sin6_scope_id == 0 else { return nil }
                    var addr = sin6.pointee.sin6_addr
                    guard inet_ntop(AF_INET6, &addr, buf.baseAddress, size) != nil else { return nil }
                    return (String(cString: buf.baseAddress!), String(UInt16(bigEndian: sin6.pointee.sin6_port)))
                }
            }
            return nil
        }
    }

    /// "127.0.0.1:443" or "[::1]:443" for a numeric host and service.
    private static func describe(_ name: (host: String, service: String)) -> String {
        name.host.contains(":") ? "[\(name.host)]:\(name.service)" : "\(name.host):\(name.service)"
    }

    /// The numeric host and service of an address (`getnameinfo`), nil for a UNIX socket's peer
    /// (no address to show: getnameinfo would say "localhost:") or when it fails.
    private static func numericName(_ sa: UnsafePointer<sockaddr>?, _ len: socklen_t) -> (host: String, service: String)? {
        guard let sa, sa.pointee.sa_family != sa_family_t(AF_UNIX) else { return nil }
        // An IPv4 address, or an IPv6 one without a zone: inet_ntop writes what getnameinfo
        // would (NI_NUMERICHOST), without its buffers and lookups, once per accepted client.
        if let quick = plainNumericName(sa, len) { return quick }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var serv = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        guard getnameinfo(sa, len, &host, socklen_t(host.count), &serv, socklen_t(serv.count),
                          NI_NUMERICHOST | NI_NUMERICSERV) == 0 else { return nil }
        return (String(cBuffer: host), String(cBuffer: serv))
    }

    /// "127.0.0.1:443" or "[::1]:443" for the peer a connected TCP socket reaches (`getpeername`),
    /// or nil when `fd` is not one.
    package static func peerDescription(_ fd: Int32) -> String? {
        guard fd >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let text: String? = withUnsafeMutablePointer(to: &storage) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                guard getpeername(fd, sa, &length) == 0,
                      sa.pointee.sa_family == sa_family_t(AF_INET) || sa.pointee.sa_family == sa_family_t(AF_INET6) else { return nil }
                return describe(sa, length)
            }
        }
        return text == "?" ? nil : text
    }

    /// Whether the resolver takes `host` as an address without a lookup (any spelling of one:
    /// `127.1` too, and an IPv6 address with its zone, `fe80::1%eth0`), so it is no server name
    /// to send.
    package static func isIPLiteral(_ host: String) -> Bool {
        IPAddress.scoped(host) != nil
    }
}

/// An IPv4 or IPv6 literal with a port, as a socket address (no resolver involved).
struct IPSocketAddress {
    private var storage = sockaddr_storage()
    let family: Int32
    let length: socklen_t

    init?(_ text: String, port: UInt16) {
        var v4 = sockaddr_in()
        // withCString: an IPv4 address (at most 15 bytes) is kept inside its String, and passing
        // it as a C string argument would copy it to a new array for each connection.
        if text.withCString({ inet_pton(AF_INET, $0, &v4.sin_addr) }) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            family = AF_INET
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: v4, as: sockaddr_in.self) }
            return
        }
        var v6 = sockaddr_in6()
        guard text.withCString({ inet_pton(AF_INET6, $0, &v6.sin6_addr) }) == 1 else { return nil }
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = port.bigEndian
        family = AF_INET6
        length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: v6, as: sockaddr_in6.self) }
    }

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> T) rethrows -> T {
        var copy = storage
        return try withUnsafePointer(to: &copy) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, length) }
        }
    }
}

/// TCP_NODELAY on a listener's accepted sockets without a system call for each (issue 40: the
/// `setsockopt` was one call in 16 of a resumed TLS 1.2 handshake). The option is set once on
/// the listening socket, and Linux copies a listening socket's TCP_NODELAY to every socket it
/// accepts; the first accepted socket is asked whether it came with it, and should it not (a
/// kernel that does not copy it), every socket gets it set as before. A listening socket that is
/// not TCP (a UNIX socket's) makes the option moot.
package final class AcceptedNoDelay: Sendable {
    private static let unknown: UInt8 = 0, inherited: UInt8 = 1, perSocket: UInt8 = 2, notTCP: UInt8 = 3
    private let how: Atomic<UInt8>

    /// Turns TCP_NODELAY on for the listening socket `listener` (one the listener owns: one it
    /// made, or one handed to it, such as systemd's).
    package init(listener: Int32) {
        switch Socket.noDelay(listener) {
        case nil: how = Atomic(AcceptedNoDelay.notTCP)
        case true?: how = Atomic(AcceptedNoDelay.unknown)
        case false?:
            Socket.setNoDelay(listener)
            how = Atomic(Socket.noDelay(listener) == true ? AcceptedNoDelay.unknown : AcceptedNoDelay.perSocket)
        }
    }

    /// Makes sure the socket `fd`, just accepted from the listener, has TCP_NODELAY.
    package func apply(to fd: Int32) {
        switch how.load(ordering: .relaxed) {
        case AcceptedNoDelay.inherited, AcceptedNoDelay.notTCP: return
        case AcceptedNoDelay.perSocket: Socket.setNoDelay(fd)
        default:
            if Socket.noDelay(fd) == true {
                how.store(AcceptedNoDelay.inherited, ordering: .relaxed)
            } else {
                Socket.setNoDelay(fd)
                how.store(AcceptedNoDelay.perSocket, ordering: .relaxed)
            }
        }
    }
}
