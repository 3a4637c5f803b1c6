// The C ABI's plumbing: status codes, the per-thread last error, handle boxing, strings out.
// No logic lives in this target: every function converts arguments and calls the Swift core.
import MTLS
#if canImport(Glibc)
import Glibc
#endif

let MTLS_OK: Int32 = 0

// MARK: last error (per thread)

private let lastErrorKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key) { p in free(p) }
    return key
}()

/// Records `message` as this thread's last error.
func setLastError(_ message: String) {
    let old = pthread_getspecific(lastErrorKey)
    pthread_setspecific(lastErrorKey, strdup(message))
    free(old)
}

/// This thread's last error message, if any (owned by the thread's slot).
func lastErrorMessage() -> UnsafeMutablePointer<CChar>? {
    pthread_getspecific(lastErrorKey)?.assumingMemoryBound(to: CChar.self)
}

/// Runs `body`, mapping a thrown ``MTLSError`` to its code and recording its message.
func abiCall(_ function: String = #function, _ body: () throws -> Void) -> Int32 {
    do {
        try body()
        return MTLS_OK
    } catch let e as MTLSError {
        setLastError(e.message)
        return e.code.rawValue
    } catch {
        setLastError("\(error)")
        return MTLSError.Code.internal.rawValue
    }
}

/// An ``MTLSError`` for a NULL or malformed argument, naming it.
func invalid(_ what: String) -> MTLSError { MTLSError(.invalidArgument, what) }

/// Checks that a pointer argument is not NULL.
@inline(__always)
func require<T>(_ p: T?, _ name: String) throws -> T {
    guard let p else { throw invalid("\(name) must not be NULL") }
    return p
}

// MARK: handles

/// Turns a Swift object into an opaque C handle holding one reference.
func retainHandle<T: AnyObject>(_ object: T) -> OpaquePointer {
    OpaquePointer(Unmanaged.passRetained(object).toOpaque())
}

/// Borrows the object behind a handle (no reference change).
func handle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type, _ name: String) throws -> T {
    guard let p else { throw invalid("\(name) must not be NULL") }
    return Unmanaged<T>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
}

/// Drops the reference a handle holds. NULL is a no-op.
func releaseHandle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type) {
    guard let p else { return }
    Unmanaged<T>.fromOpaque(UnsafeRawPointer(p)).release()
}

/// Adds a reference to a handle and returns it (for `*_ref` functions).
func refHandle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type) -> OpaquePointer? {
    guard let p else { return nil }
    _ = Unmanaged<T>.fromOpaque(UnsafeRawPointer(p)).retain()
    return p
}

// MARK: arguments in, results out

/// A NUL-terminated UTF-8 argument.
func string(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String {
    String(cString: try require(p, name))
}

/// An optional NUL-terminated UTF-8 argument (NULL → nil).
func optionalString(_ p: UnsafePointer<CChar>?) -> String? {
    p.map { String(cString: $0) }
}

/// A `(const uint8_t *, size_t)` argument. NULL with a zero length is an empty buffer.
func bytes(_ p: UnsafePointer<UInt8>?, _ len: Int, _ name: String) throws -> [UInt8] {
    if len == 0 { return [] }
    return Array(UnsafeBufferPointer(start: try require(p, name), count: len))
}

/// Writes a malloc'ed copy of `s` to `out` (freed by the caller with `mtls_string_free`).
func putString(_ s: String, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) throws {
    let out = try require(out, "out")
    guard let copy = strdup(s) else { throw MTLSError(.noMemory, "out of memory") }
    out.pointee = copy
}

/// Writes a malloc'ed copy of `b` to `out`/`outLen` (freed with `mtls_bytes_free`).
func putBytes(_ b: [UInt8], _ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
              _ outLen: UnsafeMutablePointer<Int>?) throws {
    let out = try require(out, "out")
    let outLen = try require(outLen, "out_len")
    guard let mem = malloc(max(b.count, 1))?.assumingMemoryBound(to: UInt8.self) else {
        throw MTLSError(.noMemory, "out of memory")
    }
    b.withUnsafeBufferPointer { mem.update(from: $0.baseAddress!, count: b.count) }
    out.pointee = mem
    outLen.pointee = b.count
}

/// Copies `b` into a caller's fixed-size buffer, which must be exactly `b.count` bytes or more.
func copyInto(_ b: [UInt8], _ out: UnsafeMutablePointer<UInt8>?, _ outLen: Int) throws {
    let out = try require(out, "out")
    guard outLen >= b.count else {
        throw MTLSError(.bufferTooSmall, "buffer of \(outLen) bytes is too small: \(b.count) needed")
    }
    b.withUnsafeBufferPointer { out.update(from: $0.baseAddress!, count: b.count) }
}

/// Writes a malloc'ed array of handles (each holding one reference) to `out`/`count`; freed
/// with the matching `*_list_free`.
func putHandles<T: AnyObject>(_ objects: [T], _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                              _ count: UnsafeMutablePointer<Int>?) throws {
    let out = try require(out, "out")
    let count = try require(count, "count")
    guard let mem = malloc(max(objects.count, 1) * MemoryLayout<OpaquePointer?>.stride)?
        .assumingMemoryBound(to: OpaquePointer?.self) else { throw MTLSError(.noMemory, "out of memory") }
    for (i, o) in objects.enumerated() { (mem + i).initialize(to: retainHandle(o)) }
    out.pointee = mem
    count.pointee = objects.count
}

/// Releases an array made by ``putHandles``.
func freeHandles<T: AnyObject>(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int, _ type: T.Type) {
    guard let list else { return }
    for i in 0..<count { releaseHandle(list[i], type) }
    free(list)
}
