/// A host as written in a URL authority, a `host:port` target, a host rule or a peer: a DNS name
/// or an IP literal, an IPv6 literal in brackets (`[::1]`, `[fe80::1%eth0]`). The brackets come
/// off here and nowhere else, and `host:port` is split here and nowhere else (``split(_:)``):
/// URLs (``URLAuthority``), host rules, `mtls connect HOST:PORT`, `mtls verify --host`, the C
/// `mtls_host_port` and through it the Python bindings. What an IP literal means is
/// ``IPAddress``'s.
package enum HostLiteral {
    /// `host` without the brackets around an IPv6 literal (`[::1]` → `::1`); anything else as it
    /// is (a name, a bare address, a lone bracket).
    package static func unbracketed(_ host: String) -> String {
        // Bytes, not characters: "[" and "]" are ASCII, and a host is read per connection (issue 40).
        host.utf8.first == UInt8(ascii: "[") && host.utf8.last == UInt8(ascii: "]")
            ? String(host.dropFirst().dropLast()) : host
    }

    /// Why a `host[:port]` text could not be split (each caller words it for its own input).
    package enum Malformed: Error, Equatable, Sendable {
        /// `[` without its `]`.
        case unclosedBracket
        /// Something other than `:port` after `]`.
        case textAfterBracket
        /// A port that is not 1 to 65535 in decimal digits (an empty one when the caller wants one).
        case badPort
    }

    /// A `host[:port]` text split.
    package struct Authority: Equatable, Sendable {
        /// The host, without the brackets of an IPv6 literal (a zone, `%eth0`, kept as written);
        /// may be empty (`:443`, `[]`): whether that is an error is the caller's.
        package var host: String
        /// The port; nil when the text names none (or an empty one, `host:`, and the caller allows it).
        package var port: UInt16?
        /// Whether the host was written in brackets.
        package var bracketed: Bool

        package init(host: String, port: UInt16?, bracketed: Bool) {
            self.host = host
            self.port = port
            self.bracketed = bracketed
        }
    }

    /// Splits `host`, `host:port`, `[v6]`, `[v6]:port` (`[v6%zone]:port`), or a bare IPv6 literal
    /// (`::1`, `fe80::1%eth0`: two colons or more without brackets are all host, no port). A port
    /// is 1 to 65535 written in decimal digits; an empty one (`host:`, `[::1]:`) is no port when
    /// `emptyPort` is true (a URL's `https://host:/`), else ``Malformed/badPort``.
    package static func split(_ text: Substring, emptyPort: Bool = false) throws -> Authority {
        var portText: Substring?
        let host: Substring
        // The separators are ASCII bytes, looked for in the UTF-8 view (no grapheme breaking: a
        // host is split per connection, issue 40).
        let colonByte = UInt8(ascii: ":")
        let bracketed = text.utf8.first == UInt8(ascii: "[")
        if bracketed {
            guard let close = text.utf8.firstIndex(of: UInt8(ascii: "]")) else { throw Malformed.unclosedBracket }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            if !rest.isEmpty {
                guard rest.utf8.first == colonByte else { throw Malformed.textAfterBracket }
                portText = rest.dropFirst()
            }
        } else if let colon = text.utf8.firstIndex(of: colonByte), text[text.index(after: colon)...].utf8.firstIndex(of: colonByte) == nil {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        } else {
            host = text
        }
        guard let portText, !(portText.isEmpty && emptyPort) else {
            return Authority(host: String(host), port: nil, bracketed: bracketed)
        }
        guard let port = Self.port(portText) else { throw Malformed.badPort }
        return Authority(host: String(host), port: port, bracketed: bracketed)
    }

    /// `text` split as ``split(_:emptyPort:)`` splits it, each malformed text refused with
    /// ``MTLSError/Code/invalidArgument`` and a message naming what is wrong: the C
    /// `mtls_host_port` and every API that takes a host apart from its port (``hostOnly(_:)``).
    package static func authority(_ text: String) throws -> Authority {
        var shown: String { OneLine.text(text) }  // written only for an error
        let split: Authority
        do { split = try Self.split(Substring(text)) } catch let why as Malformed {
            switch why {
            case .unclosedBracket: throw MTLSError(.invalidArgument, "an IPv6 address without its closing bracket: \(shown)")
            case .textAfterBracket: throw MTLSError(.invalidArgument, "unexpected text after the IPv6 address (]:PORT expected): \(shown)")
            case .badPort: throw MTLSError(.invalidArgument, "a malformed port (1 to 65535 expected): \(shown)")
            }
        }
        guard !split.host.isEmpty else { throw MTLSError(.invalidArgument, "no host in \(shown)") }
        return split
    }

    /// A host given apart from its port (`TLSConnection.connect(host:port:)`, C `mtls_conn_connect`,
    /// `mtls_conn_wrap_fd`, the Python bindings' `Connection.connect` and asyncio) as libmtls reads
    /// it: the brackets of an IPv6 literal off (`[::1]` is `::1`), a bare IPv6 literal or a zone
    /// kept. A host that carries a port of its own (`server.test:443`, `[::1]:443`), a malformed
    /// one or an empty one is ``MTLSError/Code/invalidArgument``: the port is given apart, and a
    /// second port in the host would otherwise reach name resolution as part of the name.
    package static func hostOnly(_ text: String) throws -> String {
        let split = try authority(text)
        guard split.port == nil else {
            throw MTLSError(.invalidArgument, "expected a host without a port (the port is given apart), got \(OneLine.text(text))")
        }
        return split.host
    }

    /// `text` as a port: 1 to 65535 in ASCII decimal digits only (no sign, no spaces), else nil.
    package static func port(_ text: Substring) -> UInt16? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let p = UInt16(text), p > 0 else { return nil }
        return p
    }
}
