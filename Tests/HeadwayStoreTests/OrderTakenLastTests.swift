import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// A batch that takes the writers' order last (`SharedWriting.orderBeforeWriting`, when no
/// other daemon committed lately) writes its rows first and locks `stream_state` only with
/// the statement that moves it, just before its `COMMIT`.
@Suite(.serialized, .enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
struct OrderTakenLastTests {
    /// While a hand holds the order, the batch's update of `x` is already written (its row
    /// locked by the writer's transaction): the order is not held across the batch's writes.
    /// When the hand lets go without a change, the batch commits as it was, its order kept.
    @Test func theBatchWritesItsRowsBeforeTakingTheOrder() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let run = try OrderHeldByHand(uri: database.uri, lockWaitWhenTakenLast: 60)
        defer { run.hand.close() }
        let (a, done, result, lossesBefore) = (run.writer, run.done, run.result, run.lossesBefore)
        let written = try Self.rowHeldByAnother("x", uri: database.uri)
        try run.hand.execute("ROLLBACK")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(written, "the batch waited for the order before writing x")
        #expect((try? result.withLock { $0 }?.get()) == 2)
        #expect(a.shared.lostOrders == lossesBefore, "the order was kept: no one committed meanwhile")
        let completed = try a.storedCompleted(["x"])
        #expect(completed == ["x": 2])
        let numbers = a.stream.withLock { $0 }.map(\.changeNumber)
        let first = numbers.first ?? 0
        #expect(numbers == Array(first...first + Int64(numbers.count - 1)), "every number once, in order")
    }

    /// The hazard of writing before the order: a writer holding the order (here a hand)
    /// waits for a row the batch wrote, while the batch waits for the order. The batch gives
    /// way within its short lock wait, well before the server's deadlock check, and runs
    /// again taking the order first: both commit, and no one sees a deadlock's error.
    @Test func aBatchWaitingForTheOrderGivesWayToTheWriterHoldingIt() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let run = try OrderHeldByHand(uri: database.uri, lockWaitWhenTakenLast: 0.2)
        defer { run.hand.close() }
        let (a, hand, done, result, lossesBefore) = (run.writer, run.hand, run.done, run.result, run.lossesBefore)
        let written = try Self.rowHeldByAnother("x", uri: database.uri)
        #expect(written, "the batch waited for the order before writing x")
        // The hand, holding the order, now waits for x: until the batch gives way.
        let handFailure = Locked<(any Error)?>(nil)
        let handDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            do {
                try hand.execute("UPDATE tasks SET label = 'by hand' WHERE id = 'x'; COMMIT")
            } catch {
                handFailure.withLock { $0 = error }
            }
            handDone.signal()
        }
        #expect(handDone.wait(timeout: .now() + 60) == .success)
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(handFailure.withLock { $0 } == nil, "the hand's update failed: \(String(describing: handFailure.withLock { $0 }))")
        #expect((try? result.withLock { $0 }?.get()) == 2, "the batch failed: \(String(describing: result.withLock { $0 }))")
        #expect(a.shared.lostOrders == lossesBefore + 1, "the batch gave way once")
        let stored = try a.run { _, db in
            try db.rows("SELECT completed, label FROM tasks WHERE id = 'x'") { "\($0.int(0)) \($0.optionalText(1) ?? "-")" }
        }
        #expect(stored == ["2 by hand"])
    }

    /// Whether another session comes to hold task `id`'s row lock, asked again and again
    /// (`FOR UPDATE NOWAIT` fails while it is held), up to a bounded number of tries.
    static func rowHeldByAnother(_ id: String, uri: String) throws -> Bool {
        let probe = try Database(path: uri)
        defer { probe.close() }
        for _ in 0..<20_000 {
            do {
                try probe.execute("BEGIN")
                _ = try probe.rows("SELECT 1 FROM tasks WHERE id = ?1 FOR UPDATE NOWAIT", [.text(id)]) { $0.int(0) }
                try probe.execute("ROLLBACK")
            } catch {
                try probe.execute("ROLLBACK")
                if error.sqlState == "55P03" { return true }
                throw error
            }
        }
        return false
    }
}

/// A writer taking the order last (`quietSeconds` 0) with task `x` at 1, a hand holding the
/// writers' order, and the writer's batch setting `x` to 2 submitted meanwhile.
struct OrderHeldByHand {
    let writer: SharedWriter
    let hand: Database
    let lossesBefore: Int
    /// Signalled when the batch's job completes, with its result in `result`.
    let done = DispatchSemaphore(value: 0)
    let result = Locked<Result<Int64, any Error>?>(nil)

    init(uri: String, lockWaitWhenTakenLast: Double) throws {
        writer = try SharedWriter(uri: uri, quietSeconds: 0, lockWaitWhenTakenLast: lockWaitWhenTakenLast)
        try writer.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        try writer.write { store, db in try store.progress("x", ProgressUpdate(completed: 1), now: 1_500, in: db) }
        lossesBefore = writer.shared.lostOrders
        hand = try Database(path: uri)
        try hand.execute("BEGIN; SELECT 1 FROM stream_state WHERE singleton = 1 FOR UPDATE")
        let (store, done, result) = (writer.store, done, result)
        writer.writer.submit({ db in
            try store.progress("x", ProgressUpdate(completed: 2), now: 2_000, in: db).outcome.task.completed
        }) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
    }
}
