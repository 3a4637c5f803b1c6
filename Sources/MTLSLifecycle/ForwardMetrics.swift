import FoundationEssentials

extension Prometheus {
    /// A tunnel's forwarded bytes and its certificate's end of validity as Prometheus text
    /// (`mtls tunnel --metrics-port`), after the listener's counters.
    public static func text(_ f: ForwardCounters, identity: Identity?) -> String {
        var out = "# HELP mtls_tunnel_bytes_total Bytes forwarded, by direction (from_tls: from the TLS peer to the plaintext side).\n"
        out += "# TYPE mtls_tunnel_bytes_total counter\n"
        out += "mtls_tunnel_bytes_total{direction=\"from_tls\"} \(f.bytesFromTLS)\n"
        out += "mtls_tunnel_bytes_total{direction=\"to_tls\"} \(f.bytesToTLS)\n"
        if let leaf = identity?.leaf {
            out += "# HELP mtls_tunnel_certificate_not_after_seconds End of validity of the certificate the tunnel presents (Unix time).\n"
            out += "# TYPE mtls_tunnel_certificate_not_after_seconds gauge\n"
            out += "mtls_tunnel_certificate_not_after_seconds{subject=\"\(escape(leaf.subject))\",sha256=\"\(leaf.sha256Hex)\"} \(Int64(leaf.notAfter.timeIntervalSince1970))\n"
        }
        return out
    }
}
