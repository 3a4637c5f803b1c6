/// Minimal JSON text output (no Foundation JSON in the core's hot path): written once and used by
/// the provenance and revocation JSON and the enrollment JWS encoder.
package enum JSONText {
    /// `s` as a JSON string literal: quote, backslash, newline, return and tab escaped by name,
    /// every other character a terminal must not see raw (``OneLine/isUnsafe(_:)``: control
    /// characters, DEL, C1, line and paragraph separators, bidirectional controls) as `\uXXXX`.
    /// The value stays exact for a JSON reader; printed, the text holds none of them.
    package static func quoted(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if OneLine.isUnsafe(u) { out += escape(u) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }

    /// `\uXXXX` (lowercase hex) of a scalar of the Basic Multilingual Plane.
    static func escape(_ u: Unicode.Scalar) -> String {
        let hex = String(u.value, radix: 16)
        return "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
}

/// Text meant to be one line (an event's message, an error's message, a comment in Prometheus
/// text, a field of a command's line-per-item output): the one cleaner of text from outside (a
/// file, a token, a peer, a CA) on its way to a terminal or a log.
package enum OneLine {
    /// Whether `u` must not reach a terminal or a log raw: a control character (C0, DEL, C1 —
    /// U+009B is a CSI on many terminals —, NEL), a line or paragraph separator (U+2028,
    /// U+2029), or a bidirectional control (U+061C, U+200E, U+200F, U+202A–U+202E,
    /// U+2066–U+2069), which reorders what a terminal shows after it.
    package static func isUnsafe(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0x00...0x1F, 0x7F...0x9F: return true  // C0, DEL, C1 (NEL is U+0085)
        case 0x2028, 0x2029: return true  // line and paragraph separators
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true  // Bidi_Control, all of it
        default: return false
        }
    }

    /// `text` with every character ``isUnsafe(_:)`` names as a blank, so that nothing in it (a
    /// label, a certificate's common name, a CA's problem detail) can start a line of its own,
    /// move the cursor, or reverse what follows wherever it is printed.
    package static func text(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isUnsafe) else { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.map { isUnsafe($0) ? " " : $0 }))
    }

    /// Bytes meant to be UTF-8 text (an HTTP body, a token's label) as ``text(_:)``: a sequence
    /// that is not UTF-8 becomes U+FFFD, then the rest is cleaned.
    package static func text(utf8 bytes: some Collection<UInt8>) -> String {
        text(String(decoding: bytes, as: UTF8.self))
    }

    /// JSON text made by another encoder (Foundation's) with every character ``isUnsafe(_:)``
    /// names written as a `\uXXXX` escape, as ``JSONText`` writes them: the same value for a
    /// JSON reader, and nothing raw for a terminal. Such characters can only stand inside a JSON
    /// string, where an escape means the same.
    package static func escapingJSON(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: isUnsafe) else { return json }
        var out = ""
        for u in json.unicodeScalars {
            if isUnsafe(u) { out += JSONText.escape(u) } else { out.unicodeScalars.append(u) }
        }
        return out
    }
}
