import ArgumentParser
import Foundation
import MTLS

/// `mtls doctor HOST:PORT [connect's options]`: why a connection fails or would fail, step by
/// step, each with its status and the fix. Every step uses the library's own connection code and
/// evaluation (the handshakes are real ones, under the policy and identity `connect` would use):
/// nothing here judges a certificate a second way, it only reads what the library decided.
struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Explain why a connection to a TLS server fails or would fail, step by step, with the fix for each.",
        discussion: """
            Takes connect's options (the same identity, trust policy, anchors, pins, verify-as, \
            versions and timeout) and checks, in order: the target and its name resolution, the TCP \
            connection, the TLS versions the server accepts (1.3 and 1.2) and its key-exchange groups \
            (X25519, P-256, P-384, P-521, X448, ffdhe*, and the hybrid post-quantum groups when this \
            OpenSSL has them), the chain it sends and \
            why it is or is not trusted under the policy (anchors, names, extended key usage, expiry, \
            revocation, pins), the CA names the server asks client certificates from and which \
            available identity (the one given, the store's identities and token identities) fits it \
            and why the others do not, for a token identity whether the token's mechanisms can make a \
            signature the server accepts (RSA-PSS or PKCS#1, the ECDSA curve), and what the server \
            answered to the certificate sent. \
            --json prints {"target", "ok", "steps": [{"name", "ok", "detail", "fix"}]} ("fix" is \
            null for a step that passed; tls_groups adds "groups": {"accepted", "refused", "unavailable", \
            "negotiated"}, token_mechanisms "token": {"uri", "key_type", "schemes", "server_schemes", \
            "usable"}). Exit status 0 when the connection would work, 1 when not. \
            (--send is accepted, as connect's, and not sent: doctor sends no data.)
            """)

    /// Every option of `mtls connect` (the same names, parsed the same way).
    @OptionGroup var connect: ConnectCommand

    struct Step {
        var name: String
        var ok: Bool
        var detail: String
        var fix: String?
        /// A step's own keys beside the four every step has (`tls_groups`: "groups";
        /// `token_mechanisms`: "token").
        var extra: [String: Any] = [:]

        var json: [String: Any] {
            extra.merging(["name": name, "ok": ok, "detail": detail, "fix": fix.map { $0 as Any } ?? NSNull()]) { _, base in base }
        }
    }

    /// What one real handshake showed.
    struct Attempt {
        var conn: TLSConnection?
        var error: MTLSError?
        /// The server's alert or hang-up after our side of the handshake (TLS 1.3 judges our
        /// certificate then).
        var laterError: MTLSError?
    }

    func run() throws {
        let steps = diagnose()
        report(steps)
        if !steps.allSatisfy(\.ok) { throw ExitCode(1) }
    }

    func diagnose() -> [Step] {
        var steps: [Step] = []
        let host: String, port: UInt16
        do {
            (host, port) = try TrustPeer.splitTarget(connect.target)
        } catch {
            steps.append(Step(name: "target", ok: false, detail: Self.message(error), fix: "give HOST:PORT, [IPv6]:PORT or an https:// URL"))
            return steps
        }
        let options: TLSClientOptions
        do {
            options = try connect.clientOptions()
        } catch {
            steps.append(Step(name: "options", ok: false, detail: Self.message(error),
                              fix: "correct the option named (see 'mtls connect --help')"))
            return steps
        }
        steps.append(resolve(host))
        if steps.last?.ok == false { return steps }

        // The connection as `mtls connect` would make it (closed before the version probes: a
        // server may serve one connection at a time, as openssl s_server does).
        let main = attempt(host, port, options)
        if let e = main.error, main.conn == nil {
            steps.append(Step(name: "tcp", ok: false, detail: e.message,
                              fix: e.code == .timeout
                                ? "nothing answered within \(connect.timeout) s: check that the server runs and that no firewall drops the port (or raise --timeout)"
                                : "check that the server runs and listens on port \(port) of \(host), and that no firewall blocks it"))
            return steps
        }
        steps.append(Step(name: "tcp", ok: true, detail: "connected to \(host) port \(port)", fix: nil))
        // The token's mechanisms after the identity step, before the server's verdict.
        var later = serverChain(main, options) + clientCertificate(main)
        let token = tokenMechanisms(main, options)
        later.insert(contentsOf: token, at: later.isEmpty ? 0 : later.count - 1)
        // A token that cannot sign what the server accepts sends no certificate: the server's
        // refusal follows from it, and so does its fix.
        if token.contains(where: { !$0.ok }), let last = later.indices.last, later[last].name == "server_verdict", !later[last].ok {
            later[last].fix = "fix the token_mechanisms step first: the token could not sign anything the server accepts, so no certificate went out"
        }
        // OpenSSL says a group's TLS name ("secp256r1"); the probes use the names of -groups ("P-256").
        let negotiated = main.conn?.negotiatedGroup.map { n in
            ["secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521", "x25519": "X25519", "x448": "X448"][n] ?? n
        }
        main.conn?.close()
        steps.append(versions(host, port, options))
        steps.append(groups(host, port, options, negotiated: negotiated))
        return steps + later
    }

    // MARK: steps

    /// `host` as ``TrustPeer/splitTarget(_:)`` gives it: an IPv6 literal without brackets.
    func resolve(_ host: String) -> Step {
        let bare = host
        if Self.isIPAddress(bare) {
            return Step(name: "resolve", ok: true, detail: "\(bare) is an IP address: nothing to resolve", fix: nil)
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(bare, nil, &hints, &res)
        guard rc == 0, let first = res else {
            return Step(name: "resolve", ok: false, detail: "\(bare) does not resolve: \(String(cString: gai_strerror(rc)))",
                        fix: "check the name (and /etc/hosts, DNS), or connect by IP address with --verify-as \(bare)")
        }
        defer { freeaddrinfo(first) }
        var addresses: [String] = []
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let a = p {
            var buf = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(a.pointee.ai_addr, a.pointee.ai_addrlen, &buf, socklen_t(buf.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: buf.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if !addresses.contains(text) { addresses.append(text) }
            }
            p = a.pointee.ai_next
        }
        return Step(name: "resolve", ok: true, detail: "\(bare) resolves to \(addresses.joined(separator: ", "))", fix: nil)
    }

    /// Which of TLS 1.3 and 1.2 the server accepts: a handshake with each alone, presenting
    /// nothing; the server accepted the version when it sent its certificate.
    func versions(_ host: String, _ port: UInt16, _ options: TLSClientOptions) -> Step {
        var accepted: [TLSVersion] = [], refused: [String] = []
        for v in [TLSVersion.tls13, .tls12] {
            var o = options
            o.identity = .none
            o.identitySource = nil
            o.minVersion = v
            o.maxVersion = v
            let a = attempt(host, port, o, readVerdict: false)
            if a.conn.map({ !$0.peerChain.isEmpty }) ?? false {
                accepted.append(v)
            } else {
                refused.append("\(v): \(a.error?.message ?? "no certificate sent")")
            }
            a.conn?.close()
        }
        let allowed = accepted.filter { $0 >= options.minVersion && $0 <= options.maxVersion }
        let detail = "accepts " + (accepted.isEmpty ? "neither TLS 1.3 nor TLS 1.2" : accepted.map(\.description).joined(separator: " and "))
            + (refused.isEmpty ? "" : "; refused " + refused.joined(separator: "; "))
        if accepted.isEmpty {
            return Step(name: "tls_versions", ok: false, detail: detail,
                        fix: "the port does not speak TLS 1.2 or 1.3 to us: check the port (is it plain HTTP, or another service?) and the server's TLS settings")
        }
        if allowed.isEmpty {
            return Step(name: "tls_versions", ok: false, detail: detail + " (we allow \(options.minVersion) to \(options.maxVersion))",
                        fix: "allow the server's version: --tls-min/--tls-max \(accepted[0] == .tls13 ? "1.3" : "1.2")")
        }
        return Step(name: "tls_versions", ok: true, detail: detail, fix: nil)
    }

    /// The key-exchange groups probed, in OpenSSL's names: the classical ones, then the hybrid
    /// post-quantum ones of newer OpenSSL versions (3.5's ML-KEM, the draft Kyber of oqsprovider).
    static let probedGroups = ["X25519", "P-256", "P-384", "P-521", "X448",
                               "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144", "ffdhe8192",
                               "X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024", "X25519Kyber768Draft00"]

    /// Which key-exchange groups the server accepts: a handshake offering each group alone
    /// (presenting nothing; the server accepted the group when it sent its certificate). Groups
    /// this OpenSSL does not have are named as such, not probed.
    func groups(_ host: String, _ port: UInt16, _ options: TLSClientOptions, negotiated: String?) -> Step {
        var accepted: [String] = [], refused: [String] = [], unavailable: [String] = []
        var reasons: [String] = []
        for g in Self.probedGroups {
            guard TLSContext.groupIsKnown(g) else { unavailable.append(g); continue }
            var o = options
            o.identity = .none
            o.identitySource = nil
            o.groups = [g]
            let a = attempt(host, port, o, readVerdict: false)
            if a.conn.map({ !$0.peerChain.isEmpty }) ?? false {
                accepted.append(g)
            } else {
                refused.append(g)
                if let m = a.error?.message, !reasons.contains(m) { reasons.append(m) }
            }
            a.conn?.close()
        }
        let json: [String: Any] = ["accepted": accepted, "refused": refused, "unavailable": unavailable,
                                   "negotiated": negotiated as Any? ?? NSNull()]
        var detail = "accepts " + (accepted.isEmpty ? "none of the groups offered" : accepted.joined(separator: ", "))
        if let negotiated { detail += " (the connection used \(negotiated))" }
        if !refused.isEmpty { detail += "; refuses " + refused.joined(separator: ", ") }
        if !unavailable.isEmpty { detail += "; not in this OpenSSL, not tried: " + unavailable.joined(separator: ", ") }
        if accepted.isEmpty {
            return Step(name: "tls_groups", ok: false,
                        detail: detail + (reasons.isEmpty ? "" : " (\(reasons.joined(separator: "; ")))"),
                        fix: "the server accepts no key-exchange group we have: configure it to accept X25519 or P-256 (OpenSSL: -groups X25519:P-256, nginx: ssl_ecdh_curve X25519:prime256v1)",
                        extra: ["groups": json])
        }
        return Step(name: "tls_groups", ok: true, detail: detail, fix: nil, extra: ["groups": json])
    }

    /// For an identity whose key is on a token (given, or chosen by `--identity auto`): the
    /// signature schemes the token's mechanisms allow for its key against the ones the server
    /// accepts for client signatures (none in common: the token cannot sign anything the server
    /// takes). No step for other identities.
    func tokenMechanisms(_ main: Attempt, _ options: TLSClientOptions) -> [Step] {
        // The identity given, else the one automatic selection presented (a store's token identity).
        let chosen: Identity?
        if case .identity(let given) = options.identity { chosen = given } else { chosen = main.conn?.presentedIdentity }
        guard let id = chosen, let uri = id.privateKey.tokenURI else { return [] }
        let key = id.privateKey.keyType.shortName
        // Every key present in every case: "server_schemes" null when the server asked for no certificate.
        var info: [String: Any] = ["uri": uri, "key_type": key, "schemes": [String](), "server_schemes": NSNull(), "usable": [String]()]
        let tokenSchemes: [String]
        do {
            tokenSchemes = (try TokenKey.signatureAlgorithms(id.privateKey) ?? "").split(separator: ":").map(String.init)
        } catch {
            return [Step(name: "token_mechanisms", ok: false, detail: "the token of \(uri): \(Self.message(error))",
                         fix: "use a token (or PKCS#11 module) with a signature mechanism for \(key) keys (RSA: CKM_RSA_PKCS_PSS, CKM_RSA_PKCS; EC: CKM_ECDSA; Ed25519: CKM_EDDSA)",
                         extra: ["token": info])]
        }
        info["schemes"] = tokenSchemes
        let tls13 = main.conn?.tlsVersion == .tls13
        // TLS 1.3 signs with an RSA key only as RSA-PSS (RFC 8446 4.4.3), PKCS#1 v1.5 being for
        // TLS 1.2; and binds each ECDSA scheme to one curve: the key's.
        var signable = tls13 ? tokenSchemes.filter { !$0.hasPrefix("rsa_pkcs1_") } : tokenSchemes
        if tls13, case .ec = id.privateKey.keyType {
            let own = ["p256": "ecdsa_secp256r1_sha256", "p384": "ecdsa_secp384r1_sha384", "p521": "ecdsa_secp521r1_sha512"][key]
            signable = signable.filter { $0 == own }
        }
        guard let request = main.conn?.clientCertificateRequest else {
            info["usable"] = signable
            return [Step(name: "token_mechanisms", ok: true,
                         detail: "the token key \(uri) (\(key)) signs with \(tokenSchemes.joined(separator: ", ")); the server asked for no client certificate",
                         fix: nil, extra: ["token": info])]
        }
        let server = request.signatureSchemes
        info["server_schemes"] = server
        let usable = server.isEmpty ? signable : signable.filter(server.contains)
        info["usable"] = usable
        let detail = "the token key \(uri) (\(key)) signs, by its token's mechanisms, with \(tokenSchemes.isEmpty ? "nothing" : tokenSchemes.joined(separator: ", "))"
            + (server.isEmpty ? "" : "; the server accepts \(server.joined(separator: ", "))")
            + (tls13 ? " (TLS 1.3: RSA only as RSA-PSS, ECDSA only with the key's curve)" : "")
        if !usable.isEmpty {
            return [Step(name: "token_mechanisms", ok: true, detail: detail + "; usable: \(usable.joined(separator: ", "))", fix: nil,
                         extra: ["token": info])]
        }
        var fix: String
        if key.hasPrefix("rsa"), tls13, !tokenSchemes.contains(where: { $0.hasPrefix("rsa_pss_") }) {
            fix = "the token has no RSA-PSS mechanism (CKM_RSA_PKCS_PSS), the only way TLS 1.3 signs with RSA: use a token or module with CKM_RSA_PKCS_PSS, an EC key on the token, or --tls-max 1.2 if the server accepts rsa_pkcs1 signatures there"
        } else {
            fix = "the token can make no signature the server accepts: put a key of a type the server accepts on the token (\(server.joined(separator: ", "))), or have the server accept \(signable.isEmpty ? "the token's schemes" : signable.joined(separator: ", "))"
        }
        return [Step(name: "token_mechanisms", ok: false, detail: detail + "; none in common", fix: fix, extra: ["token": info])]
    }

    /// The chain the server sent and the library's evaluation of it under the policy.
    func serverChain(_ main: Attempt, _ options: TLSClientOptions) -> [Step] {
        guard let conn = main.conn else { return [] }
        let chain = conn.peerChain
        guard let leaf = chain.first else {
            return [Step(name: "server_chain", ok: false, detail: "the server sent no certificate (\(main.error?.message ?? "handshake ended"))",
                         fix: "configure a certificate and key on the server")]
        }
        let sent = chain.enumerated().map { "[\($0.offset)] \($0.element.subject) (issuer \($0.element.issuer), valid until \(CLI.rfc3339($0.element.notAfter)))" }
        var steps = [Step(name: "server_chain", ok: true, detail: "sent \(chain.count) certificate\(chain.count == 1 ? "" : "s"): " + sent.joined(separator: "; "), fix: nil)]
        let names = leaf.subjectAltNames.map(\.description)
        let namesText = names.isEmpty ? "none (no subject alternative name)" : names.joined(separator: ", ")
        guard let evaluation = conn.evaluation else {
            steps.append(Step(name: "trust", ok: false, detail: main.error?.message ?? "not evaluated", fix: "see the detail"))
            return steps
        }
        if evaluation.trusted {
            let warn = evaluation.warnings.isEmpty ? "" : " (warnings: \(evaluation.warnings.joined(separator: "; ")))"
            steps.append(Step(name: "trust", ok: true, detail: "trusted under the policy; the certificate's names: \(namesText)\(warn)", fix: nil))
            return steps
        }
        var fixes: [String] = []
        for reason in evaluation.reasons {
            let fix = Self.fix(for: reason, chain: chain, names: names)
            if !fixes.contains(fix) { fixes.append(fix) }
        }
        let reasons = evaluation.reasons.map { "\($0.message) [\($0.code)\($0.certIndex.map { ", certificate \($0)" } ?? "")]" }
        steps.append(Step(name: "trust", ok: false,
                          detail: "not trusted: " + reasons.joined(separator: "; ") + "; the certificate's names: \(namesText)",
                          fix: fixes.joined(separator: "; ")))
        return steps
    }

    /// The server's certificate request, the identities that could answer it, and the server's
    /// verdict on what was sent.
    func clientCertificate(_ main: Attempt) -> [Step] {
        guard let conn = main.conn else { return [] }
        var steps: [Step] = []
        let request = conn.clientCertificateRequest
        let names = request?.caNames ?? []
        let namesText = names.map { "\"\($0)\"" }.joined(separator: ", ")
        let candidates = identities()
        if let request {
            let schemes = request.signatureSchemes.isEmpty ? "" : "; it accepts signatures \(request.signatureSchemes.joined(separator: ", "))"
            steps.append(Step(name: "client_ca_names", ok: true,
                              detail: names.isEmpty ? "the server asks for a client certificate from any CA\(schemes)"
                                  : "the server asks for a client certificate issued by \(namesText)\(schemes)", fix: nil))
            var lines: [String] = [], fitting: [String] = []
            let presented = conn.presentedIdentity
            for c in candidates {
                // The identity presented is described on its own below.
                if case .success(let (leaf, _)) = c.value, leaf == presented?.leaf { continue }
                switch c.value {
                case .failure(let e): lines.append("\(c.name): cannot be read: \(e.message)")
                case .success(let (leaf, chain)):
                    if let why = request.mismatch(leaf: leaf, chain: chain) {
                        lines.append("\(c.name) (\(leaf.subject), issuer \(leaf.issuer)): does not fit: \(why)")
                    } else {
                        lines.append("\(c.name) (\(leaf.subject)): fits")
                        fitting.append(c.name)
                    }
                }
            }
            // A server that asks but accepts what it got (an optional request, or a certificate
            // it takes although its names did not list the issuer): the connection works.
            let accepted = main.error == nil && main.laterError == nil
            let detail = candidates.isEmpty ? "no identity is available (no --identity, --cert, or store)"
                : lines.isEmpty ? "no other identity is available" : lines.joined(separator: "; ")
            // A handshake we ended at the server's certificate sent none of ours.
            let verb = main.error?.code == .untrusted ? "would present" : "presented"
            if let presented {
                let why = request.mismatch(presented)
                let ok = why == nil || accepted
                steps.append(Step(name: "client_identity", ok: ok,
                                  detail: "\(verb) \(presented.leaf.subject) (issuer \(presented.leaf.issuer))" + (why.map { ": does not fit: \($0)" } ?? ": fits the request") + "; " + detail,
                                  fix: ok ? nil : Self.identityFix(fitting: fitting, caNames: namesText)))
            } else if accepted {
                steps.append(Step(name: "client_identity", ok: true,
                                  detail: "no certificate was presented, and the server accepted the connection without one; " + detail, fix: nil))
            } else {
                steps.append(Step(name: "client_identity", ok: false, detail: "no certificate was presented; " + detail,
                                  fix: Self.identityFix(fitting: fitting, caNames: namesText)))
            }
        } else if main.conn?.isHandshakeComplete == true || main.conn?.clientCertificateRequest == nil && main.error?.code != .untrusted {
            steps.append(Step(name: "client_ca_names", ok: true, detail: "the server did not ask for a client certificate", fix: nil))
        } else {
            steps.append(Step(name: "client_ca_names", ok: true,
                              detail: "unknown: the handshake stopped at the server's certificate, before its certificate request (TLS 1.2 sends it after)", fix: nil))
        }
        steps.append(verdict(main, names: namesText))
        return steps
    }

    /// What the server answered to the certificate sent (or to none).
    func verdict(_ main: Attempt, names: String) -> Step {
        let presented = main.conn?.presentedIdentity.map { "our certificate \($0.leaf.subject)" } ?? "no certificate"
        let error = main.laterError ?? main.error
        if let error, error.code == .untrusted {
            return Step(name: "server_verdict", ok: false, detail: "not reached: we refused the server's certificate (see trust)", fix: "fix the trust step first")
        }
        guard let error else {
            return Step(name: "server_verdict", ok: true, detail: "the server accepted \(presented): the connection works (\(main.conn?.tlsVersionName ?? ""))", fix: nil)
        }
        let alert = main.conn?.receivedAlert
        let said = alert.map { "the server sent the alert \"\($0)\"" } ?? "the handshake failed"
        var fix: String
        switch (alert ?? "").lowercased() {
        case let a where a.contains("required"):
            fix = "present a client certificate" + (names.isEmpty ? "" : " issued by \(names)") + ": --identity LABEL|FILE.p12|pkcs11:URI, --cert/--key, or --identity auto with a store"
        case let a where a.contains("bad certificate"):
            // What a libmtls server sends when its allow-list (--allow-*, the policy's "allow") names no
            // entry of our certificate, as well as for some chain failures.
            fix = "the server refused \(presented): either it does not trust its issuer (present one issued by " + (names.isEmpty ? "a CA the server trusts" : names)
                + "), or its allow-list (a libmtls server's --allow-cn/-ou/-dns/-uri/-spki/-issuer, its policy's \"allow\") names none of our certificate's CN, OU, SANs, key or anchor: ask its operator to add one"
        case let a where a.contains("unknown ca") || a.contains("unsupported certificate"):
            fix = "the server does not trust the issuer of \(presented): present one issued by " + (names.isEmpty ? "a CA the server trusts" : names) + ", or have the server trust our CA"
        case let a where a.contains("expired"):
            fix = "\(presented) has expired: renew it (mtls renew, or ask its CA)"
        case let a where a.contains("revoked"):
            fix = "\(presented) is revoked: get a new certificate from its CA"
        case let a where a.contains("access denied"):
            fix = "the server refuses \(presented) by its own rules (not a TLS failure): ask its operator to allow it"
        case let a where a.contains("protocol version"):
            fix = "allow the server's TLS version (--tls-min/--tls-max)"
        default:
            fix = "see the detail; the server's log says why it refused"
        }
        return Step(name: "server_verdict", ok: false, detail: "\(said) after \(presented) was sent: \(error.message)", fix: fix)
    }

    // MARK: helpers

    /// One real handshake under `options` (no session resumption: every step sees a full
    /// handshake), then, when it completed, a short read for the server's verdict on our
    /// certificate (TLS 1.3 gives it after our side of the handshake is done).
    func attempt(_ host: String, _ port: UInt16, _ options: TLSClientOptions, readVerdict: Bool = true) -> Attempt {
        var o = options
        o.sessionResumption = false
        var a = Attempt()
        do {
            let c = try TLSConnection.open(host: host, port: port, options: o)
            a.conn = c
            try c.handshake()
        } catch {
            a.error = error as? MTLSError ?? MTLSError(.internal, "\(error)")
            return a
        }
        if readVerdict, let c = a.conn {
            var reply: [UInt8] = []
            do { try connect.readReply(c, idle: 0.5, into: &reply) } catch let e as MTLSError where e.code != .truncated {
                a.laterError = e
            } catch {}
        }
        return a
    }

    /// The identities available to present: the one named (--identity, --cert/--key), and the
    /// store's identities and token identities (their certificates; no token is opened).
    func identities() -> [(name: String, value: Result<(Certificate, [Certificate]), MTLSError>)] {
        var out: [(name: String, value: Result<(Certificate, [Certificate]), MTLSError>)] = []
        let o = connect.identityOptions
        if o.identity != IdentityOptions.automaticIdentity, let name = o.cert ?? o.identity {
            do {
                if let id = try o.explicitIdentity() { out.append((name, .success((id.leaf, id.chain)))) }
            } catch {
                out.append((name, .failure(error as? MTLSError ?? MTLSError(.invalidArgument, "\(error)"))))
            }
        }
        do {
            if let store = try o.openStore() {
                for info in try store.list(itemClass: .identity) where !info.isEnrollmentRecord {
                    let id = try store.identity(label: info.label)
                    out.append(("store identity \"\(info.label)\"", .success((id.leaf, id.chain))))
                }
                for t in try store.tokenIdentities() {
                    out.append(("store token identity \"\(t.label)\"", .success((t.certificate, t.chain))))
                }
            }
        } catch {
            out.append(("the store", .failure(error as? MTLSError ?? MTLSError(.invalidArgument, "\(error)"))))
        }
        return out
    }

    static func identityFix(fitting: [String], caNames: String) -> String {
        if let first = fitting.first {
            return "present \(first): it fits the server's request" + (first.hasPrefix("store") ? " (--identity LABEL, or --identity auto)" : "")
        }
        return "get a client certificate " + (caNames.isEmpty ? "from a CA the server trusts" : "issued by \(caNames)")
            + " with the clientAuth extended key usage, valid now, and present it with --identity or --cert/--key"
    }

    /// The fix for one reason the library gave for not trusting the server.
    static func fix(for reason: TrustReason, chain: [Certificate], names: [String]) -> String {
        let cert = reason.certIndex.flatMap { $0 < chain.count ? chain[$0] : nil } ?? chain[0]
        typealias C = TrustReason.Code
        switch reason.code {
        case C.nameMismatch, C.sanMissing, C.commonNameMismatch:
            let first = names.first.map { $0.split(separator: ":", maxSplits: 1).last.map(String.init) ?? $0 }
            return names.isEmpty
                ? "the server's certificate has no name to check: the server needs a certificate with a subject alternative name"
                : "connect by one of the certificate's names (\(names.joined(separator: ", "))), or check it as one with --verify-as \(first ?? "NAME")"
        case C.unknownIssuer, C.untrustedRoot:
            let top = chain.last ?? cert
            let issuer = top.issuer
            return "trust the CA that issued the chain: --anchor FILE with the certificate of \"\(issuer)\" (its root or an intermediate), or a policy with that anchor"
                + (top.subject == issuer ? " (the server sent its root \"\(issuer)\": if you trust it, save it and pass it with --anchor)" : "")
        case C.expired:
            return "the certificate \"\(cert.subject)\" expired on \(CLI.rfc3339(cert.notAfter)): the server must be given a renewed certificate (check this machine's clock too)"
        case C.notYetValid:
            return "the certificate \"\(cert.subject)\" is valid only from \(CLI.rfc3339(cert.notBefore)): check this machine's clock and the server's"
        case C.revoked:
            return "the certificate \"\(cert.subject)\" is revoked by its CA: the server needs a new certificate"
        case C.crlUnavailable, "ocsp_unavailable", "revocation_unknown":
            return "the revocation status could not be had: make the CRL or OCSP responder reachable, or choose --revocation soft"
        case C.wrongPurpose, C.ekuMissing, C.ekuInvalid:
            return "the certificate \"\(cert.subject)\" is not for TLS servers (its extended key usage lacks serverAuth): the server needs a server certificate"
        case C.pinMismatch:
            return "no certificate of the chain has a pinned key: update the pin (--pin, the policy's pins) to the server's new key, or find why the server's key changed"
        case C.pinExpired:
            return "the policy's pins have expired: renew them in the policy"
        case C.notAllowed:
            // The detail (the reason's message) names the list (the policy's "allow", a host
            // rule's, or --allow-*) and what the certificate has for each kind it lists.
            return "the server's chain is trusted but it matches no entry of the allow-list named above: if this is the server you meant, "
                + "add one of its names to the list that refused it (--allow-uri, --allow-dns, --allow-cn, --allow-ou, --allow-spki or --allow-issuer; "
                + "in a policy file the \"allow\" keys uri, dns, cn, ou, spki, issuer, at the top or in its host rule), else check you reached the right server"
        default:
            return "\(reason.code): fix the server's certificate or the policy (\(reason.message))"
        }
    }

    static func isIPAddress(_ s: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        let bare = s.split(separator: "%", maxSplits: 1).first.map(String.init) ?? s
        return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
    }

    static func message(_ error: Error) -> String {
        if let e = error as? MTLSError { return e.message }
        if let v = error as? ValidationError { return v.message }
        return "\(error)"
    }

    func report(_ steps: [Step]) {
        let ok = !steps.isEmpty && steps.allSatisfy(\.ok)
        if connect.json {
            CLI.printJSON(["target": connect.target, "ok": ok, "steps": steps.map(\.json)])
        } else {
            for s in steps {
                print("\(s.ok ? "ok  " : "FAIL") \(s.name): \(s.detail)")
                if let fix = s.fix { print("     fix: \(fix)") }
            }
            print(ok ? "the connection works" : "the connection fails: see the fix of each failed step")
        }
    }
}
