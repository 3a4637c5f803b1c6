import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// File reads and writes with libmtls's rules: bounded reads, owner-only files, atomic replace.
public enum FileIO {
    /// The largest file libmtls reads (certificates, PKCS#12, policies, CRLs): 16 MiB.
    public static let maxReadSize = 16 * 1024 * 1024

    /// Reads a whole file, refusing anything over `limit` bytes.
    public static func read(_ path: String, limit: Int = maxReadSize) throws -> [UInt8] {
        let fd = try openForReading(path)
        defer { close(fd) }
        return try readAll(fd, path: path, limit: limit)
    }

    /// Whether anything (a file, a directory, a link's target) exists at `path`.
    package static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    /// Reads a whole regular file, refusing anything over `limit` bytes and anything else at
    /// `path` (a FIFO, a device, a socket) without waiting on it: what a background thread reads
    /// (a followed policy file), which a FIFO put in the file's place must not hold up for ever.
    /// With `followLinks` false, a symbolic link at `path` is refused too (O_NOFOLLOW: a cache
    /// file, which only libmtls writes).
    package static func readRegularFile(_ path: String, limit: Int = maxReadSize, followLinks: Bool = true) throws -> [UInt8] {
        // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (followLinks ? 0 : O_NOFOLLOW))
        guard fd >= 0 else {
            if errno == ELOOP && !followLinks { throw MTLSError(.io, "\(path) is a symbolic link: not followed") }
            throw MTLSError(errno == ENOENT ? .notFound : .io, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw MTLSError(.io, "cannot read \(path): \(String(cString: strerror(errno)))") }
        switch st.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw MTLSError(.io, "\(path) is a directory")
        default: throw MTLSError(.io, "\(path) is not a regular file")
        }
        return try readAll(fd, path: path, limit: limit)
    }

    private static func openForReading(_ path: String) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw MTLSError(errno == ENOENT ? .notFound : .io, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        var st = stat()
        if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR {
            close(fd)
            throw MTLSError(.io, "\(path) is a directory")
        }
        return fd
    }

    private static func readAll(_ fd: Int32, path: String, limit: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw MTLSError(.io, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit {
                SecretBytes.wipe(&out)
                SecretBytes.wipe(&chunk)
                throw MTLSError(.limitExceeded, "\(path) is larger than the \(limit)-byte limit")
            }
        }
        SecretBytes.wipe(&chunk)
        return out
    }

    // MARK: Secret files

    /// The largest secret file libmtls reads (PIN, password, store secret or key, private key):
    /// 64 KiB, far above any of them (an RSA-16384 key in PEM is about 13 KiB).
    public static let maxSecretSize = 64 * 1024

    /// What a secret file holds. It decides how the file is read and, in this one place, whether
    /// it may be empty:
    /// - ``pin``: the first line (without `\n` or `\r\n`); an empty PIN is refused, since
    ///   sending one to a token costs a try;
    /// - ``password``: the first line; may be empty (the empty password is a password: PKCS#12
    ///   tries it with "no password");
    /// - ``storeSecret``: the first line, a passphrase; an empty one is refused;
    /// - ``storeKey``: the whole file, raw bytes (its length is the store's to check); an empty
    ///   one is refused;
    /// - ``privateKey``: the whole file (PEM); an empty one is refused.
    public enum SecretKind: String, Sendable {
        /// A token PIN.
        case pin = "PIN"
        /// A password (of a .p12, an encrypted key).
        case password = "password"
        /// A store secret.
        case storeSecret = "store secret"
        /// A store key file.
        case storeKey = "store key"
        /// A private key file.
        case privateKey = "private key"
        /// A bearer token a client must present (the metrics endpoint's `--metrics-token-file`).
        case bearerToken = "bearer token"

        var firstLineOnly: Bool { self == .pin || self == .password || self == .storeSecret || self == .bearerToken }
        var mayBeEmpty: Bool { self == .password }
    }

    /// Reads a secret file of `kind` (see ``SecretKind``), as OpenSSH reads a private key: a file
    /// owned by a user other than the effective user or root is refused with
    /// ``MTLSError/Code/invalidArgument`` and a message naming the file and its owner; a file
    /// that anyone but its owner can write (group or other write bit), or that everyone can read
    /// (other read bit), is refused the same way with a message naming the file and the
    /// `chmod 600` that fixes it; a group-readable one is read, with a warning
    /// through ``LibraryWarnings`` (the library prints nothing). The mode is that of the file
    /// opened (a symbolic link's target), read after opening so it cannot change in between;
    /// terminals and other character devices (`/dev/stdin` on a terminal) are not checked.
    /// Files over ``maxSecretSize`` are ``MTLSError/Code/limitExceeded``. The buffers read are
    /// wiped.
    public static func readSecret(_ path: String, kind: SecretKind) throws -> SecretBytes {
        let fd = try openForReading(path)
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw MTLSError(.io, "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        if (st.st_mode & S_IFMT) != S_IFCHR {
            try checkOwnerOnlyWritable(st, what: "the \(kind.rawValue) file \(path)", path: path, chmod: "600")
            let mode = st.st_mode & 0o777
            let octal = "0" + String(mode, radix: 8)
            if mode & 0o004 != 0 {
                throw MTLSError(.invalidArgument, "the \(kind.rawValue) file \(path) is readable by everyone (mode \(octal)): refusing to use it; run chmod 600 \(path)")
            }
            if mode & 0o040 != 0 {
                LibraryWarnings.emit("the \(kind.rawValue) file \(path) is readable by its group (mode \(octal)); chmod 600 \(path) keeps it to its owner")
            }
        }
        var bytes = try readAll(fd, path: path, limit: maxSecretSize)
        defer { SecretBytes.wipe(&bytes) }
        var end = bytes.count
        if kind.firstLineOnly {
            end = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            if end > 0, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        }
        guard end > 0 || kind.mayBeEmpty else {
            throw MTLSError(.invalidArgument, "the \(kind.rawValue) file \(path) is empty")
        }
        return SecretBytes(Array(bytes[0..<end]))
    }

    /// Throws ``MTLSError/Code/invalidArgument`` unless the file or folder `st` describes belongs
    /// to the effective user (or root) and can be written by no one else (no group or other write
    /// bit): what one who is not the user could change or replace is not trusted, a secret file
    /// (as OpenSSH refuses a key file that is not the user's or root's) or a cache folder alike.
    /// `what` names it in the message, `chmod` is the mode the fix suggests.
    static func checkOwnerOnlyWritable(_ st: stat, what: String, path: String, chmod: String) throws {
        let me = geteuid()
        if st.st_uid != me && st.st_uid != 0 {
            throw MTLSError(.invalidArgument, "\(what) is owned by another user (uid \(st.st_uid)), not by this user (uid \(me)) or root: refusing to use it; run chown \(me) \(path)")
        }
        let mode = st.st_mode & 0o777
        if mode & 0o022 != 0 {
            throw MTLSError(.invalidArgument, "\(what) can be written by others (mode 0\(String(mode, radix: 8))): refusing to use it; run chmod \(chmod) \(path)")
        }
    }

    /// A folder only the user may change, for files libmtls keeps (the revocation cache): made
    /// 0700 when missing; an existing one must be a folder (not followed through a symbolic link)
    /// that ``checkOwnerOnlyWritable(_:what:path:chmod:)`` accepts. Throws saying why not.
    package static func privateDirectory(_ path: String, what: String) throws {
        var st = stat()
        if lstat(path, &st) != 0 {
            guard errno == ENOENT else { throw MTLSError(.io, "\(what) \(path): \(String(cString: strerror(errno)))") }
            if mkdir(path, 0o700) == 0 { return }
            guard errno == EEXIST, lstat(path, &st) == 0 else {
                throw MTLSError(.io, "cannot create \(what) \(path): \(String(cString: strerror(errno)))")
            }
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            throw MTLSError(.invalidArgument, "\(what) \(path) is not a folder (a symbolic link or a file): refusing to use it")
        }
        try checkOwnerOnlyWritable(st, what: "\(what) \(path)", path: path, chmod: "700")
    }

    /// Writes `bytes` to `path` with mode 0600 (or `mode`), atomically: a temporary file in the
    /// same directory, fsync, then rename over the target. Nothing half-written is ever visible.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) throws {
        let tmp = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else {
            // Named by the file asked for and its folder, never by the temporary name.
            let err = errno
            let folder = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
            if err == ENOENT {
                throw MTLSError(.io, "cannot write \(path): the folder \(folder.isEmpty ? "." : folder) does not exist (create it first)")
            }
            throw MTLSError(err == ENOSPC ? .diskFull : .io, "cannot write \(path): \(String(cString: strerror(err)))")
        }
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                let err = errno
                close(fd)
                throw MTLSError(err == ENOSPC ? .diskFull : .io, "cannot write \(path): \(String(cString: strerror(err)))")
            }
            off += n
        }
        _ = fchmod(fd, mode)
        guard fsync(fd) == 0 else {
            let err = errno; close(fd)
            throw MTLSError(.io, "cannot sync \(path): \(String(cString: strerror(err)))")
        }
        close(fd)
        guard rename(tmp, path) == 0 else { throw MTLSError(.io, "cannot write \(path): \(String(cString: strerror(errno)))") }
        ok = true
    }
}
