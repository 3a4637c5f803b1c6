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
