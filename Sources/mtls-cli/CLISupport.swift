import ArgumentParser
import Foundation
import MTLS

/// Text the command line writes for a person (stdout, stderr, `renew --loop` logs). Its literal
/// parts are the program's own; every value interpolated into it is taken as text from outside
/// (a label, a certificate's name, a file name, a CA's or a peer's answer) and passes
/// ``OneLine/text(_:)``: it cannot start a line of its own, move the cursor, or reverse what
/// follows. The module's `print` takes only this type, so no print can forget to clean.
struct TerminalText: ExpressibleByStringInterpolation, Sendable {
    /// The text as it is printed.
    let text: String

    init(stringLiteral value: String) { text = value }
    init(stringInterpolation: StringInterpolation) { text = stringInterpolation.text }

    /// Several lines of outside text (a server's reply, a PEM block): each line is cleaned, its
    /// line feeds kept (a carriage return before one is dropped).
    init(lines: String) {
        text = lines.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            OneLine.text(String(line.hasSuffix("\r") ? line.dropLast() : line))
        }.joined(separator: "\n")
    }

    private init(cleaned: String) { text = cleaned }

    /// `parts` one after another with `separator` (the program's own text) between them.
    static func joined(_ parts: [TerminalText], separator: String) -> TerminalText {
        TerminalText(cleaned: parts.map(\.text).joined(separator: separator))
    }

    struct StringInterpolation: StringInterpolationProtocol {
        fileprivate var text = ""
        init(literalCapacity: Int, interpolationCount: Int) { text.reserveCapacity(literalCapacity + 16 * interpolationCount) }
        mutating func appendLiteral(_ literal: String) { text += literal }
        /// Any value, as `"\(value)"` would show it, cleaned.
        mutating func appendInterpolation<T>(_ value: T) { text += OneLine.text(String(describing: value)) }
        /// Terminal text already made (its own line breaks are the program's).
        mutating func appendInterpolation(_ value: TerminalText) { text += value.text }
    }
}

/// Writes `text` on stdout: the command line's one way to print (it shadows the standard
/// library's `print` in this module, which takes anything).
func print(_ text: TerminalText, terminator: String = "\n") {
    Swift.print(text.text, terminator: terminator)
}

/// The standard library's `print` would write outside text raw: in this module, text is printed
/// as ``TerminalText``.
@available(*, unavailable, message: "print a TerminalText (\"...\\(value)...\"): what is interpolated is cleaned")
func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {}

/// Output helpers shared by every command: JSON, one-line errors, exit codes.
enum CLI {
    /// Prints `object` as JSON on stdout (sorted keys, so output is stable). Values stay exact;
    /// the characters a terminal must not see raw (``OneLine/isUnsafe(_:)``) are `\u` escapes.
    static func printJSON(_ object: Any) {
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        Swift.print(OneLine.escapingJSON(String(decoding: data, as: UTF8.self)))
    }

    /// Writes one line to stderr, prefixed with `mtls: `; whatever the message quotes is cleaned
    /// (``OneLine/text(_:)``).
    static func printError(_ message: String) {
        FileHandle.standardError.write(Data("mtls: \(OneLine.text(message))\n".utf8))
    }

    /// RFC 3339 UTC text of a date (`2026-11-21T05:35:56Z`).
    static func rfc3339(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: date)
    }

    /// Parses RFC 3339 text.
    static func parseRFC3339(_ text: String) throws -> Date {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        throw ValidationError("not an RFC 3339 time: \(text)")
    }

    /// Reads a PIN file (`--pin-file`) with the core's one secret-file reader
    /// (``FileIO/readSecret(_:kind:)``): the first line; refused when others can write it or
    /// everyone can read it, or when empty.
    static func readPINFile(_ path: String) throws -> SecretBytes {
        try FileIO.readSecret(path, kind: .pin)
    }

    /// Reads a password file (`--password-file`, `--key-password-file`) the same way; an empty
    /// first line is the empty password.
    static func readPasswordFile(_ path: String) throws -> SecretBytes {
        try FileIO.readSecret(path, kind: .password)
    }

    /// The password of a PKCS#12 file to read, the same way in every command that reads one:
    /// `--password-file F` (its first line), else `--no-password` (none at all), else the
    /// `MTLS_P12_PASSWORD` environment variable. With none of them: nil when `required` is
    /// false (the file is tried with no password and the empty one), else an error naming the three.
    static func p12Password(file: String?, noPassword: Bool, required: Bool) throws -> SecretBytes? {
        if file != nil && noPassword { throw ValidationError("--password-file and --no-password exclude each other") }
        if noPassword { return nil }
        if let file {
            do { return try readPasswordFile(file) } catch let e as MTLSError {
                // A file problem keeps its own code (not_found, io): the password was never tried.
                throw MTLSError(e.code, "cannot read the password file: \(e.message)")
            }
        }
        if let env = ProcessInfo.processInfo.environment["MTLS_P12_PASSWORD"] { return SecretBytes(env) }
        if required {
            throw MTLSError(.badPassword, "a password is needed: give --password-file FILE, set MTLS_P12_PASSWORD, or say --no-password")
        }
        return nil
    }

    /// Refuses to write over an existing file unless `force` (`--force`).
    static func refuseToOverwrite(_ path: String, force: Bool) throws {
        if !force && FileManager.default.fileExists(atPath: path) {
            throw MTLSError(.duplicate, "\(path) already exists: pass --force to overwrite it, or choose another file")
        }
    }

    /// Prints the warnings the library gave on this thread (a group-readable secret file), one
    /// `mtls: warning: ...` line each on stderr.
    static func printWarnings() {
        for w in LibraryWarnings.take() { printError("warning: \(w)") }
    }

    /// Raises this process's soft limit of open files to its hard limit, for a server that holds
    /// a socket per client (each waiting for its ClientHello too): the usual soft limit of 1,024
    /// would run out long before the listener's own limits do. A program decides this for
    /// itself, so the library never does; the command line, being the program, does it for
    /// `serve`. Nothing happens when the limit cannot be read or raised.
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// The stable snake_case name of a failure for `--json` output (`internal` for anything that
    /// is not an ``MTLSError``).
    static func errorName(_ error: Error) -> String { (error as? MTLSError)?.code.name ?? "internal" }

    /// Runs `body` and returns its value. Any failure but a usage error is reported as
    /// `{"error", "message"}` on stdout when `json` (named by `errorName`) and in one line on
    /// stderr, then the command exits 1; usage errors go on to ArgumentParser.
    @discardableResult
    static func reporting<T>(json: Bool = false, errorName: (Error) -> String = CLI.errorName,
                             _ body: () throws -> T) throws -> T {
        defer { printWarnings() }
        do { return try body() } catch let e as ValidationError { throw e } catch {
            if json { printJSON(["error": errorName(error), "message": (error as? MTLSError)?.message ?? "\(error)"]) }
            throw fail(error)
        }
    }

    /// Reports `error` on stderr in one line and exits with status 1.
    static func fail(_ error: Error) -> ExitCode {
        if let e = error as? MTLSError { printError(e.message) } else { printError("\(error)") }
        return ExitCode(1)
    }
}
