import Lifecycle
import Dispatch
import Foundation
import Synchronization
import Testing
@testable import HeadwayStore

/// The read pool: reads side by side, a bounded queue, and a close that waits.
@Suite struct ReadPoolTests {
    /// A read that holds its connection until the test opens the gate.
    private final class HeldRead: Sendable {
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)

        /// The read itself: says it started, waits at the gate, then reads.
        func job(afterwards: @escaping @Sendable (DatabaseReader) -> Void = { _ in }) -> ReadPool.Job {
            { [self] reader in
                started.signal()
                gate.wait()
                afterwards(reader)
            }
        }

        func waitUntilStarted() -> Bool { started.wait(timeout: .now() + 10) == .success }
        func release() { gate.signal() }
    }

    private func pool(_ fixture: StoreFixture, connections: Int, maximumWaiting: Int = 100) throws -> ReadPool {
        try ReadPool(path: fixture.path, connections: connections, maximumWaiting: maximumWaiting, label: "test.reads")
    }

    @Test func aHeldReadDoesNotHoldTheOthers() throws {
        let fixture = try StoreFixture()
        let reads = try pool(fixture, connections: 2)
        defer { reads.close() }
        let held = HeldRead()
        defer { held.release() }
        try reads.submit(held.job())
        #expect(held.waitUntilStarted())
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<3 {
            try reads.submit { reader in
                _ = try? reader.schemaVersion()
                done.signal()
            }
        }
        for _ in 0..<3 { #expect(done.wait(timeout: .now() + 10) == .success, "read while another is held") }
        held.release()
    }

    @Test func readsWaitUpToTheLimitAndAreRefusedPastIt() throws {
        let fixture = try StoreFixture()
        let reads = try pool(fixture, connections: 1, maximumWaiting: 2)
        let held = HeldRead()
        defer { held.release() }
        try reads.submit(held.job())
        #expect(held.waitUntilStarted())
        let ran = Atomic<Int>(0)
        try reads.submit { _ in ran.add(1, ordering: .relaxed) }
        try reads.submit { _ in ran.add(1, ordering: .relaxed) }
        #expect(reads.waitingCount == 2, "at the limit: both wait")
        #expect(throws: ReadPool.Refusal.busy) { try reads.submit { _ in ran.add(100, ordering: .relaxed) } }
        #expect(reads.statistics.refusedBusy == 1)
        held.release()
        reads.close()
        #expect(ran.load(ordering: .relaxed) == 2, "the waiting reads ran, the refused one never")
    }

    /// Waiting reads are served by client in turns, each client's own in order: a client
    /// that queued many reads holds another's for one read, not for all of them.
    @Test func waitingReadsAreServedByClientInTurns() throws {
        let fixture = try StoreFixture()
        let reads = try pool(fixture, connections: 1)
        let held = HeldRead()
        defer { held.release() }
        try reads.submit(held.job())
        #expect(held.waitUntilStarted())
        let order = Locked<[String]>([])
        let queued: [(client: Int, name: String)] = [(1, "a1"), (1, "a2"), (1, "a3"), (2, "b1"), (1, "a4"), (3, "c1"), (3, "c2")]
        for (client, name) in queued {
            try reads.submit({ _ in order.withLock { $0.append(name) } }, client: client)
        }
        #expect(reads.waitingCount == 7)
        held.release()
        reads.close()
        #expect(order.withLock { $0 } == ["a1", "b1", "c1", "a2", "c2", "a3", "a4"])
    }

    /// A stop begins: the reads still waiting are refused (each says so through its own
    /// `refused`) and never run, one given no `refused` still runs, new reads are refused,
    /// the one running finishes, and `close()` then returns.
    @Test func refuseWaitingRefusesTheQueueButNotTheReadRunning() throws {
        let fixture = try StoreFixture()
        let reads = try pool(fixture, connections: 1)
        let held = HeldRead()
        defer { held.release() }
        let heldFinished = Atomic<Bool>(false)
        try reads.submit(held.job { _ in heldFinished.store(true, ordering: .relaxed) })
        #expect(held.waitUntilStarted())
        let ran = Atomic<Int>(0)
        let refused = Locked<[Int]>([])
        for number in 0..<3 {
            try reads.submit({ _ in ran.add(1, ordering: .relaxed) }, refused: { refused.withLock { $0.append(number) } })
        }
        try reads.submit { _ in ran.add(1, ordering: .relaxed) }  // one with nothing to say: it runs
        #expect(reads.waitingCount == 4)
        reads.refuseWaiting()
        #expect(refused.withLock { $0 } == [0, 1, 2], "each waiting read was told, in order")
        #expect(reads.waitingCount == 1)
        #expect(throws: ReadPool.Refusal.closed) { try reads.submit { _ in ran.add(100, ordering: .relaxed) } }
        held.release()
        reads.close()
        let finished = heldFinished.load(ordering: .relaxed)
        #expect(finished, "the read running finished")
        #expect(ran.load(ordering: .relaxed) == 1, "no refused read ran; the one that could not be refused did")
    }

    /// The stop: new reads are refused at once, the one running and the one waiting
    /// finish on open connections, and only then are the connections closed.
    @Test func closeWaitsForEveryReadAcceptedBeforeClosingTheConnections() throws {
        let fixture = try StoreFixture()
        let reads = try pool(fixture, connections: 1)
        let versions = Locked<[Int]>([])
        let record: @Sendable (DatabaseReader) -> Void = { reader in
            let version = (try? reader.schemaVersion()) ?? -1
            versions.withLock { $0.append(version) }
        }
        let held = HeldRead()
        defer { held.release() }
        try reads.submit(held.job(afterwards: record))
        #expect(held.waitUntilStarted())
        try reads.submit(record)
        let closed = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            reads.close()
            closed.signal()
        }
        var polls = 0
        while !reads.isClosing && polls < 1000 {
            polls += 1
            usleep(1000)
        }
        #expect(reads.isClosing)
        #expect(throws: ReadPool.Refusal.closed) { try reads.submit(record) }
        held.release()
        #expect(closed.wait(timeout: .now() + 10) == .success)
        let read = versions.withLock { $0 }
        #expect(read.count == 2)
        #expect(read.allSatisfy { $0 > 0 }, "both reads had an open connection: \(read)")
        #expect(throws: (any Error).self) { try reads.readers[0].schemaVersion() }
    }
}
