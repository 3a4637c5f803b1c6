internal import COpenSSL
import Synchronization

// This file owns a server's session tickets: the records behind the tickets issued, and
// OpenSSL's ticket callbacks that bind a ticket to its record and re-check it on resumption.

/// Session tickets of a listener, and of an application's `SSL_CTX` that accepts clients. A
/// ticket (encrypted and authenticated by OpenSSL with the context's own key) carries the
/// number of a ``ResumptionRecord`` kept here and the digest of its ``ResumptionBinding``. It
/// resumes only under the same binding — the client policy object and version that judged the
/// client, the client's address, the server's identity — and when the chain the client
/// presented is still trusted at the policy's time (certificates within their validity, a
/// `fail_closed` rule's pins not expired); otherwise the client gets a full handshake and a
/// fresh evaluation. A resumed connection reports the evaluation made for the resumption.
final class ServerTickets: Sendable {
    /// How many tickets are kept; the oldest go first (their tickets then give a full handshake).
    static let capacity = 4096

    /// The tickets issued: the record of each, by number. What a ticket carries is not kept: it
    /// is made again from the number and the record's digest to be compared (issue 40).
    private struct Book: @unchecked Sendable {
        var next: UInt64 = 1
        var entries: [UInt64: ResumptionRecord] = [:]
        var order: [UInt64] = []
        var head = 0
    }
    private let book = Locked(Book())

    /// Keeps `record` under a new number; returns what the ticket carries.
    private func keep(_ record: ResumptionRecord) -> [UInt8]? {
        guard record.hasDigest else { return nil }
        return book.withLock { b -> [UInt8]? in
            let id = b.next
            guard let data = record.withDigest({ Self.appData(id: id, digest: $0) }) else { return nil }
            b.next &+= 1
            b.entries[id] = record
            b.order.append(id)
            while b.entries.count > Self.capacity, b.head < b.order.count {
                b.entries[b.order[b.head]] = nil
                b.head += 1
            }
            if b.head > Self.capacity { b.order.removeFirst(b.head); b.head = 0 }
            return data
        }
    }

    private func record(_ id: UInt64) -> ResumptionRecord? { book.withLock { $0.entries[id] } }

    /// What a ticket carries: "v2 <ticket number> <binding digest, hex>" (formatted by hand).
    private static func appData(id: UInt64, digest: UnsafeRawBufferPointer) -> [UInt8] {
        // Written in place (no appends): it is made for every ticket issued, and again to compare
        // with every ticket presented (the book keeps no copy).
        [UInt8](unsafeUninitializedCapacity: 3 + 20 + 1 + 2 * digest.count) { out, count in
            let hex: StaticString = "0123456789abcdef"
            let h = hex.utf8Start
            out[0] = UInt8(ascii: "v"); out[1] = UInt8(ascii: "2"); out[2] = UInt8(ascii: " ")
            var n = 3
            var scale: UInt64 = 1
            while id / scale >= 10 { scale *= 10 }
            var rest = id
            while scale > 0 { out[n] = UInt8(ascii: "0") + UInt8(rest / scale); n += 1; rest %= scale; scale /= 10 }
            out[n] = UInt8(ascii: " "); n += 1
            for b in digest { out[n] = h[Int(b >> 4)]; out[n + 1] = h[Int(b & 0xf)]; n += 2 }
            count = n
        }
    }

    /// The ticket number in what a ticket carries, if it is of this form.
    private static func ticketNumber(_ data: UnsafeRawBufferPointer) -> UInt64? {
        guard data.count > 3, data[0] == UInt8(ascii: "v"), data[1] == UInt8(ascii: "2"), data[2] == UInt8(ascii: " ") else { return nil }
        var id: UInt64 = 0
        for i in 3..<data.count {
            let c = data[i]
            if c == UInt8(ascii: " ") { return i > 3 ? id : nil }
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            let (times, o1) = id.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(c - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            id = sum
        }
        return nil
    }

    private static func config(_ arg: UnsafeMutableRawPointer?) -> TLSContextConfig? {
        arg.map { Unmanaged<TLSContextConfig>.fromOpaque($0).takeUnretainedValue() }
    }

    /// The binding in force for a client of `ssl` now.
    static func currentBinding(_ state: TLSHandshakeState, _ config: TLSContextConfig) -> ResumptionBinding {
        ResumptionBinding(policy: config.policy, peer: state.peer, identities: state.bindingIdentities ?? config.bindingIdentities,
                          context: config.bindingContext, overrides: state.overrides ?? config.overrides)
    }

    /// OpenSSL's ticket generation callback: keeps the record and binds the ticket to it. A
    /// client whose certificate was not judged trusted gets a ticket that never resumes.
    static func generate(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let config = config(arg), let session = SSL_get_session(ssl) else { return 1 }
        let state = TLSContext.handshakeState(ssl, config)
        let record: ResumptionRecord
        if let e = state.evaluation {
            guard e.trusted else { return 1 }
            // The verification's record, or the one a resumed ticket was admitted with.
            record = state.record.flatMap { $0.hasDigest ? $0 : nil }
                ?? ResumptionRecord(binding: state.binding ?? currentBinding(state, config), presentedChain: state.presentedChain,
                                    evaluation: e, withDigest: true)
        } else {
            // No client certificate (client authentication optional or off).
            record = state.record.flatMap { !$0.hasDigest || $0.evaluated != nil ? nil : $0 }
                ?? ResumptionRecord(binding: state.binding ?? currentBinding(state, config), presentedChain: [], evaluation: nil,
                                    withDigest: true)
        }
        guard let data = config.tickets.keep(record) else { return 1 }
        _ = data.withUnsafeBytes { SSL_SESSION_set1_ticket_appdata(session, $0.baseAddress, $0.count) }
        return 1
    }

    /// OpenSSL's ticket decryption callback: resumes only a ticket whose record admits it under
    /// the binding in force (see ``ResumptionRecord/admit(under:policy:peer:purpose:)``).
    static func decrypt(_ ssl: OpaquePointer?, _ session: OpaquePointer?, _ status: SSL_TICKET_STATUS,
                        _ arg: UnsafeMutableRawPointer?) -> SSL_TICKET_RETURN {
        switch status {
        case SSL_TICKET_SUCCESS, SSL_TICKET_SUCCESS_RENEW: break
        case SSL_TICKET_EMPTY, SSL_TICKET_NO_DECRYPT: return SSL_TICKET_RETURN_IGNORE_RENEW
        default: return SSL_TICKET_RETURN_ABORT
        }
        guard let ssl, let session, let config = config(arg) else { return SSL_TICKET_RETURN_IGNORE_RENEW }
        let state = TLSContext.handshakeState(ssl, config)
        var raw: UnsafeMutableRawPointer? = nil
        var len = 0
        guard SSL_SESSION_get0_ticket_appdata(session, &raw, &len) == 1, let raw, len > 0, len < 4096 else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        let got = UnsafeRawBufferPointer(start: raw, count: len)
        guard let id = ticketNumber(got), let record = config.tickets.record(id),
              let issued = record.withDigest({ appData(id: id, digest: $0) }) else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        guard issued.count == len, issued.withUnsafeBytes({ CRYPTO_memcmp($0.baseAddress, raw, len) == 0 }),
              let admitted = record.admit(under: currentBinding(state, config), policy: config.policy,
                                          peer: state.peer, purpose: .clientAuth) else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        state.evaluated = admitted.record.evaluated // admitted.evaluation, shared
        state.presentedChain = record.presentedChain
        state.binding = record.binding
        state.record = admitted.record
        return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW
    }
}
