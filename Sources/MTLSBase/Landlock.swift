internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Landlock, best effort: a process that writes no file except beneath the folders it names
/// (its credential store's, say) and executes no program. Reading is not restricted (identity
/// files, anchors, the system trust store, PKCS#11 modules and their tokens' own files stay
/// readable). Applies to the calling thread and every thread it starts afterwards: call it before
/// the process starts any.
package enum Landlock {
    /// What happened: applied with the kernel's Landlock ABI version, or not, and why.
    package enum Outcome: Equatable, Sendable {
        case applied(abi: Int)
        case notApplied(String)
    }

    static let execute: UInt64 = 1 << 0
    static let writeFile: UInt64 = 1 << 1
    /// REMOVE_DIR ... MAKE_SYM (ABI 1).
    static let changes: UInt64 = (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
    static let refer: UInt64 = 1 << 13  // ABI 2
    static let truncate: UInt64 = 1 << 14  // ABI 3

    /// Restricts this process: files are written, created, removed or truncated only beneath
    /// `writable` (folders that do not exist are left out), and nothing is executed.
    package static func restrictWrites(writable: [String]) -> Outcome {
        let abi = Int(mtls_landlock_abi())
        guard abi >= 1 else {
            return .notApplied("the kernel has no Landlock (\(String(cString: strerror(errno))))")
        }
        var handled = execute | writeFile | changes
        if abi >= 2 { handled |= refer }
        if abi >= 3 { handled |= truncate }
        let ruleset = mtls_landlock_create(handled)
        guard ruleset >= 0 else { return .notApplied("landlock_create_ruleset: \(String(cString: strerror(errno)))") }
        for path in writable where !path.isEmpty {
            if mtls_landlock_allow(ruleset, path, handled & ~execute) != 0 && errno != ENOENT {
                let e = errno
                close(ruleset)
                return .notApplied("cannot allow writes beneath \(path): \(String(cString: strerror(e)))")
            }
        }
        // Writing to /dev/null and the terminal.
        _ = mtls_landlock_allow(ruleset, "/dev", writeFile)
        guard mtls_landlock_enforce(ruleset) == 0 else {
            return .notApplied("landlock_restrict_self: \(String(cString: strerror(errno)))")
        }
        return .applied(abi: abi)
    }
}
