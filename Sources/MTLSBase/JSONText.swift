/// Minimal JSON text output (no Foundation JSON in the core's hot path): written once and used by
/// the provenance and revocation JSON and the enrollment JWS encoder.
package enum JSONText {
    /// `s` as a JSON string literal: quote, backslash, newline, return and tab escaped by name,
    /// other control characters as `\u00XX`.
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
                if u.value < 0x20 {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}

/// Text meant to be one line (an event's message, a comment in Prometheus text, a field of a
/// command's line-per-item output): written once.
public enum OneLine {
    /// `text` with every control character (line feed, carriage return, NUL, C1...) and line or
    /// paragraph separator as a blank, so that nothing in it (a label, a certificate's common
    /// name) can start a line of its own wherever it is printed.
    public static func text(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { u -> Unicode.Scalar in
            switch u.properties.generalCategory {
            case .control, .lineSeparator, .paragraphSeparator: return " "
            default: return u
            }
        }))
    }
}
