import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Warnings the library gives while going on (a group-readable secret file that was used):
/// the library never prints, so each front end shows them its own way — the CLI on stderr, C
/// through `mtls_take_warnings`, Python as `warnings.warn`. Warnings are kept per thread, on the
/// thread whose call gave them, until ``take()``; at most ``limit`` are kept (the oldest go).
public enum LibraryWarnings {
    /// How many warnings a thread keeps before the oldest are dropped.
    public static let limit = 32

    private final class Box { var messages: [String] = [] }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { p in if let p { Unmanaged<AnyObject>.fromOpaque(p).release() } }
        return key
    }()

    private static var box: Box {
        if let p = pthread_getspecific(key) { return Unmanaged<Box>.fromOpaque(p).takeUnretainedValue() }
        let b = Box()
        pthread_setspecific(key, Unmanaged.passRetained(b).toOpaque())
        return b
    }

    /// Records a warning on this thread, as one clean line (``OneLine/text(_:)``: it may quote a
    /// file name).
    package static func emit(_ message: String) {
        let b = box
        b.messages.append(OneLine.text(message))
        if b.messages.count > limit { b.messages.removeFirst(b.messages.count - limit) }
    }

    /// This thread's warnings since the last call, oldest first; clears them.
    public static func take() -> [String] {
        guard pthread_getspecific(key) != nil else { return [] }
        let b = box
        defer { b.messages = [] }
        return b.messages
    }
}
