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
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw MTLSError(errno == ENOENT ? .notFound : .io, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR {
            throw MTLSError(.io, "\(path) is a directory")
        }
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
                throw MTLSError(.limitExceeded, "\(path) is larger than the \(limit)-byte limit")
            }
        }
        return out
    }

    /// Writes `bytes` to `path` with mode 0600 (or `mode`), atomically: a temporary file in the
    /// same directory, fsync, then rename over the target. Nothing half-written is ever visible.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) throws {
        let tmp = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw MTLSError(.io, "cannot create \(tmp): \(String(cString: strerror(errno)))") }
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
        guard rename(tmp, path) == 0 else { throw MTLSError(.io, "cannot rename \(tmp) to \(path): \(String(cString: strerror(errno)))") }
        ok = true
    }
}
