// Library-wide C functions: version, error texts, freeing what the library allocated.
import MTLS
#if canImport(Glibc)
import Glibc
#endif

// The C strings below are made once, on first use, and never written or freed afterwards, so
// every thread may read them: `nonisolated(unsafe)` says so to the compiler.
nonisolated(unsafe) private let versionString: UnsafeMutablePointer<CChar> = strdup(MTLSVersion.string)!

/// `const char *mtls_version(void)`
@_cdecl("mtls_version")
public func mtls_version() -> UnsafePointer<CChar> { UnsafePointer(versionString) }

/// `int mtls_version_number(void)`
@_cdecl("mtls_version_number")
public func mtls_version_number() -> Int32 { Int32(MTLSVersion.number) }

nonisolated(unsafe) private let errorTexts: [Int32: UnsafeMutablePointer<CChar>] = {
    var d: [Int32: UnsafeMutablePointer<CChar>] = [0: strdup("ok")!]
    for (code, _, text) in MTLSError.Code.all { d[code.rawValue] = strdup(text)! }
    return d
}()
nonisolated(unsafe) private let unknownErrorText: UnsafeMutablePointer<CChar> = strdup("unknown error code")!
nonisolated(unsafe) private let errorNames: [Int32: UnsafeMutablePointer<CChar>] = {
    var d: [Int32: UnsafeMutablePointer<CChar>] = [0: strdup("ok")!]
    for (code, name, _) in MTLSError.Code.all { d[code.rawValue] = strdup(name)! }
    return d
}()

/// `const char *mtls_strerror(int code)`
@_cdecl("mtls_strerror")
public func mtls_strerror(_ code: Int32) -> UnsafePointer<CChar> {
    UnsafePointer(errorTexts[code] ?? unknownErrorText)
}

/// `const char *mtls_error_name(int code)`
@_cdecl("mtls_error_name")
public func mtls_error_name(_ code: Int32) -> UnsafePointer<CChar> {
    UnsafePointer(errorNames[code] ?? unknownErrorText)
}

nonisolated(unsafe) private let noErrorText: UnsafeMutablePointer<CChar> = strdup("")!

/// `const char *mtls_last_error(void)`
@_cdecl("mtls_last_error")
public func mtls_last_error() -> UnsafePointer<CChar> {
    lastErrorMessage().map { UnsafePointer($0) } ?? UnsafePointer(noErrorText)
}

/// `int mtls_take_warnings(char ***out, size_t *count)`
@_cdecl("mtls_take_warnings")
public func mtls_take_warnings(_ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { LibraryWarnings.take() } }
}

/// `void mtls_string_free(char *s)`
@_cdecl("mtls_string_free")
public func mtls_string_free(_ s: UnsafeMutablePointer<CChar>?) { wipeAndFree(s) }

/// `void mtls_string_list_free(char **list, size_t count)`
@_cdecl("mtls_string_list_free")
public func mtls_string_list_free(_ list: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ count: Int) {
    freeArray(list, count) { wipeAndFree($0) }
}

/// `int mtls_password_file_read(const char *path, char **out)`: the core's secret-file reader
/// (``FileIO/readSecret(_:kind:)``), copied into malloc'ed memory without passing through a Swift
/// `String` (which could not be wiped).
@_cdecl("mtls_password_file_read")
public func mtls_password_file_read(_ path: UnsafePointer<CChar>?,
                                    _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall {
        let out = try require(out, "out")
        out.pointee = nil
        let secret = try FileIO.readSecret(try string(path, "path"), kind: .password)
        try secret.withBytes { b in
            guard !b.contains(0) else {
                throw MTLSError(.invalidArgument, "the password file holds a NUL byte on its first line")
            }
            guard let mem = malloc(b.count + 1)?.assumingMemoryBound(to: CChar.self) else {
                throw MTLSError(.noMemory, "out of memory")
            }
            b.withMemoryRebound(to: CChar.self) { c in
                if let base = c.baseAddress { mem.update(from: base, count: c.count) }
            }
            mem[b.count] = 0
            out.pointee = mem
        }
    }
}

/// `void mtls_bytes_free(uint8_t *b)`
@_cdecl("mtls_bytes_free")
public func mtls_bytes_free(_ b: UnsafeMutablePointer<UInt8>?) { wipeAndFree(b) }

/// glibc's malloc_usable_size(3) (malloc.h is not part of the Glibc module).
@_silgen_name("malloc_usable_size")
private func libmtls_malloc_usable_size(_ p: UnsafeMutableRawPointer?) -> Int

/// Frees a buffer the library allocated after zeroing all of it: such buffers may hold private
/// keys (PEM, PKCS#12 with a weak password) or other secrets.
func wipeAndFree<T>(_ p: UnsafeMutablePointer<T>?) {
    guard let p else { return }
    explicit_bzero(p, libmtls_malloc_usable_size(p))
    free(p)
}

/// `int mtls_url_host_port(const char *url, char **host, uint16_t *port)`: the core's URL
/// parser (``URLAuthority``) for front ends that read a URL of their own (Python's proxy URLs).
@_cdecl("mtls_url_host_port")
public func mtls_url_host_port(_ url: UnsafePointer<CChar>?, _ host: CStringOut?, _ port: UnsafeMutablePointer<UInt16>?) -> Int32 {
    abiCall {
        let host = try require(host, "host")
        host.pointee = nil
        let port = try require(port, "port")
        let text = try string(url, "url")
        guard text.lowercased().hasPrefix("http://") || text.lowercased().hasPrefix("https://") else {
            throw MTLSError(.invalidArgument, "not an http:// or https:// URL: \(text)")
        }
        let parts = text.lowercased().hasPrefix("http://") ? try URLAuthority.hostAndPort(http: text)
                                                           : try URLAuthority.hostAndPort(https: text)
        try putString(parts.host, host)
        port.pointee = parts.port
    }
}

/// `int mtls_host_only(const char *text, char **host)`: a host given apart from its port, read as
/// `mtls_conn_connect` reads it (``HostLiteral/hostOnly(_:)``), for front ends that take one
/// (Python's Connection.connect and asyncio).
@_cdecl("mtls_host_only")
public func mtls_host_only(_ text: UnsafePointer<CChar>?, _ host: CStringOut?) -> Int32 {
    abiCall {
        let host = try require(host, "host")
        host.pointee = nil
        try putString(try HostLiteral.hostOnly(try string(text, "text")), host)
    }
}

/// `int mtls_host_port(const char *text, char **host, uint16_t *port)`: the core's one
/// `host[:port]` splitter (``HostLiteral/split(_:emptyPort:)``, what `mtls connect HOST:PORT`,
/// `mtls verify --host` and host rules read) for front ends that take a host of their own
/// (Python's Connection, asyncio and HTTP adapters).
@_cdecl("mtls_host_port")
public func mtls_host_port(_ text: UnsafePointer<CChar>?, _ host: CStringOut?, _ port: UnsafeMutablePointer<UInt16>?) -> Int32 {
    abiCall {
        let host = try require(host, "host")
        host.pointee = nil
        let port = try require(port, "port")
        let split = try HostLiteral.authority(try string(text, "text"))
        try putString(split.host, host)
        port.pointee = split.port ?? 0
    }
}
