/// Minimal JSON text output (no Foundation JSON in the core's hot path): written once and used by
/// the provenance and revocation JSON and the enrollment JWS encoder.
enum JSONText {
    /// `s` as a JSON string literal: quote, backslash, newline, return and tab escaped by name,
    /// other control characters as `\u00XX`.
    static func quoted(_ s: String) -> String {
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
