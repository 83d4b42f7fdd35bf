import HeadwayTestSupport
import Testing
@testable import HTTPServer

@Suite struct DeadlineQueueTests {
    /// Random inserts (new sockets and sockets inserted again), removals and expiries,
    /// enough to compact the insertions many times over, against a plain model: the queue
    /// always gives the same earliest socket and expires the same sockets in order. (A
    /// deadline far off keeps many stale insertions behind the earliest live one.)
    @Test func matchesAModelThroughManyCompactions() {
        var random = SeededGenerator(seed: 16)
        var queue = DeadlineQueue<Int>()
        var model: [Int32: (value: Int, deadline: UInt64, order: Int)] = [:]
        var now: UInt64 = 0
        for step in 0..<20_000 {
            now += UInt64.random(in: 0...3, using: &random)
            let fd = Int32.random(in: 0..<40, using: &random)
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<6:
                queue.insert(fd, step, deadline: now + 3_000)
                model[fd] = (step, now + 3_000, step)
            case 6..<8:
                #expect(queue.remove(fd)?.value == model.removeValue(forKey: fd)?.value)
            default:
                let expired = queue.removeExpired(now: now)
                let due = model.filter { $0.value.deadline <= now }.sorted { $0.value.order < $1.value.order }
                #expect(expired.map(\.fd) == due.map(\.key) && expired.map(\.value) == due.map(\.value.value))
                due.forEach { model[$0.key] = nil }
            }
            let earliest = model.min { $0.value.order < $1.value.order }
            let first = queue.first()
            #expect(first?.fd == earliest?.key && first?.entry.value == earliest?.value.value && queue.count == model.count)
        }
    }
}
