// TSan on Linux reports a "Swift access race" on a dictionary only ever touched inside
// Mutex.withLock: swiftc -sanitize=thread mutex_false_positive.swift -o m && ./m
import Synchronization
import Glibc
final class C: Sendable { let m = Mutex<[Int: Int]>([:]) }
let c = C()
var threads: [pthread_t] = []
for t in 0..<4 {
    var th = pthread_t()
    pthread_create(&th, nil, { arg in
        for i in 0..<20000 { c.m.withLock { d in if d.count > 100 { d.removeAll(keepingCapacity: true) }; d[i % 500] = i }; _ = c.m.withLock { $0[i % 7] } }
        return nil
    }, nil)
    threads.append(th)
}
for th in threads { pthread_join(th, nil) }
print("done")
