import FoundationEssentials

/// One certificate of a stored item, with its validity: what `mtls store check`, `mtls store
/// metrics`, `mtls_store_expiry` and Python's `Store.expiry()` report.
public struct StoreExpiryItem: Sendable, Hashable {
    /// The item's label.
    public let label: String
    /// The item's class.
    public let itemClass: StoreItemClass
    /// 0 for the item's leaf, 1... for its chain (leaf's issuer first).
    public let position: Int
    /// The certificate's subject (RFC 4514).
    public let subject: String
    /// Lowercase hex SHA-256 of the certificate's DER.
    public let sha256: String
    /// The start of the certificate's validity.
    public let notBefore: Date
    /// The end of the certificate's validity.
    public let notAfter: Date

    /// Whole days from `now` to notAfter (negative once expired), rounded down.
    public func daysLeft(at now: Date = Date()) -> Int {
        Int((notAfter.timeIntervalSince(now) / 86400).rounded(.down))
    }
}

extension CredentialStore {
    /// Every certificate in the store (identities and their chains, stored certificates, token
    /// identities' certificates and chains; not enrollment records), earliest notAfter first. No private key is opened;
    /// a row that fails authentication makes the whole call fail (``MTLSError/Code/corrupt``).
    public func expiry() throws -> [StoreExpiryItem] {
        var out: [StoreExpiryItem] = []
        // Enrollment records (`mtls-enrollment:LABEL`) are not identities anyone presents: their
        // carrier certificate is a container, and its notAfter says nothing about an outage.
        for (info, certs) in try itemCertificates() where !info.isEnrollmentRecord {
            for (i, c) in certs.enumerated() {
                out.append(StoreExpiryItem(label: info.label, itemClass: info.itemClass, position: i, subject: c.subject,
                                           sha256: c.sha256Hex, notBefore: c.notBefore, notAfter: c.notAfter))
            }
        }
        return out.sorted { ($0.notAfter, $0.label, $0.position) < ($1.notAfter, $1.label, $1.position) }
    }

    /// The certificates that expire within `days` days of `now` (expired ones included).
    public func expiring(withinDays days: Int, at now: Date = Date()) throws -> [StoreExpiryItem] {
        let limit = now.addingTimeInterval(Double(days) * 86400)
        return try expiry().filter { $0.notAfter <= limit }
    }

    /// The Prometheus text exposition of the store's certificates: per certificate
    /// `mtls_certificate_not_after_seconds` and `mtls_certificate_not_before_seconds` (seconds
    /// since 1970), labelled with label, class, subject and sha256.
    public func prometheusMetrics() throws -> String {
        let items = try expiry()
        var out = "# HELP mtls_certificate_not_after_seconds The notAfter of each stored certificate, in seconds since 1970.\n"
        out += "# TYPE mtls_certificate_not_after_seconds gauge\n"
        for i in items { out += "mtls_certificate_not_after_seconds{\(Prometheus.labels(i))} \(Int64(i.notAfter.timeIntervalSince1970))\n" }
        out += "# HELP mtls_certificate_not_before_seconds The notBefore of each stored certificate, in seconds since 1970.\n"
        out += "# TYPE mtls_certificate_not_before_seconds gauge\n"
        for i in items { out += "mtls_certificate_not_before_seconds{\(Prometheus.labels(i))} \(Int64(i.notBefore.timeIntervalSince1970))\n" }
        return out
    }
}

/// The Prometheus text exposition format's rules, written once.
package enum Prometheus {
    /// A label value escaped as the exposition format wants it: backslash, double quote and
    /// line feed as `\\`, `\"` and `\n`.
    static func escape(_ value: String) -> String {
        var out = ""
        for ch in value.unicodeScalars {
            switch ch {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    static func labels(_ i: StoreExpiryItem) -> String {
        "label=\"\(escape(i.label))\",class=\"\(i.itemClass.name)\",subject=\"\(escape(i.subject))\",sha256=\"\(i.sha256)\""
    }

    /// A listener's counters as Prometheus text.
    package static func text(_ c: ListenerCounters) -> String {
        var out = "# HELP mtls_listener_handshakes_accepted_total Handshakes that succeeded, resumed ones included.\n"
        out += "# TYPE mtls_listener_handshakes_accepted_total counter\nmtls_listener_handshakes_accepted_total \(c.accepted)\n"
        out += "# HELP mtls_listener_handshakes_resumed_total Handshakes that resumed a session.\n"
        out += "# TYPE mtls_listener_handshakes_resumed_total counter\nmtls_listener_handshakes_resumed_total \(c.resumed)\n"
        out += "# HELP mtls_listener_handshakes_refused_total Handshakes refused, by the error code they failed with.\n"
        out += "# TYPE mtls_listener_handshakes_refused_total counter\n"
        for (code, n) in c.refused.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            out += "mtls_listener_handshakes_refused_total{reason=\"\(escape(code.name))\"} \(n)\n"
        }
        out += "# HELP mtls_listener_connections Accepted connections not yet closed.\n"
        out += "# TYPE mtls_listener_connections gauge\nmtls_listener_connections \(c.currentConnections)\n"
        return out
    }

    /// What `mtls serve --metrics-port` serves: the listener's counters, then, with a store, its
    /// certificates' validity. A store that cannot be read leaves one comment line saying why
    /// instead (its message on one line: a label in it cannot start a line of its own).
    package static func exposition(_ counters: ListenerCounters, store: CredentialStore?) -> String {
        var out = text(counters)
        guard let store else { return out }
        do {
            out += try store.prometheusMetrics()
        } catch {
            let message = (error as? MTLSError)?.message ?? "\(error)"
            out += "# store metrics failed: \(OneLine.text(message))\n"
        }
        return out
    }
}
