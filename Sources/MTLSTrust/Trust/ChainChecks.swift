internal import COpenSSL
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// This file owns libmtls's checks on top of OpenSSL's path validation (ChainCheck.all) and the
// helpers they share (extension presence, SAN and name-constraint decoding). Elsewhere: the
// public suffix list (PublicSuffixList.swift), the common-name rule (CommonNameRule.swift),
// loose IP address parsing (IPAddress+LooseParsing.swift).

/// What a policy check sees: the chain OpenSSL built (leaf first), the purpose, the name the leaf
/// must carry, and the policy's settings.
struct CheckContext {
    let chain: [OpaquePointer]
    let purpose: TrustPurpose
    let reference: PeerHost?
    let settings: TrustPolicy.Settings
    /// Whether the last certificate of ``chain`` is a trust anchor (so its own signature, which
    /// nobody verifies, is not judged).
    let topIsAnchor: Bool
    let crls: [RevocationList]

    /// Indexes of certificates that issued another one of the chain.
    var issuerIndexes: Range<Int> { 1..<max(1, chain.count) }
    /// The leaf is itself the anchor (a pinned self-signed server or client certificate).
    var leafIsAnchor: Bool { chain.count == 1 && topIsAnchor }
}

/// One of libmtls's checks on top of OpenSSL's path validation: the webpki-grade rules OpenSSL
/// does not apply (serial numbers, key identifiers, EKU presence, SAN syntax, key strength,
/// malformed name constraints...). Each has a name and produces reasons with its own code.
/// Every evaluation runs all of them (the model is swift-certificates' `VerifierPolicy`).
package struct ChainCheck: Sendable {
    /// A short name for documentation and tests.
    package let name: String
    let run: @Sendable (CheckContext) -> [TrustReason]

    package static let all: [ChainCheck] = [
        .version, .serialNumber, .names, .validityEncoding, .extensionSyntax, .authorityKeyIdentifier,
        .subjectKeyIdentifier, .basicConstraints, .leafIsNotCA, .extendedKeyUsage, .subjectAltName,
        .referenceName, .keyStrength, .signatureAlgorithm, .nameConstraints, .policyConstraints,
        .authorityInformationAccess, .commonNameConsistency, .chainDepth,
    ]

    /// The common names of a certificate's subject, as text.
    static func commonNames(_ x: OpaquePointer) -> [String] {
        let subject = X509_get_subject_name(x)
        var texts: [String] = []
        var pos: Int32 = -1
        while true {
            pos = X509_NAME_get_index_by_NID(subject, NID_commonName, pos)
            if pos < 0 { break }
            guard let entry = X509_NAME_get_entry(subject, pos) else { break }
            texts.append(String(decoding: Certificate.bytes(X509_NAME_ENTRY_get_data(entry)), as: UTF8.self))
        }
        return texts
    }

    /// The common name is never a name of the peer (the host is matched against the SANs only),
    /// and a CN that differs from the SANs is no reason to refuse a certificate: private CAs put
    /// a device's own name, a host's short name, its parent domain, an address, or a name from
    /// another namespace there (RFC 6125 6.4.4). Two shapes are refused on a server leaf with
    /// SANs, because they are what CA/B Forum BR 7.1.4.3 forbids and what misleads a reader or an
    /// old CN-matching client about which host the certificate is for:
    /// - the CN is one of the SANs (the same host or address) spelled differently: other letter
    ///   case, a non-canonical IP text (leading zeros, hex, uppercase or uncompressed IPv6);
    /// - a host-like CN names a sibling of a DNS SAN: another host in the same parent domain
    ///   (`a.example.com` beside `b.example.com`), or the same domain written in Unicode where
    ///   the SAN has its A-label.
    /// A CN equal to a SAN byte for byte, a domain above or below one, a name a wildcard SAN
    /// covers, an address that is not one of the IP SANs, a name unrelated to every SAN, or a CN
    /// that is not host-like (spaces, no dot) is free.
    static let commonNameConsistency = ChainCheck(name: "common_name_consistency") { ctx in
        guard ctx.purpose == .serverAuth, let leaf = ctx.chain.first, !ctx.leafIsAnchor else { return [] }
        let texts = commonNames(leaf)
        guard !texts.isEmpty else { return [] }
        var dnsNames: [String] = [], ips: [[UInt8]] = []
        for n in Certificate.decodedSANs(leaf) ?? [] {
            switch n {
            case .dns(let d): dnsNames.append(d)
            case .ip(let b): ips.append(b)
            default: break
            }
        }
        return texts.compactMap { cn -> TrustReason? in
            if cn.contains(" ") || cn.isEmpty { return nil }
            if let address = IPAddress.parseLoose(cn) {
                guard let san = ips.first(where: { $0 == address }), IPAddress.text(san) != cn else { return nil }
                return reason(C.commonNameMismatch, 0,
                              "common name \(cn) is the IP subject alternative name \(IPAddress.text(san) ?? "?") written another way")
            }
            guard cn.contains(".") else { return nil }
            return CommonNameRule.conflict(cn, dnsNames: dnsNames).map { reason(C.commonNameMismatch, 0, $0) }
        }
    }

    /// At most the policy's number of intermediates, not counting self-issued ones (RFC 5280
    /// 6.1: a self-issued certificate is not a new step).
    static let chainDepth = ChainCheck(name: "chain_depth") { ctx in
        guard let max = ctx.settings.maxChainDepth, ctx.chain.count > 2 else { return [] }
        let intermediates = ctx.chain[1..<(ctx.chain.count - 1)].filter {
            X509_NAME_cmp(X509_get_issuer_name($0), X509_get_subject_name($0)) != 0
        }.count
        return intermediates > max
            ? [reason(C.chainTooLong, nil, "\(intermediates) intermediate certificates, more than the policy's \(max)")] : []
    }

    private static func reason(_ code: String, _ index: Int?, _ message: String) -> TrustReason {
        TrustReason(code: code, certIndex: index, message: message)
    }
    typealias C = TrustReason.Code

    /// Only X.509 v3 certificates.
    static let version = ChainCheck(name: "version") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            mtls_ossl_X509_get_version(x) == 2 ? nil : reason(C.versionUnsupported, i, "certificate is not X.509 version 3 (`openssl x509 -req` without -extfile makes version 1 certificates)")
        }
    }

    /// RFC 5280 4.1.2.2: positive, non-zero, at most 20 octets. The anchor is exempt (trusted as
    /// configured).
    static let serialNumber = ChainCheck(name: "serial_number") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            if ctx.topIsAnchor && i == ctx.chain.count - 1 && i > 0 { return nil }
            guard let s = X509_get0_serialNumber(x) else { return reason(C.serialNumberInvalid, i, "no serial number") }
            let bytes = Certificate.bytes(UnsafeMutablePointer(mutating: s))
            if s.pointee.type == V_ASN1_NEG_INTEGER { return reason(C.serialNumberInvalid, i, "serial number is negative") }
            if bytes.allSatisfy({ $0 == 0 }) { return reason(C.serialNumberInvalid, i, "serial number is zero") }
            let encoded = bytes.count + ((bytes.first ?? 0) & 0x80 != 0 ? 1 : 0)
            if encoded > 20 { return reason(C.serialNumberInvalid, i, "serial number is longer than 20 octets") }
            return nil
        }
    }

    /// Every certificate names its issuer; every issuing certificate names its subject.
    static let names = ChainCheck(name: "names") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            if X509_NAME_entry_count(X509_get_issuer_name(x)) == 0 { out.append(reason(C.emptyName, i, "issuer name is empty")) }
            if i > 0, X509_NAME_entry_count(X509_get_subject_name(x)) == 0 {
                out.append(reason(C.emptyName, i, "CA certificate has an empty subject name"))
            }
        }
        return out
    }

    /// RFC 5280 4.1.2.5: UTCTime `YYMMDDHHMMSSZ` or GeneralizedTime `YYYYMMDDHHMMSSZ`, no
    /// fractions, no offsets.
    static let validityEncoding = ChainCheck(name: "validity_encoding") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            for t in [X509_get0_notBefore(x), X509_get0_notAfter(x)] {
                guard let t else { return reason(C.validityEncoding, i, "missing validity date") }
                let b = Certificate.bytes(UnsafeMutablePointer(mutating: t))
                let want = t.pointee.type == V_ASN1_UTCTIME ? 13 : 15
                let digits = b.dropLast().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
                if b.count != want || b.last != UInt8(ascii: "Z") || !digits {
                    return reason(C.validityEncoding, i, "validity date is not in RFC 5280 form")
                }
            }
            return nil
        }
    }

    /// Extensions appear at most once, and the ones libmtls knows decode.
    static let extensionSyntax = ChainCheck(name: "extension_syntax") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            var seen: [String] = []
            for e in 0..<X509_get_ext_count(x) {
                guard let ext = X509_get_ext(x, e), let obj = X509_EXTENSION_get_object(ext) else { continue }
                let oid = Certificate.oidText(obj)
                if seen.contains(oid) { out.append(reason(C.extensionInvalid, i, "extension \(oid) appears twice")) }
                seen.append(oid)
                if !extensionDecodes(ext) { out.append(reason(C.extensionInvalid, i, "extension \(oid) is malformed")) }
            }
        }
        return out
    }

    /// AKI: never critical; present on every certificate not issued by itself; on a self-signed
    /// certificate, if present, only a keyIdentifier equal to its SKI.
    static let authorityKeyIdentifier = ChainCheck(name: "authority_key_identifier") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            let (present, critical) = extensionPresence(x, NID_authority_key_identifier)
            if critical { out.append(reason(C.akiInvalid, i, "authority key identifier is critical")) }
            let selfIssued = X509_NAME_cmp(X509_get_issuer_name(x), X509_get_subject_name(x)) == 0
            if !present {
                // A trust anchor is trusted as configured (as its serial number is): only a
                // certificate whose issuer must be found needs the identifier.
                let isAnchor = ctx.topIsAnchor && i == ctx.chain.count - 1 && i > 0
                if !selfIssued && !isAnchor { out.append(reason(C.akiMissing, i, "no authority key identifier")) }
                continue
            }
            // A self-issued anchor (a root); self-issued intermediates (key rollover) name the old key.
            if selfIssued && i == ctx.chain.count - 1 {
                let keyID = X509_get0_authority_key_id(x)
                if keyID == nil || X509_get0_authority_issuer(x) != nil || X509_get0_authority_serial(x) != nil {
                    // Easy-RSA's stock x509-types/ca ("keyid:always,issuer:always") makes this root.
                    out.append(reason(C.akiInvalid, i, "self-signed certificate's authority key identifier must hold only a key identifier "
                                      + "(CA/B 7.1.2.1.3: authorityKeyIdentifier=keyid:always, without issuer)"))
                } else if let ski = X509_get0_subject_key_id(x), ASN1_OCTET_STRING_cmp(ski, keyID) != 0 {
                    out.append(reason(C.akiInvalid, i, "authority key identifier differs from the subject key identifier"))
                }
            }
        }
        return out
    }

    /// SKI: never critical; present on every CA certificate that issued one of the chain.
    static let subjectKeyIdentifier = ChainCheck(name: "subject_key_identifier") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            let (present, critical) = extensionPresence(x, NID_subject_key_identifier)
            if critical { out.append(reason(C.skiInvalid, i, "subject key identifier is critical")) }
            if !present && i > 0 { out.append(reason(C.skiMissing, i, "CA certificate has no subject key identifier")) }
        }
        return out
    }

    /// Every issuer has a critical basicConstraints with cA, and keyCertSign when it has a
    /// keyUsage.
    static let basicConstraints = ChainCheck(name: "basic_constraints") { ctx in
        var out: [TrustReason] = []
        for i in ctx.issuerIndexes {
            let x = ctx.chain[i]
            let (present, critical) = extensionPresence(x, NID_basic_constraints)
            let flags = X509_get_extension_flags(x)
            if !present || flags & UInt32(EXFLAG_CA) == 0 {
                out.append(reason(C.basicConstraintsInvalid, i, "issuing certificate is not marked as a CA (basicConstraints cA)"))
            } else if !critical {
                out.append(reason(C.basicConstraintsInvalid, i, "CA certificate's basicConstraints is not critical (RFC 5280 4.2.1.9: basicConstraints=critical,CA:TRUE)"))
            }
            if flags & UInt32(EXFLAG_KUSAGE) != 0 && X509_get_key_usage(x) & UInt32(KU_KEY_CERT_SIGN) == 0 {
                out.append(reason(C.notACA, i, "CA certificate's keyUsage lacks keyCertSign"))
            }
        }
        return out
    }

    /// The leaf is an end entity: not a CA, no keyCertSign (unless it is itself the anchor), as
    /// webpki has it (a CA certificate used as an end entity is refused).
    static let leafIsNotCA = ChainCheck(name: "leaf_is_not_ca") { ctx in
        guard let leaf = ctx.chain.first, !ctx.leafIsAnchor else { return [] }
        let flags = X509_get_extension_flags(leaf)
        if flags & UInt32(EXFLAG_CA) != 0 && flags & UInt32(EXFLAG_BCONS) != 0 {
            return [reason(C.caAsLeaf, 0, "the leaf is a CA certificate (basicConstraints cA)")]
        }
        if flags & UInt32(EXFLAG_KUSAGE) != 0 && X509_get_key_usage(leaf) & UInt32(KU_KEY_CERT_SIGN) != 0 {
            return [reason(C.caAsLeaf, 0, "the leaf's keyUsage allows certificate signing")]
        }
        return []
    }

    /// A leaf without the EKU extension is good for every purpose (RFC 5280 4.2.1.12, OpenSSL,
    /// webpki); one that has it must name the purpose, non-critically (anyExtendedKeyUsage is
    /// not enough). A self-signed anchor carries no EKU.
    static let extendedKeyUsage = ChainCheck(name: "extended_key_usage") { ctx in
        var out: [TrustReason] = []
        guard let leaf = ctx.chain.first else { return out }
        let (present, critical) = extensionPresence(leaf, NID_ext_key_usage)
        if present {
            if critical { out.append(reason(C.ekuInvalid, 0, "the leaf's extended key usage is critical")) }
            if X509_get_extended_key_usage(leaf) & UInt32(XKU_ANYEKU) != 0 {
                out.append(reason(C.ekuInvalid, 0, "the leaf's extended key usage includes anyExtendedKeyUsage"))
            }
            let want = ctx.purpose == .serverAuth ? UInt32(XKU_SSL_SERVER) : UInt32(XKU_SSL_CLIENT)
            if X509_get_extended_key_usage(leaf) & want == 0 {
                out.append(reason(C.wrongPurpose, 0, "the leaf's extended key usage does not include \(ctx.purpose == .serverAuth ? "serverAuth" : "clientAuth")"))
            }
        }
        if ctx.chain.count > 1, ctx.topIsAnchor, let top = ctx.chain.last, X509_self_signed(top, 0) == 1,
           extensionPresence(top, NID_ext_key_usage).present {
            out.append(reason(C.anchorHasEKU, ctx.chain.count - 1, "the root certificate carries an extended key usage"))
        }
        return out
    }

    /// SANs: decodable, critical exactly when the subject is empty, every entry well formed
    /// (DNS names LDH with at most a leftmost `*` label, IPs of 4 or 16 bytes, mailboxes).
    static let subjectAltName = ChainCheck(name: "subject_alt_name") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            let (present, critical) = extensionPresence(x, NID_subject_alt_name)
            let emptySubject = X509_NAME_entry_count(X509_get_subject_name(x)) == 0
            if !present {
                if i == 0 && ctx.reference != nil {
                    out.append(reason(C.sanMissing, 0, "the leaf has no subject alternative name (the common name is never used)"))
                }
                continue
            }
            if i == 0 && critical && !emptySubject {
                out.append(reason(C.sanInvalid, i, "subject alternative name is critical although the subject is not empty "
                                  + "(RFC 5280 4.2.1.6, CA/B 7.1.2.7.12: critical only when the subject is empty)"))
            }
            if !critical && emptySubject {
                out.append(reason(C.sanInvalid, i, "subject is empty and the subject alternative name is not critical"))
            }
            guard let names = Certificate.decodedSANs(x) else {
                out.append(reason(C.sanInvalid, i, "subject alternative name is malformed"))
                continue
            }
            if names.isEmpty { out.append(reason(C.sanInvalid, i, "subject alternative name is empty")) }
            for n in names {
                switch n {
                case .dns(let d) where !HostName.isValidSANName(d):
                    out.append(reason(C.sanInvalid, i, "malformed DNS name in subject alternative name: \(d)"))
                case .ip(let b) where b.count != 4 && b.count != 16:
                    out.append(reason(C.sanInvalid, i, "IP address in subject alternative name is \(b.count) bytes"))
                case .email(let m) where !isValidMailbox(m):
                    out.append(reason(C.sanInvalid, i, "malformed email address in subject alternative name"))
                default: break
                }
            }
        }
        return out
    }

    /// The name connected to is a valid host name, and no wildcard matching it covers a whole
    /// public suffix (`*.co.uk`).
    static let referenceName = ChainCheck(name: "reference_name") { ctx in
        guard let ref = ctx.reference, let name = ref.name else { return [] }
        if !HostName.isValidReferenceName(name) {
            return [reason(C.invalidHost, nil, "\(name) is not a valid host name")]
        }
        guard let leaf = ctx.chain.first, let names = Certificate.decodedSANs(leaf) else { return [] }
        let parent = name.split(separator: ".", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        for case .dns(let d) in names where d.hasPrefix("*.") {
            let base = String(d.dropFirst(2)).lowercased()
            if base == parent && PublicSuffixList.shared.isPublicSuffix(base) {
                return [reason(C.wildcardPublicSuffix, 0, "wildcard \(d) covers the public suffix \(base)")]
            }
        }
        return []
    }

    /// RSA of at least the policy's minimum and a multiple of 8 bits; EC only on P-256/384/521
    /// with a named curve; Ed25519/Ed448; no DSA.
    static let keyStrength = ChainCheck(name: "key_strength") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            guard let pkey = X509_get0_pubkey(x) else {
                OpenSSLErrorQueue.clear()
                return reason(C.keyForbidden, i, "public key cannot be decoded")
            }
            let bits = Int(EVP_PKEY_get_bits(pkey))
            switch EVP_PKEY_get_base_id(pkey) {
            case EVP_PKEY_RSA, EVP_PKEY_RSA_PSS:
                if bits < ctx.settings.minimumRSABits { return reason(C.weakKey, i, "RSA key of \(bits) bits (minimum \(ctx.settings.minimumRSABits))") }
                if bits % 8 != 0 { return reason(C.weakKey, i, "RSA key size \(bits) is not a multiple of 8") }
            case EVP_PKEY_EC:
                var explicit: Int32 = 0
                if EVP_PKEY_get_int_param(pkey, OSSL_PKEY_PARAM_EC_DECODED_FROM_EXPLICIT_PARAMS, &explicit) == 1, explicit != 0 {
                    return reason(C.keyForbidden, i, "EC key with explicit curve parameters")
                }
                var buf = [CChar](repeating: 0, count: 80)
                var len = 0
                let curve = EVP_PKEY_get_group_name(pkey, &buf, buf.count, &len) == 1 ? String(cBuffer: buf) : ""
                OpenSSLErrorQueue.clear()
                guard ["prime256v1", "secp384r1", "secp521r1"].contains(curve) else {
                    return reason(C.keyForbidden, i, "EC curve \(curve.isEmpty ? "unknown" : curve) is not allowed")
                }
                if bits < ctx.settings.minimumECBits { return reason(C.weakKey, i, "EC key of \(bits) bits (minimum \(ctx.settings.minimumECBits))") }
            case EVP_PKEY_ED25519, EVP_PKEY_ED448:
                break
            default:
                let n = EVP_PKEY_get0_type_name(pkey).map { String(cString: $0) } ?? "unknown"
                return reason(C.keyForbidden, i, "\(n) keys are not allowed")
            }
            return nil
        }
    }

    /// The outer and inner signature algorithms agree; no banned digest (MD5, SHA-1) in a
    /// signature that is verified (a trust anchor's self-signature is not).
    static let signatureAlgorithm = ChainCheck(name: "signature_algorithm") { ctx in
        var out: [TrustReason] = []
        for (i, x) in ctx.chain.enumerated() {
            var sig: UnsafePointer<ASN1_BIT_STRING>? = nil
            var outer: UnsafePointer<X509_ALGOR>? = nil
            X509_get0_signature(&sig, &outer, x)
            if let outer, let inner = X509_get0_tbs_sigalg(x), X509_ALGOR_cmp(outer, inner) != 0 {
                out.append(reason(C.signatureAlgorithmMismatch, i, "signature algorithm differs from the one in the signed data"))
            }
            if ctx.topIsAnchor && i == ctx.chain.count - 1 { continue }
            var md: Int32 = 0, pk: Int32 = 0, secbits: Int32 = 0
            var flags: UInt32 = 0
            if X509_get_signature_info(x, &md, &pk, &secbits, &flags) == 1, md != NID_undef,
               let sn = OBJ_nid2sn(md) {
                let name = String(cString: sn).lowercased()
                if ctx.settings.bannedSignatureDigests.contains(name) {
                    out.append(reason(C.weakSignature, i, "signed with \(name.uppercased()), which the policy bans"))
                }
            }
            OpenSSLErrorQueue.clear()
        }
        return out
    }

    /// Name constraints: only on CA certificates, not empty, with well-formed bases;
    /// and a wildcard SAN must not reach into an excluded subtree or out of the permitted ones
    /// (OpenSSL compares the wildcard as a literal string).
    static let nameConstraints = ChainCheck(name: "name_constraints") { ctx in
        var out: [TrustReason] = []
        let leafNames = ctx.chain.first.flatMap(Certificate.decodedSANs) ?? []
        let wildcards: [String] = leafNames.compactMap {
            if case .dns(let d) = $0, d.hasPrefix("*.") { return String(d.dropFirst(2)).lowercased() }
            return nil
        }
        for (i, x) in ctx.chain.enumerated() {
            let (present, critical) = extensionPresence(x, NID_name_constraints)
            guard present else { continue }
            if i == 0 && !ctx.leafIsAnchor && X509_get_extension_flags(x) & UInt32(EXFLAG_CA) == 0 {
                out.append(reason(C.nameConstraintsInvalid, i, "name constraints on an end-entity certificate"))
                continue
            }
            // RFC 5280 asks CAs to mark the extension critical, but a relying party that
            // understands it applies it either way (webpki does): not critical is no reason to refuse.
            _ = critical
            var crit: Int32 = 0
            guard let raw = X509_get_ext_d2i(x, NID_name_constraints, &crit, nil) else {
                OpenSSLErrorQueue.clear()
                out.append(reason(C.nameConstraintsInvalid, i, "name constraints are malformed"))
                continue
            }
            let nc = raw.assumingMemoryBound(to: NAME_CONSTRAINTS.self)
            defer { NAME_CONSTRAINTS_free(nc) }
            // The common name is never a name of the peer. On a leaf without subjectAltName a
            // DNS-like CN is the only host-like name, and it must satisfy the constraints as a
            // dNSName would (OpenSSL's CN rule). On a leaf with SANs the CN is not a name at all
            // (RFC 6125 6.4.4; webpki, Go and pyca ignore it): the constraints judge the SANs only,
            // and a CN outside them is no reason to refuse. An address written in the CN is not a
            // DNS name (OpenSSL's rule would take "127.0.0.1" for one).
            if i > 0, let leaf = ctx.chain.first, !extensionPresence(leaf, NID_subject_alt_name).present,
               !commonNames(leaf).allSatisfy({ IPAddress.parseLoose($0) != nil }),
               NAME_CONSTRAINTS_check_CN(leaf, nc) != X509_V_OK {
                OpenSSLErrorQueue.clear()
                out.append(reason(C.nameConstraintViolation, 0, "the leaf's common name is outside the name constraints of certificate \(i)"))
            }
            let permitted = subtrees(nc.pointee.permittedSubtrees)
            let excluded = subtrees(nc.pointee.excludedSubtrees)
            if permitted.isEmpty && excluded.isEmpty {
                out.append(reason(C.nameConstraintsInvalid, i, "name constraints without any subtree"))
            }
            for base in permitted + excluded {
                if let problem = malformedBase(base) { out.append(reason(C.nameConstraintsInvalid, i, problem)) }
            }
            for w in wildcards {
                for case .dns(let e) in excluded {
                    let ex = normalizedDNSBase(e)
                    if ex.hasSuffix("." + w), !ex.dropLast(w.count + 1).contains(".") {
                        out.append(reason(C.nameConstraintViolation, 0, "wildcard *.\(w) covers the excluded subtree \(ex)"))
                    }
                }
                let permittedDNS = permitted.compactMap { b -> String? in if case .dns(let d) = b { return normalizedDNSBase(d) }; return nil }
                if !permittedDNS.isEmpty && !permittedDNS.contains(where: { $0.isEmpty || w == $0 || w.hasSuffix("." + $0) }) {
                    out.append(reason(C.nameConstraintViolation, 0, "wildcard *.\(w) reaches outside the permitted subtrees"))
                }
            }
        }
        return out
    }

    /// policyConstraints must be critical (RFC 5280 4.2.1.11).
    static let policyConstraints = ChainCheck(name: "policy_constraints") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            let (present, critical) = extensionPresence(x, NID_policy_constraints)
            return present && !critical ? reason(C.policyConstraintsInvalid, i, "policy constraints extension is not critical") : nil
        }
    }

    /// authorityInfoAccess must not be critical (RFC 5280 4.2.2.1).
    static let authorityInformationAccess = ChainCheck(name: "authority_information_access") { ctx in
        ctx.chain.enumerated().compactMap { i, x in
            let (present, critical) = extensionPresence(x, NID_info_access)
            return present && critical ? reason(C.aiaInvalid, i, "authority information access is critical") : nil
        }
    }

    // MARK: Helpers

    /// Whether the extension is present, and critical.
    static func extensionPresence(_ x: OpaquePointer, _ nid: Int32) -> (present: Bool, critical: Bool) {
        let pos = X509_get_ext_by_NID(x, nid, -1)
        guard pos >= 0, let ext = X509_get_ext(x, pos) else { return (false, false) }
        return (true, X509_EXTENSION_get_critical(ext) != 0)
    }

    /// Whether an extension OpenSSL knows decodes (unknown ones are OpenSSL's business when critical).
    static func extensionDecodes(_ ext: OpaquePointer) -> Bool {
        guard let method = X509V3_EXT_get(ext) else { OpenSSLErrorQueue.clear(); return true }
        guard let p = X509V3_EXT_d2i(ext) else { OpenSSLErrorQueue.clear(); return false }
        if let it = method.pointee.it {
            ASN1_item_free(OpaquePointer(p), it())
        } else if let free = method.pointee.ext_free {
            free(p)
        }
        return true
    }

    /// Names as the X.509 layer decodes them (``GeneralName``, ``Certificate/decodedSANs(_:)``).
    typealias Name = GeneralName

    static func subtrees(_ sk: OpaquePointer?) -> [Name] {
        guard let sk else { return [] }
        return (0..<mtls_ossl_sk_GENERAL_SUBTREE_num(sk)).map { i in
            GeneralName(mtls_ossl_sk_GENERAL_SUBTREE_value(sk, i)?.pointee.base)
        }
    }

    static func normalizedDNSBase(_ s: String) -> String {
        let l = s.lowercased()
        return l.hasPrefix(".") ? String(l.dropFirst()) : l
    }

    /// Why a name-constraint base is malformed, or nil.
    static func malformedBase(_ n: Name) -> String? {
        switch n {
        case .dns(let d):
            if d.isEmpty { return nil }
            if d.hasPrefix("."), HostName.isValidReferenceName(String(d.dropFirst())) {
                // OpenSSL and Go read it as "subdomains only"; RFC 5280 4.2.1.10 gives DNS
                // constraints no leading period (x509-limbo rfc5280::nc::invalid-dnsname-leading-period).
                return "malformed DNS name constraint: \(d) (RFC 5280 gives a dNSName constraint no leading period: \(d.dropFirst()) covers that domain and every name under it)"
            }
            if !HostName.isValidReferenceName(d) || d.hasSuffix(".") { return "malformed DNS name constraint: \(d)" }
        case .ip(let b):
            guard b.count == 8 || b.count == 32 else { return "IP name constraint of \(b.count) bytes" }
            let mask = b[(b.count / 2)...]
            var seenZero = false
            for byte in mask {
                for bit in (0..<8).reversed() {
                    let set = byte & (1 << bit) != 0
                    if set && seenZero { return "IP name constraint with a non-contiguous mask" }
                    if !set { seenZero = true }
                }
            }
        case .email(let m):
            if m.isEmpty { return "empty email name constraint" }
            if m.contains("@") { if !isValidMailbox(m) { return "malformed email name constraint" } }
            else if !HostName.isValidReferenceName(m.hasPrefix(".") ? String(m.dropFirst()) : m) {
                return "malformed email domain name constraint: \(m)"
            }
        case .uri, .other: break
        }
        return nil
    }

    /// `local@domain` with a printable local part and a valid domain.
    static func isValidMailbox(_ m: String) -> Bool {
        let parts = m.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return false }
        guard parts[0].utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else { return false }
        return HostName.isValidReferenceName(String(parts[1]))
    }
}
