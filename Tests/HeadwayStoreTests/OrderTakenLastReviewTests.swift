import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// Attacks on a batch that takes the writers' order last (`SharedWriting.orderBeforeWriting`,
/// when no other daemon committed lately): it writes its rows before it holds the order, so
/// another daemon's batch holding the order may write the same rows meanwhile, and what went
/// wrong is learnt only from the pipeline's errors.
@Suite(.serialized, .enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
struct OrderTakenLastReviewTests {
    /// A session that does what another daemon's batch holding the order does, one step at
    /// a time: locks `stream_state`, writes a task's row with the next change number, then
    /// moves the row to it and the next generation, names the task, and commits.
    final class OtherDaemon {
        let database: Database
        /// Its server session's process id.
        let processID: Int64
        private var position: (generation: Int64, last: Int64) = (0, 0)

        init(uri: String) throws {
            database = try Database(path: uri)
            processID = try database.scalar("SELECT pg_backend_pid()") ?? 0
        }

        /// Takes the order and, holding it, sets task `id`'s `completed` under the next number.
        func takeOrderAndWrite(_ id: String, completed: Int64) throws {
            try database.execute("BEGIN")
            position = try database.rows("SELECT generation, last_change FROM stream_state WHERE singleton = 1 FOR UPDATE") {
                ($0.int(0), $0.int(1))
            }[0]
            try database.run("UPDATE tasks SET completed = ?1, change_seq = ?2 WHERE id = ?3",
                             [.integer(completed), .integer(position.last + 1), .text(id)])
        }

        /// Moves `stream_state` past the write, names task `id` under the new generation, commits.
        func commit(naming id: String) throws {
            try database.run("UPDATE stream_state SET last_change = ?1, generation = generation + 1 WHERE singleton = 1",
                             [.integer(position.last + 1)])
            try database.run("INSERT INTO written_tasks (generation, ids) VALUES (?1, ?2::text[])",
                             [.integer(position.generation + 1), .text("{\"\(id)\"}")])
            try database.execute("COMMIT")
        }

        func close() { database.close() }
    }

    /// The statement a session other than `process` waits for a lock in, asked again and
    /// again (bounded); nil if none came to wait.
    static func statementWaitingForALock(uri: String, except process: Int64) throws -> String? {
        let probe = try Database(path: uri)
        defer { probe.close() }
        for _ in 0..<5_000 {
            let waiting = try probe.rows("""
                SELECT query FROM pg_stat_activity
                WHERE wait_event_type = 'Lock' AND datname = current_database() AND pid <> ?1
                """, [.integer(process)]) { $0.text(0) }
            if let query = waiting.first { return query }
            usleep(2_000)
        }
        return nil
    }

    /// A writer taking the order last (quiet 0) with task x registered and written once.
    static func writerWithX(uri: String, lockWait: Double = 0.1) throws -> SharedWriter {
        let a = try SharedWriter(uri: uri, quietSeconds: 0, lockWaitWhenTakenLast: lockWait)
        try a.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        try a.write { store, db in try store.progress("x", ProgressUpdate(completed: 1), now: 1_500, in: db) }
        return a
    }

    /// Submits one job adding 1 to x (its events published once committed), noting for
    /// each run whether it held its writes (false: a run with a savepoint per job); `done`
    /// is signalled with x's `completed`, or the error.
    static func incrementX(on a: SharedWriter, runs: Locked<[Bool]>, result: Locked<Result<Int64, any Error>?>,
                           done: DispatchSemaphore) {
        let store = a.store
        a.writer.submit({ db in
            runs.withLock { $0.append(db.heldWrites != nil) }
            return try store.progress("x", ProgressUpdate(increment: 1), now: 2_000, in: db)
        }) { outcome in
            result.withLock { $0 = outcome.map(\.outcome.task.completed) }
            done.signal()
        }
    }

    /// Every number of `a`'s stream once, in order, and x's last event its stored change.
    static func expectOneOrderedStream(_ a: SharedWriter, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let stream = a.stream.withLock { $0 }
        let numbers = stream.map(\.changeNumber)
        let first = numbers.first ?? 0
        #expect(numbers == Array(first...first + Int64(numbers.count - 1)), "every number once, in order: \(numbers)",
                sourceLocation: sourceLocation)
        let stored = try a.storedChangeNumbers()
        #expect(stream.last { $0.taskID == "x" }?.changeNumber == stored["x"],
                "stream \(stream.map { "\($0.changeNumber) \($0.kind) \($0.taskID)" }), stored \(stored)",
                sourceLocation: sourceLocation)
    }

    /// Another daemon holding the order writes task x while this daemon's batch, taking the
    /// order last, waits in its set update for x's row, and commits within the batch's lock
    /// wait (here made long, so that the commit, not the timeout, ends the wait). The set
    /// update goes on with x as the other committed it (READ COMMITTED), leaves it alone
    /// (its number moved) and fails its own check (1/0): the batch lost the order to another
    /// writer, as when `movesTheRow` finds the generation moved, and should run again taking
    /// the order first, its writes held, counted as a lost order. Holding the order from the
    /// start, as before this change, only a hand could change a row under the set update.
    @Test func aSetUpdateOutrunByTheWriterHoldingTheOrderIsALostOrder() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try Self.writerWithX(uri: database.uri, lockWait: 30)
        let lossesBefore = a.shared.lostOrders
        let other = try OtherDaemon(uri: database.uri)
        defer { other.close() }
        try other.takeOrderAndWrite("x", completed: 10)

        let runs = Locked<[Bool]>([])
        let result = Locked<Result<Int64, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Self.incrementX(on: a, runs: runs, result: result, done: done)
        let waiting = try Self.statementWaitingForALock(uri: database.uri, except: other.processID)
        try other.commit(naming: "x")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(waiting?.hasPrefix("WITH old AS") == true, "the set update did not wait for x: \(waiting ?? "no wait")")

        #expect((try? result.withLock { $0 }?.get()) == 11, "\(String(describing: result.withLock { $0 }))")
        #expect(try a.storedCompleted(["x"]) == ["x": 11])
        #expect(runs.withLock { $0 } == [true, true], "run again with a savepoint per job: \(runs.withLock { $0 })")
        #expect(a.shared.lostOrders == lossesBefore + 1, "not counted as a lost order")
        try Self.expectOneOrderedStream(a)
    }

    /// A hand (no order, no generation moved) changes x's number while the set update of
    /// a batch taking the order last waits for x's row: the batch runs again, taking the
    /// order first (nothing tells a hand from a writer there), and writes over the hand's
    /// change with its writes held; `task_changes` holds x's stored number alone.
    @Test func aRowChangedByAHandUnderTheSetUpdateIsWrittenOver() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try Self.writerWithX(uri: database.uri, lockWait: 30)
        let hand = try Database(path: database.uri)
        defer { hand.close() }
        let handProcess = try hand.scalar("SELECT pg_backend_pid()") ?? 0
        try hand.execute("BEGIN; UPDATE tasks SET completed = 10, change_seq = change_seq + 1000 WHERE id = 'x'")
        let runs = Locked<[Bool]>([])
        let result = Locked<Result<Int64, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Self.incrementX(on: a, runs: runs, result: result, done: done)
        let waiting = try Self.statementWaitingForALock(uri: database.uri, except: handProcess)
        try hand.execute("COMMIT")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(waiting?.hasPrefix("WITH old AS") == true, "waited in: \(waiting ?? "no wait")")
        #expect((try? result.withLock { $0 }?.get()) == 11, "\(String(describing: result.withLock { $0 }))")
        #expect(runs.withLock { $0 }.count >= 2)
        let kept = try a.run { _, db in
            try db.rows("SELECT c.number FROM task_changes AS c JOIN tasks AS t ON t.seq = c.task WHERE t.id = 'x'") { $0.int(0) }
        }
        let stored = try a.storedChangeNumbers()["x"]
        #expect(kept == [stored ?? 0], "task_changes \(kept), stored \(String(describing: stored))")
        #expect(try a.storedCompleted(["x"]) == ["x": 11])
    }

    /// The same, the other holding x past the batch's lock wait (100 ms): the set update
    /// gives way (55P03), the batch counts a lost order and runs again taking the order first
    /// (waiting for it), its writes held; its changes come after the other's. The lock wait
    /// was its transaction's only: the writer's next batch waits as long as the session says.
    @Test func aSetUpdateWaitingPastTheLockWaitRunsAgainTakingTheOrderFirst() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try Self.writerWithX(uri: database.uri)
        let lossesBefore = a.shared.lostOrders
        let other = try OtherDaemon(uri: database.uri)
        defer { other.close() }
        try other.takeOrderAndWrite("x", completed: 10)

        let runs = Locked<[Bool]>([])
        let result = Locked<Result<Int64, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Self.incrementX(on: a, runs: runs, result: result, done: done)
        for _ in 0..<5_000 where a.shared.lostOrders == lossesBefore { usleep(2_000) }
        #expect(a.shared.lostOrders == lossesBefore + 1, "the batch did not give way")
        let waiting = try Self.statementWaitingForALock(uri: database.uri, except: other.processID)
        try other.commit(naming: "x")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(waiting?.contains("FOR UPDATE") == true, "the batch run again did not wait for the order: \(waiting ?? "no wait")")

        #expect((try? result.withLock { $0 }?.get()) == 11, "\(String(describing: result.withLock { $0 }))")
        #expect(try a.storedCompleted(["x"]) == ["x": 11])
        #expect(runs.withLock { $0 } == [true, true])
        #expect(a.shared.lostOrders == lossesBefore + 1)
        try Self.expectOneOrderedStream(a)
        // The writer's session waits 5 s for a lock outside the batches that take the order last.
        #expect(try a.run { _, db in try db.rows("SHOW lock_timeout") { $0.text(0) } } == ["5s"])
        try a.write { store, db in try store.progress("x", ProgressUpdate(increment: 1), now: 3_000, in: db) }
        #expect(try a.run { _, db in try db.rows("SHOW lock_timeout") { $0.text(0) } } == ["5s"])
    }

    /// A batch that registers a task takes the order at its `INSERT` (`Database.orderGate`),
    /// before any of its writes, even when it would take it last: the writer waits for the
    /// order in `lockedPosition`, not in `movesTheRow`.
    @Test func aBatchThatRegistersTakesTheOrderBeforeItsWrites() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try Self.writerWithX(uri: database.uri)
        let lossesBefore = a.shared.lostOrders
        let hand = try Database(path: database.uri)
        defer { hand.close() }
        let handProcess = try hand.scalar("SELECT pg_backend_pid()") ?? 0
        try hand.execute("BEGIN; SELECT 1 FROM stream_state WHERE singleton = 1 FOR UPDATE")
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<TreeOperation.Applied, any Error>?>(nil)
        let store = a.store
        a.writer.submit({ db in
            let events = try store.progress("x", ProgressUpdate(increment: 1), now: 2_000, in: db).events
            return TreeOperation.Applied(events: events + (try store.register(Registration(id: "y", name: "y"), now: 2_000, in: db).events))
        }) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        let waiting = try Self.statementWaitingForALock(uri: database.uri, except: handProcess)
        try hand.execute("ROLLBACK")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(waiting?.hasPrefix("SELECT generation, last_change, txid_current()") == true, "waited in: \(waiting ?? "no wait")")
        #expect((try? result.withLock { $0 }?.get()) != nil, "\(String(describing: result.withLock { $0 }))")
        #expect(a.shared.lostOrders == lossesBefore)
        try Self.expectOneOrderedStream(a)
    }

    /// The lock's time of a batch taking the order last counts from the server's taking
    /// it, not the wait for it: a hand holds the order for 0.3 s while the batch waits in
    /// `movesTheRow`, and the batch's time is far less; alone, it is above 0 and at most
    /// the batch's own time.
    @Test func theLockTimeOfABatchTakingTheOrderLastLeavesOutItsWait() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try Self.writerWithX(uri: database.uri, lockWait: 30)
        var before = a.shared.orderingLockSeconds
        let start = DispatchTime.now().uptimeNanoseconds
        try a.write { store, db in try store.progress("x", ProgressUpdate(increment: 1), now: 2_000, in: db) }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let alone = a.shared.orderingLockSeconds - before
        #expect(alone > 0 && alone <= elapsed, "lock \(alone) s in a batch of \(elapsed) s")

        let hand = try Database(path: database.uri)
        defer { hand.close() }
        let handProcess = try hand.scalar("SELECT pg_backend_pid()") ?? 0
        try hand.execute("BEGIN; SELECT 1 FROM stream_state WHERE singleton = 1 FOR UPDATE")
        before = a.shared.orderingLockSeconds
        let done = DispatchSemaphore(value: 0)
        let store = a.store
        a.writer.submit({ db in try store.progress("x", ProgressUpdate(increment: 1), now: 3_000, in: db) }) { _ in done.signal() }
        let waiting = try Self.statementWaitingForALock(uri: database.uri, except: handProcess)
        usleep(300_000)
        try hand.execute("ROLLBACK")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(waiting?.contains("UPDATE stream_state") == true, "waited in: \(waiting ?? "no wait")")
        let waited = a.shared.orderingLockSeconds - before
        #expect(waited > 0 && waited < 0.3, "lock \(waited) s")
        #expect(try a.storedCompleted(["x"]) == ["x": 3])
    }

    /// The connection lost in the middle of a batch taking the order last (its `COMMIT`
    /// never sent): the batch fails as unavailable with nothing stored, and the next one
    /// numbers after the last committed change, the stream one increasing sequence.
    @Test func aBatchCutBeforeItsCommitLeavesTheNextOneRight() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let proxy = try CommitCuttingProxy(for: server)
        defer { proxy.close() }
        let a = try Self.writerWithX(uri: proxy.uri)
        let result = Result {
            try a.run { store, db in
                proxy.cut(.beforeCommitRequest)
                return try store.progress("x", ProgressUpdate(completed: 2), now: 2_000, in: db)
            }
        }
        #expect(proxy.cuts == 1)
        guard case .failure(let error as DatabaseError) = result, error.isUnavailable else {
            Issue.record("not failed as unavailable: \(result.map(\.outcome.task.completed))")
            return
        }
        #expect(try a.storedCompleted(["x"]) == ["x": 1])
        try a.write { store, db in try store.progress("x", ProgressUpdate(completed: 3), now: 3_000, in: db) }
        #expect(try a.storedCompleted(["x"]) == ["x": 3])
        try Self.expectOneOrderedStream(a)
    }

    /// A `COMMIT` whose answer is lost as a network cut loses it: with the whole reply that
    /// held it, the answers of the pipeline's other statements too (the server sends them
    /// together, at the pipeline's sync). A batch that took the order in two steps had its
    /// transaction's id told by `lockedPosition`, a round trip of its own; one that takes it
    /// last has it told by its pipeline's first statement, whose answer the server sends at
    /// once (`PostgresConnection.sendAnswersSoFar`): either is asked about, and reported
    /// committed. (`movesTheRow`'s answer, which tells the id too, is lost in the same reply.)
    @Test(arguments: [0.0, 60.0]) func aBatchWhoseWholeCommitReplyIsLostIsAskedAbout(quiet: Double) throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let proxy = try CommitCuttingProxy(for: server)
        defer { proxy.close() }
        let a = try SharedWriter(uri: proxy.uri, quietSeconds: quiet)
        try a.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        try a.write { store, db in try store.progress("x", ProgressUpdate(completed: 1), now: 1_500, in: db) }
        let result = Result {
            try a.run { store, db in
                proxy.cut(.theReplyWithTheCommitAnswer)
                return try store.progress("x", ProgressUpdate(completed: 2), now: 2_000, in: db).outcome.task.completed
            }
        }
        #expect(proxy.cuts == 1)
        let stored = try { () throws -> Int64? in
            let database = try Database(path: server.uri)
            defer { database.close() }
            return try TaskRepository.find("x", in: database)?.completed
        }()
        #expect(stored == 2, "the batch committed")
        #expect((try? result.get()) == 2, "committed, yet reported: \(result)")
    }
}
