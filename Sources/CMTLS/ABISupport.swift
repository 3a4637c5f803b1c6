// The C ABI's plumbing: status codes, the per-thread last error, handle boxing, strings out.
// No logic lives in this target: every function converts arguments and calls the Swift core.
import MTLS
import CMTLSHeader
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

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
        return MTLS_OK.rawValue
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

/// What a C handle points to: a tag word marking a live libmtls handle, then the object. The
/// handle's references are the box's; the box holds the object. A handle of the wrong type, or
/// one already freed, is caught on entry (best effort: a freed handle is caught until its memory
/// is reused, and a pointer libmtls never made is read as if it were a box).
final class HandleBox {
    /// First stored property, so it sits right after the object header (see ``tagOffset``).
    var tag: UInt64
    let object: AnyObject

    static let liveTag: UInt64 = 0x6D74_6C73_2D68_646C // "mtls-hdl"
    static let deadTag: UInt64 = 0x6465_6164_2D68_646C // "dead-hdl"
    /// Offset of ``tag`` from the start of the object: a Swift class instance starts with its
    /// isa pointer and reference counts (two words). Checked once at first use.
    static let tagOffset: Int = {
        let probe = HandleBox(NSNullMarker())
        let raw = UnsafeRawPointer(Unmanaged.passUnretained(probe).toOpaque())
        let offset = 2 * MemoryLayout<UInt>.stride
        precondition(raw.load(fromByteOffset: offset, as: UInt64.self) == liveTag, "HandleBox layout")
        return withExtendedLifetime(probe) { offset }
    }()

    init(_ object: AnyObject) {
        tag = HandleBox.liveTag
        self.object = object
    }

    deinit { tag = HandleBox.deadTag }

    /// The box behind `p`, or nil when `p` does not carry the live tag.
    static func live(_ p: OpaquePointer) -> HandleBox? {
        let raw = UnsafeRawPointer(p)
        guard raw.load(fromByteOffset: tagOffset, as: UInt64.self) == liveTag else { return nil }
        return Unmanaged<HandleBox>.fromOpaque(raw).takeUnretainedValue()
    }
}

/// A placeholder object for the layout probe.
private final class NSNullMarker {}

/// Turns a Swift object into an opaque C handle holding one reference.
func retainHandle<T: AnyObject>(_ object: T) -> OpaquePointer {
    OpaquePointer(Unmanaged.passRetained(HandleBox(object)).toOpaque())
}

/// The object behind a handle, or an error naming the argument: NULL, not a live libmtls handle
/// (freed, or never made by libmtls), or a handle of another type.
func typedObject<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type, _ name: String) throws -> T {
    guard let p else { throw invalid("\(name) must not be NULL") }
    guard let box = HandleBox.live(p) else {
        throw invalid("\(name) is not a live libmtls handle (it was freed, or was not made by libmtls)")
    }
    guard let object = box.object as? T else {
        throw invalid("\(name) is a handle of the wrong type (\(Swift.type(of: box.object)), not \(T.self))")
    }
    return object
}

/// Borrows the object behind a handle (no reference change).
func handle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type, _ name: String) throws -> T {
    try typedObject(p, type, name)
}

/// Drops the reference a handle holds. NULL, a freed handle or one of another type is a no-op
/// (best effort; the last error says why).
func releaseHandle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type) {
    guard let p else { return }
    do { _ = try typedObject(p, type, "handle") } catch {
        setLastError("\(error)")
        return
    }
    Unmanaged<HandleBox>.fromOpaque(UnsafeRawPointer(p)).release()
}

/// Closes the object behind a handle with `close` (so its socket or file goes at once, whatever
/// other references live), then drops the reference the handle holds. NULL is a no-op, and so
/// is a freed handle or one of another type.
func closeHandle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type, _ close: (T) -> Void) {
    guard let p, let object = try? typedObject(p, type, "handle") else { return }
    close(object)
    releaseHandle(p, type)
}

/// Adds a reference to a handle and returns it (for `*_ref` functions); NULL for NULL, a freed
/// handle or one of another type.
func refHandle<T: AnyObject>(_ p: OpaquePointer?, _ type: T.Type) -> OpaquePointer? {
    guard let p, (try? typedObject(p, type, "handle")) != nil else { return nil }
    _ = Unmanaged<HandleBox>.fromOpaque(UnsafeRawPointer(p)).retain()
    return p
}

// MARK: arguments in, results out

/// A NUL-terminated UTF-8 argument.
func string(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String {
    // Strings in are UTF-8 (mtls.h): bytes that are not are refused, never repaired into a
    // different string (a URI or label stored "successfully" but altered).
    guard let s = String(validatingCString: try require(p, name)) else {
        throw invalid("\(name) is not valid UTF-8")
    }
    return s
}

/// One argument of a call made again and again with the same text (a client's host, SNI and
/// verify-as on every connection): the last text read is kept with its bytes, and the same bytes
/// again give it without a new reading (issue 40: turning C strings into Swift strings ran about
/// 30 of the 64-byte lines of code of a resumed client handshake, all cold). Bytes are compared,
/// so the text is exactly what ``string(_:_:)`` makes of them. Not for secrets.
final class CStringMemo: Sendable {
    private let last = Locked<(bytes: [UInt8], text: String)?>(nil)

    /// ``string(_:_:)``, from the kept text when the bytes are the last ones read.
    func string(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String {
        let p = try require(p, name)
        let count = strlen(p)
        if let hit = last.withLock({ l -> String? in
            guard let l, l.bytes.count == count,
                  l.bytes.withUnsafeBytes({ b in b.baseAddress.map { memcmp($0, p, count) == 0 } ?? true }) else { return nil }
            return l.text
        }) {
            return hit
        }
        let text = try CMTLS.string(p, name)
        let bytes = Array(UnsafeRawBufferPointer(start: p, count: count))
        last.withLock { $0 = (bytes, text) }
        return text
    }

    /// ``optionalString(_:_:)``, as ``string(_:_:)`` above.
    func optionalString(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String? {
        guard let p else { return nil }
        return try string(p, name)
    }
}

/// An optional NUL-terminated UTF-8 argument (NULL → nil), refused as ``string(_:_:)`` refuses
/// bytes that are not UTF-8.
func optionalString(_ p: UnsafePointer<CChar>?, _ name: String) throws -> String? {
    guard let p else { return nil }
    return try string(p, name)
}

/// A C string that holds a secret (password, PIN) as secret bytes, copied straight from C
/// memory (no Swift String, whose copies cannot be wiped). NULL is nil ("none"), "" is empty.
func secretBytes(_ p: UnsafePointer<CChar>?) -> SecretBytes? {
    guard let p else { return nil }
    return SecretBytes(Array(UnsafeRawBufferPointer(start: p, count: strlen(p))))
}

/// A `const char *const *` argument with `count` entries, each a UTF-8 string (NULL with a
/// zero count is an empty list).
func stringList(_ p: UnsafePointer<UnsafePointer<CChar>?>?, _ count: Int, _ name: String) throws -> [String] {
    let n = try size(count, "the count of \(name)")
    if n == 0 { return [] }
    let list = try require(p, name)
    return try (0..<n).map { try string(list[$0], "\(name)[\($0)]") }
}

/// A `T *const *` argument of handles with `count` entries, each checked as ``handle(_:_:_:)``
/// checks one (NULL with a zero count is an empty list).
func handleList<T: AnyObject>(_ p: UnsafePointer<OpaquePointer?>?, _ count: Int, _ type: T.Type, _ name: String) throws -> [T] {
    let n = try size(count, "the count of \(name)")
    if n == 0 { return [] }
    let list = try require(p, name)
    return try (0..<n).map { try handle(list[$0], type, "\(name)[\($0)]") }
}

/// A `(const uint8_t *, size_t)` argument. NULL with a zero length is an empty buffer.
func bytes(_ p: UnsafePointer<UInt8>?, _ len: Int, _ name: String) throws -> [UInt8] {
    let len = try size(len, "the length of \(name)")
    if len == 0 { return [] }
    return Array(UnsafeBufferPointer(start: try require(p, name), count: len))
}

/// A versioned options structure as the caller's version has it: only the bytes that version
/// has (`sizes[version - 1]`) are read, the fields added later stay zero (a program built with an
/// older header passes a smaller structure).
func readVersioned<T>(_ p: UnsafePointer<T>, zero: T, sizes: [Int], _ name: String) throws -> T {
    let version = UnsafeRawPointer(p).load(as: UInt32.self)
    guard version >= 1, Int(version) <= sizes.count else {
        throw invalid("\(name) version \(version) is not supported (\(supportedVersions(sizes))); use \(name)_init")
    }
    var out = zero
    withUnsafeMutableBytes(of: &out) { $0.copyMemory(from: UnsafeRawBufferPointer(start: p, count: sizes[Int(version) - 1])) }
    return out
}

/// "1 is" or "1 to N are": the versions of a structure with one size per version.
private func supportedVersions(_ sizes: [Int]) -> String { sizes.count == 1 ? "1 is" : "1 to \(sizes.count) are" }

/// The one body of the `*_options_init` functions: checks `opts` and `version` (1 to the
/// header's `*_OPTIONS_VERSION`, one size per version in `sizes`), then writes the struct
/// `defaults` makes from the core's defaults, with its `version` field set, only the bytes that
/// version has (`sizes[version - 1]`). `name` is the struct's C name, for the message.
func initVersionedOptions<T>(_ opts: UnsafeMutablePointer<T>?, _ version: UInt32, sizes: [Int], _ name: String,
                             versionField: WritableKeyPath<T, UInt32>, _ defaults: () -> T) throws {
    let opts = try require(opts, "opts")
    guard version >= 1, Int(version) <= sizes.count else {
        throw invalid("\(name) version \(version) is not supported (\(supportedVersions(sizes)))")
    }
    var o = defaults()
    o[keyPath: versionField] = version
    withUnsafeBytes(of: &o) { bytes in
        if let base = bytes.baseAddress { UnsafeMutableRawPointer(opts).copyMemory(from: base, byteCount: sizes[Int(version) - 1]) }
    }
}

/// A C `size_t` argument (a count or a length), which Swift sees as `Int`: one above
/// `SSIZE_MAX` arrives negative and is ``MTLSError/Code/invalidArgument``, never a trap.
func size(_ n: Int, _ name: String) throws -> Int {
    guard n >= 0 else { throw invalid("\(name) (\(UInt(bitPattern: n))) is above SSIZE_MAX") }
    return n
}

/// Writes a malloc'ed copy of `s` to `out` (freed by the caller with `mtls_string_free`).
func putString(_ s: String, _ out: CStringOut?) throws {
    try require(out, "out").pointee = try cString(s)
}

/// Writes a new handle to the object `make` returns to `out`. `out` is NULL first, so it stays
/// NULL whenever an argument check or `make` throws.
func putHandle<T: AnyObject>(_ out: UnsafeMutablePointer<OpaquePointer?>?, _ make: () throws -> T) throws {
    let out = try require(out, "out")
    out.pointee = nil
    out.pointee = retainHandle(try make())
}

/// Writes the string `value` returns as ``putString`` does, or NULL when it returns nil (an
/// absent optional field). `out` is NULL first, so it stays NULL whenever `value` throws.
func putOptionalString(_ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                       _ value: () throws -> String?) throws {
    try require(out, "out").pointee = nil
    if let s = try value() { try putString(s, out) }
}

/// The element at a C `index` argument, or `MTLS_E_INVALID_ARGUMENT` naming the range.
func element<T>(_ items: [T], _ index: Int, _ what: String) throws -> T {
    guard index >= 0, index < items.count else {
        throw invalid("index \(index) is out of range (there are \(items.count) \(what))")
    }
    return items[index]
}

/// Writes a malloc'ed copy of the bytes `value` returns to `out`/`outLen` (freed with
/// `mtls_bytes_free`), or NULL and 0 when it returns nil. Both are cleared first, so they stay
/// NULL and 0 whenever `value` throws. `names` are the C parameter names, for the error message.
func putBytes(_ out: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?, _ outLen: UnsafeMutablePointer<Int>?,
              names: (String, String) = ("out", "out_len"), _ value: () throws -> [UInt8]?) throws {
    let out = try require(out, names.0)
    let outLen = try require(outLen, names.1)
    out.pointee = nil
    outLen.pointee = 0
    guard let b = try value() else { return }
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
    let outLen = try size(outLen, "out_len")
    guard outLen >= b.count else {
        throw MTLSError(.bufferTooSmall, "buffer of \(outLen) bytes is too small: \(b.count) needed")
    }
    b.withUnsafeBufferPointer { out.update(from: $0.baseAddress!, count: b.count) }
}

/// Writes a malloc'ed array of handles to the objects `make` returns (each holding one
/// reference) to `out`/`count`; freed with the matching `*_list_free`. Both are cleared first,
/// so they stay NULL and 0 whenever `make` throws.
func putHandles<T: AnyObject>(_ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                              _ count: UnsafeMutablePointer<Int>?, _ make: () throws -> [T]) throws {
    let out = try require(out, "out")
    let count = try require(count, "count")
    out.pointee = nil
    count.pointee = 0
    let objects = try make()
    guard !objects.isEmpty else { return } // an empty list is NULL and 0
    guard let mem = malloc(objects.count * MemoryLayout<OpaquePointer?>.stride)?
        .assumingMemoryBound(to: OpaquePointer?.self) else { throw MTLSError(.noMemory, "out of memory") }
    for (i, o) in objects.enumerated() { (mem + i).initialize(to: retainHandle(o)) }
    out.pointee = mem
    count.pointee = objects.count
}

/// Writes a malloc'ed array of the C values `make` returns to `out`/`count`, each made by `convert`
/// (which may allocate; `release` undoes one); freed with the matching `*_list_free`. Both are
/// cleared first, so they stay NULL and 0 whenever `make` or `convert` throws (what was converted
/// is released). An empty list is NULL and 0.
func putArray<T, E>(_ out: UnsafeMutablePointer<UnsafeMutablePointer<E>?>?, _ count: UnsafeMutablePointer<Int>?,
                    _ make: () throws -> [T], convert: (T) throws -> E, release: (E) -> Void) throws {
    let out = try require(out, "out")
    let count = try require(count, "count")
    out.pointee = nil
    count.pointee = 0
    let items = try make()
    guard !items.isEmpty else { return }
    guard let mem = malloc(items.count * MemoryLayout<E>.stride)?.assumingMemoryBound(to: E.self) else {
        throw MTLSError(.noMemory, "out of memory")
    }
    for (i, item) in items.enumerated() {
        do {
            (mem + i).initialize(to: try convert(item))
        } catch {
            for j in 0..<i { release(mem[j]) }
            free(mem)
            throw error
        }
    }
    out.pointee = mem
    count.pointee = items.count
}

/// A malloc'ed copy of `s` (freed with `wipeAndFree`, i.e. `mtls_string_free`).
func cString(_ s: String) throws -> UnsafeMutablePointer<CChar> {
    guard let copy = strdup(s) else { throw MTLSError(.noMemory, "out of memory") }
    return copy
}

/// A `char **out` parameter.
public typealias CStringOut = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
/// A `char ***out` parameter.
public typealias CStringListOut = UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>

/// Writes a malloc'ed array of malloc'ed strings (freed with `mtls_string_list_free`).
func putStrings(_ out: CStringListOut?,
                _ count: UnsafeMutablePointer<Int>?, _ make: () throws -> [String]) throws {
    try putArray(out, count, make, convert: { try cString($0) }, release: { wipeAndFree($0) })
}

/// Frees an array made by ``putArray`` after `release` ran on each entry. A count above
/// `SSIZE_MAX` cannot be the count this library gave: the list is left alone and the last error
/// says why (a `*_list_free` returns nothing to report it with).
func freeArray<E>(_ list: UnsafeMutablePointer<E>?, _ count: Int, _ release: (E) -> Void) {
    guard let list else { return }
    do { _ = try size(count, "count") } catch { setLastError("\(error)"); return }
    for i in 0..<count { release(list[i]) }
    free(list)
}

/// Releases an array made by ``putHandles`` (a count above `SSIZE_MAX` as in ``freeArray``).
func freeHandles<T: AnyObject>(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int, _ type: T.Type) {
    freeArray(list, count) { releaseHandle($0, type) }
}

/// A C callback's userdata with the application's destroy function, which runs once, when the
/// last holder lets go (a policy, source, listener, watch or token identity); the report, event
/// and PIN callback boxes all keep theirs this way. Sendable (unchecked: a raw pointer is not):
/// the fields never change; libmtls only hands `userdata` back to the application's callback and
/// destroy function.
public class CallbackUserdata: @unchecked Sendable {
    let userdata: UnsafeMutableRawPointer?
    let destroy: mtls_destroy_cb?

    init(_ userdata: UnsafeMutableRawPointer?, _ destroy: mtls_destroy_cb?) {
        self.userdata = userdata
        self.destroy = destroy
    }

    deinit { destroy?(userdata) }
}
