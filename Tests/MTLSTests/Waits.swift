import Foundation
import XCTest
@testable import MTLS

/// Waits on conditions, never a fixed time: a loaded machine only makes them slower.

/// Polls `condition` until it holds or `timeout` seconds pass; returns whether it held.
@discardableResult
func waitUntil(timeout: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return true }
        if Date() >= deadline { return false }
        usleep(10_000)
    }
}

/// Waits until the watcher thread (`mtls-watch`) has made `count` complete looks from now at
/// every followed store label and file: a change made before the call has then been seen, and its
/// events delivered, and a change that makes no event has had its chance to make one. Two looks,
/// since the one under way may have begun before the change.
func waitForWatcherLooks(_ count: Int = 2, timeout: Double = 20, file: StaticString = #filePath, line: UInt = #line) {
    let target = LifecycleWatcher.completedLooks + count
    XCTAssertTrue(waitUntil(timeout: timeout) { LifecycleWatcher.completedLooks >= target },
                  "the watcher made no \(count) looks in \(timeout) s", file: file, line: line)
}

/// Reads `pipe` (a peer's output) until what it wrote holds `text`, at most `timeout` seconds;
/// returns what was read. What comes after stays in the pipe.
@discardableResult
func waitForOutput(_ pipe: Pipe, containing text: String, timeout: Double = 20,
                   file: StaticString = #filePath, line: UInt = #line) -> String {
    let fd = pipe.fileHandleForReading.fileDescriptor
    let deadline = Date().addingTimeInterval(timeout)
    var seen: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while !String(decoding: seen, as: UTF8.self).contains(text) {
        let left = deadline.timeIntervalSinceNow
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard left > 0, poll(&p, 1, Int32(min(left, 0.1) * 1000) + 1) >= 0 else { break }
        if p.revents == 0 { continue }
        let n = read(fd, &chunk, chunk.count)
        if n <= 0 { break }
        seen += chunk[0..<n]
    }
    let out = String(decoding: seen, as: UTF8.self)
    XCTAssertTrue(out.contains(text), "no \"\(text)\" in: \(out.suffix(400))", file: file, line: line)
    return out
}
