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
    /// How many records are kept; the oldest go first (their tickets then give a full handshake).
    static let capacity = 4096

    private struct Book: @unchecked Sendable {
        var next: UInt64 = 1
        var entries: [UInt64: ResumptionRecord] = [:]
        var order: [UInt64] = []
        var head = 0
    }
    private let book = Mutex(Book())

    private func keep(_ record: ResumptionRecord) -> UInt64 {
        book.withLock { b in
            let id = b.next
            b.next &+= 1
            b.entries[id] = record
            b.order.append(id)
            while b.entries.count > Self.capacity, b.head < b.order.count {
                b.entries[b.order[b.head]] = nil
                b.head += 1
            }
            if b.head > Self.capacity { b.order.removeFirst(b.head); b.head = 0 }
            return id
        }
    }

    private func record(_ id: UInt64) -> ResumptionRecord? { book.withLock { $0.entries[id] } }

    /// What a ticket carries: "v2 <record number> <binding digest, hex>".
    private static func appData(id: UInt64, binding: ResumptionBinding) -> [UInt8] {
        Array("v2 \(id) \(Encoding.hex(binding.digest))".utf8)
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
            record = ResumptionRecord(binding: state.binding ?? currentBinding(state, config),
                                      presentedChain: state.presentedChain, evaluation: e)
        } else {
            // No client certificate (client authentication optional or off).
            record = ResumptionRecord(binding: state.binding ?? currentBinding(state, config), presentedChain: [], evaluation: nil)
        }
        let data = appData(id: config.tickets.keep(record), binding: record.binding)
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
        let got = Array(UnsafeRawBufferPointer(start: raw, count: len))
        let fields = String(decoding: got, as: UTF8.self).split(separator: " ", maxSplits: 2)
        guard fields.count == 3, fields[0] == "v2", let id = UInt64(fields[1]), let record = config.tickets.record(id),
              got == appData(id: id, binding: record.binding),
              let admitted = record.admit(under: currentBinding(state, config), policy: config.policy,
                                          peer: state.peer, purpose: .clientAuth) else {
            return SSL_TICKET_RETURN_IGNORE_RENEW
        }
        state.evaluation = admitted
        state.presentedChain = record.presentedChain
        state.binding = record.binding
        return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW
    }
}
