import XCTest
@testable import MTLSTLS

/// Issue 40: the first read of a client's answer to the listener's flight takes the records of
/// that answer which have come whole, in one `recv`, and never what may follow them.
final class FlightReadTests: XCTestCase {
    private func record(_ type: UInt8, _ size: Int) -> [UInt8] {
        [type, 3, 3, UInt8(size >> 8), UInt8(size & 0xff)] + [UInt8](repeating: 0xab, count: size)
    }

    private func end(_ records: [[UInt8]], cut: Int = 0) -> Int {
        let bytes = Array(records.joined().dropLast(cut))
        return bytes.withUnsafeBytes { SocketBIO.flightEnd($0) }
    }

    func testAFlightEndsWithTheRecordAfterItsChangeCipherSpec() {
        // TLS 1.2 full: certificate, key exchange, certificate verify, CCS, Finished, then the
        // client's first application data, which stays in the socket.
        let flight = [record(22, 1200), record(22, 70), record(22, 80), record(20, 1), record(22, 40)]
        let whole = flight.map(\.count).reduce(0, +)
        XCTAssertEqual(end(flight), whole)
        XCTAssertEqual(end(flight + [record(23, 30)]), whole)
        // TLS 1.3: CCS, then one encrypted record; what follows is read as usual.
        XCTAssertEqual(end([record(20, 1), record(23, 50), record(23, 60), record(23, 30)]), 6 + 55)
        // A second ClientHello after HelloRetryRequest: CCS, then the ClientHello.
        XCTAssertEqual(end([record(20, 1), record(22, 300), record(23, 10)]), 6 + 305)
    }

    func testOnlyWholeRecordsAreTaken() {
        let flight = [record(22, 1200), record(22, 70), record(20, 1), record(22, 40)]
        // The Finished cut short: up to the CCS.
        XCTAssertEqual(end(flight, cut: 1), 1205 + 75 + 6)
        // The first record cut short, or not even a header: nothing (the BIO reads as before).
        XCTAssertEqual(end([record(22, 1200)], cut: 1), 0)
        XCTAssertEqual(end([[22, 3, 3]]), 0)
        XCTAssertEqual(end([]), 0)
    }

    func testAnAlertEndsTheFlightAndApplicationDataIsNeverTaken() {
        XCTAssertEqual(end([record(22, 10), record(21, 2), record(22, 10)]), 15 + 7)
        // A TLS 1.3 client without the compatibility CCS: its encrypted records are not taken
        // here (nothing tells its Finished from the data after it).
        XCTAssertEqual(end([record(23, 50), record(23, 30)]), 0)
        XCTAssertEqual(end([record(22, 10), record(23, 30)]), 15)
        // A record that claims 64 KiB: not whole within the peek, not taken.
        XCTAssertEqual(end([[22, 3, 3, 0xff, 0xff]] + [record(22, 1)]), 0)
    }
}
