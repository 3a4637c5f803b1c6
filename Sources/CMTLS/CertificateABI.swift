// mtls_cert: parsing and reading certificates.
import MTLS
import CMTLSHeader

/// `int mtls_cert_parse(const uint8_t *data, size_t len, mtls_cert **out)`
@_cdecl("mtls_cert_parse")
public func mtls_cert_parse(_ data: UnsafePointer<UInt8>?, _ len: Int, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    abiCall {
        try putHandle(out) {
            guard let first = try Certificate.parseAll(try bytes(data, len, "data")).first else {
                throw MTLSError(.parse, "no certificate in the data")
            }
            return first
        }
    }
}

/// `int mtls_cert_list_parse(const uint8_t *data, size_t len, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_cert_list_parse")
public func mtls_cert_list_parse(_ data: UnsafePointer<UInt8>?, _ len: Int,
                                 _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                 _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try Certificate.parseAll(try bytes(data, len, "data")) }
    }
}

/// `int mtls_cert_list_load(const char *path, mtls_cert ***out, size_t *count)`
@_cdecl("mtls_cert_list_load")
public func mtls_cert_list_load(_ path: UnsafePointer<CChar>?,
                                _ out: UnsafeMutablePointer<UnsafeMutablePointer<OpaquePointer?>?>?,
                                _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putHandles(out, count) { try Certificate.load(path: try string(path, "path")) }
    }
}

/// `void mtls_cert_list_free(mtls_cert **list, size_t count)`
@_cdecl("mtls_cert_list_free")
public func mtls_cert_list_free(_ list: UnsafeMutablePointer<OpaquePointer?>?, _ count: Int) {
    freeHandles(list, count, Certificate.self)
}

/// `mtls_cert *mtls_cert_ref(mtls_cert *cert)`
@_cdecl("mtls_cert_ref")
public func mtls_cert_ref(_ cert: OpaquePointer?) -> OpaquePointer? { refHandle(cert, Certificate.self) }

/// `void mtls_cert_free(mtls_cert *cert)`
@_cdecl("mtls_cert_free")
public func mtls_cert_free(_ cert: OpaquePointer?) { releaseHandle(cert, Certificate.self) }

/// `int mtls_cert_der(const mtls_cert *cert, const uint8_t **data, size_t *len)`
@_cdecl("mtls_cert_der")
public func mtls_cert_der(_ cert: OpaquePointer?, _ data: UnsafeMutablePointer<UnsafePointer<UInt8>?>?,
                          _ len: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        let c = try handle(cert, Certificate.self, "cert")
        let data = try require(data, "data"), len = try require(len, "len")
        // The certificate's C copy of its DER lives as long as the certificate; hand it out.
        let der = c.derBuffer
        data.pointee = der.baseAddress
        len.pointee = der.count
    }
}

/// `int mtls_cert_pem(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_pem")
public func mtls_cert_pem(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    abiCall { try putString(try handle(cert, Certificate.self, "cert").pem, out) }
}

private func certString(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                        _ field: (Certificate) -> String) -> Int32 {
    abiCall {
        try require(out, "out").pointee = nil
        try putString(field(try handle(cert, Certificate.self, "cert")), out)
    }
}

/// `int mtls_cert_subject(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_subject")
public func mtls_cert_subject(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.subject }
}

/// `int mtls_cert_issuer(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_issuer")
public func mtls_cert_issuer(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.issuer }
}

/// `int mtls_cert_subject_summary(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_subject_summary")
public func mtls_cert_subject_summary(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.subjectSummary }
}

/// `int mtls_cert_serial_hex(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_serial_hex")
public func mtls_cert_serial_hex(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.serialHex }
}

/// `int mtls_cert_sha256_hex(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_sha256_hex")
public func mtls_cert_sha256_hex(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.sha256Hex }
}

/// `int mtls_cert_spki_sha256_hex(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_spki_sha256_hex")
public func mtls_cert_spki_sha256_hex(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.spkiSHA256Hex }
}

/// `int mtls_cert_spki_pin(const mtls_cert *cert, char **out)`
@_cdecl("mtls_cert_spki_pin")
public func mtls_cert_spki_pin(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    certString(cert, out) { $0.spkiPin }
}

/// `int mtls_cert_sha256(const mtls_cert *cert, uint8_t *out, size_t out_len)`
@_cdecl("mtls_cert_sha256")
public func mtls_cert_sha256(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UInt8>?, _ outLen: Int) -> Int32 {
    abiCall { try copyInto(try handle(cert, Certificate.self, "cert").sha256, out, outLen) }
}

/// `int mtls_cert_validity(const mtls_cert *cert, int64_t *not_before, int64_t *not_after)`
@_cdecl("mtls_cert_validity")
public func mtls_cert_validity(_ cert: OpaquePointer?, _ notBefore: UnsafeMutablePointer<Int64>?,
                               _ notAfter: UnsafeMutablePointer<Int64>?) -> Int32 {
    abiCall {
        let c = try handle(cert, Certificate.self, "cert")
        let nb = try require(notBefore, "not_before"), na = try require(notAfter, "not_after")
        nb.pointee = Int64(c.notBefore.timeIntervalSince1970)
        na.pointee = Int64(c.notAfter.timeIntervalSince1970)
    }
}

/// `int mtls_cert_sans(const mtls_cert *cert, mtls_san **out, size_t *count)`
@_cdecl("mtls_cert_sans")
public func mtls_cert_sans(_ cert: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeMutablePointer<mtls_san>?>?,
                           _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall {
        try putArray(out, count, { try handle(cert, Certificate.self, "cert").subjectAltNames }, convert: { name in
            switch name {
            case .dns(let v): mtls_san(kind: MTLS_SAN_DNS, value: try cString(v))
            case .ip(let v): mtls_san(kind: MTLS_SAN_IP, value: try cString(v))
            case .email(let v): mtls_san(kind: MTLS_SAN_EMAIL, value: try cString(v))
            case .uri(let v): mtls_san(kind: MTLS_SAN_URI, value: try cString(v))
            }
        }, release: { wipeAndFree($0.value) })
    }
}

/// `void mtls_san_list_free(mtls_san *list, size_t count)`
@_cdecl("mtls_san_list_free")
public func mtls_san_list_free(_ list: UnsafeMutablePointer<mtls_san>?, _ count: Int) {
    freeArray(list, count) { wipeAndFree($0.value) }
}

/// `int mtls_cert_key_type(const mtls_cert *cert, char **name, int *bits)`
@_cdecl("mtls_cert_key_type")
public func mtls_cert_key_type(_ cert: OpaquePointer?, _ name: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                               _ bits: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let kt = try handle(cert, Certificate.self, "cert").keyType
        let bits = try require(bits, "bits")
        try putString(kt.shortName, name)
        bits.pointee = Int32(kt.bits)
    }
}

/// `int mtls_cert_basic_constraints(const mtls_cert *cert, int *present, int *is_ca, int *path_len)`
@_cdecl("mtls_cert_basic_constraints")
public func mtls_cert_basic_constraints(_ cert: OpaquePointer?, _ present: UnsafeMutablePointer<Int32>?,
                                        _ isCA: UnsafeMutablePointer<Int32>?, _ pathLen: UnsafeMutablePointer<Int32>?) -> Int32 {
    abiCall {
        let bc = try handle(cert, Certificate.self, "cert").basicConstraints
        let present = try require(present, "present"), isCA = try require(isCA, "is_ca"), pathLen = try require(pathLen, "path_len")
        present.pointee = bc == nil ? 0 : 1
        isCA.pointee = (bc?.isCA ?? false) ? 1 : 0
        pathLen.pointee = Int32(bc?.pathLength ?? -1)
    }
}

/// `int mtls_cert_key_usage(const mtls_cert *cert, int *present, unsigned int *bits)`
@_cdecl("mtls_cert_key_usage")
public func mtls_cert_key_usage(_ cert: OpaquePointer?, _ present: UnsafeMutablePointer<Int32>?,
                                _ bits: UnsafeMutablePointer<UInt32>?) -> Int32 {
    abiCall {
        let ku = try handle(cert, Certificate.self, "cert").keyUsage
        let present = try require(present, "present"), bits = try require(bits, "bits")
        present.pointee = ku == nil ? 0 : 1
        bits.pointee = ku?.rawValue ?? 0
    }
}

/// `int mtls_cert_ekus(const mtls_cert *cert, char ***out, size_t *count)`
@_cdecl("mtls_cert_ekus")
public func mtls_cert_ekus(_ cert: OpaquePointer?, _ out: CStringListOut?,
                           _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try handle(cert, Certificate.self, "cert").extendedKeyUsages ?? [] } }
}

/// `int mtls_cert_crl_urls(const mtls_cert *cert, char ***out, size_t *count)`
@_cdecl("mtls_cert_crl_urls")
public func mtls_cert_crl_urls(_ cert: OpaquePointer?, _ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try handle(cert, Certificate.self, "cert").crlDistributionPoints } }
}

/// `int mtls_cert_ocsp_urls(const mtls_cert *cert, char ***out, size_t *count)`
@_cdecl("mtls_cert_ocsp_urls")
public func mtls_cert_ocsp_urls(_ cert: OpaquePointer?, _ out: CStringListOut?, _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    abiCall { try putStrings(out, count) { try handle(cert, Certificate.self, "cert").ocspResponders } }
}
