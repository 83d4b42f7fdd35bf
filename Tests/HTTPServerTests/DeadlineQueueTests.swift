import HeadwayTestSupport
import Testing
@testable import HTTPServer

@Suite struct DeadlineQueueTests {
    /// Random inserts (new sockets and sockets inserted again), removals and expiries,
    /// enough to compact the insertions many times over, against a plain model: the queue
    /// always gives the same earliest socket and expires the same sockets in order.
    @Test func matchesAModelThroughManyCompactions() {
        var random = SeededGenerator(seed: 16)
        var queue = DeadlineQueue<Int>()
        var model: [Int32: (value: Int, deadline: UInt64, order: Int)] = [:]
        var now: UInt64 = 0
        var expiredCount = 0
        for step in 0..<20_000 {
            now += UInt64.random(in: 0...3, using: &random)
            // Socket 0 is inserted whenever it is not held and then left alone until it
            // expires: the stale insertions of the others pile up behind it.
            let fd: Int32 = model[0] == nil ? 0 : Int32.random(in: 1..<8, using: &random)
            switch fd == 0 ? 0 : Int.random(in: 0..<10, using: &random) {
            case 0..<6:
                queue.insert(fd, step, deadline: now + 300)
                model[fd] = (step, now + 300, step)
            case 6..<8:
                #expect(queue.remove(fd)?.value == model.removeValue(forKey: fd)?.value)
            default:
                // Time jumps now and then (every 200 steps or so), so that whole runs of
                // sockets expire at once; between jumps stale insertions pile up.
                if Int.random(in: 0..<20, using: &random) == 0 { now += UInt64.random(in: 0...3_000, using: &random) }
                let expired = queue.removeExpired(now: now)
                expiredCount += expired.count
                let due = model.filter { $0.value.deadline <= now }.sorted { $0.value.order < $1.value.order }
                #expect(expired.map(\.fd) == due.map(\.key) && expired.map(\.value) == due.map(\.value.value))
                due.forEach { model[$0.key] = nil }
            }
            let earliest = model.min { $0.value.order < $1.value.order }
            let first = queue.first()
            #expect(first?.fd == earliest?.key && first?.entry.value == earliest?.value.value && queue.count == model.count)
        }
        #expect(expiredCount > 300, "\(expiredCount) expired")
    }

    /// Socket numbers far apart, the highest first: each is held and found by its own
    /// number, `sockets` lists them in order, and a removed one is gone for good.
    @Test func socketsFarApartAreHeldAndListedByNumber() {
        var queue = DeadlineQueue<String>()
        queue.insert(5_000, "far", deadline: 10)
        queue.insert(0, "zero", deadline: 11)
        queue.insert(70, "near", deadline: 12)
        #expect(queue.count == 3 && queue.sockets == [0, 70, 5_000])
        #expect(queue.contains(70) && !queue.contains(71) && !queue.contains(9_999))
        queue.modifyValue(of: 70) { $0 += "!" }
        #expect(queue.remove(5_000)?.value == "far" && queue.remove(5_000) == nil && queue.remove(9_999) == nil)
        #expect(queue.first()?.fd == 0)
        #expect(queue.removeExpired(now: 12).map(\.value) == ["zero", "near!"])
        #expect(queue.isEmpty && queue.sockets.isEmpty)
        // A negative number is never held: asking about one finds nothing.
        #expect(!queue.contains(-1) && queue.remove(-1) == nil)
    }
}
