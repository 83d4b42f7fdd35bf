import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// The engines a test of the writer runs on: SQLite always, PostgreSQL when a server is there.
enum TestEngine: String, CaseIterable, CustomStringConvertible {
    case sqlite, postgres

    var description: String { rawValue }

    /// The engines available to this run.
    static var available: [TestEngine] { TestPostgresDatabase.isAvailable ? allCases : [.sqlite] }
}

/// A writer and its store on a fresh database of either engine, built as the daemon builds
/// them: the store's cache holds each batch's writes, and on PostgreSQL every batch takes
/// the writers' lock (`SharedWriting`). `cuttingCommits` (PostgreSQL): the writer connects
/// through a `CommitCuttingProxy` (`proxy`); everything else connects directly.
final class EngineWriter: @unchecked Sendable {
    let engine: TestEngine
    let location: String
    let store: TaskStore
    let writer: GroupCommitWriter
    let proxy: CommitCuttingProxy?
    private let group: ServiceGroup
    private let directory: TemporaryDirectory?
    private let server: TestPostgresDatabase?

    init(_ engine: TestEngine, cuttingCommits: Bool = false) throws {
        self.engine = engine
        switch engine {
        case .sqlite:
            let directory = TemporaryDirectory()
            self.directory = directory
            server = nil
            location = directory.file("headway.db")
        case .postgres:
            let server = try TestPostgresDatabase()
            self.server = server
            directory = nil
            location = server.uri
        }
        proxy = try server.flatMap { cuttingCommits ? try CommitCuttingProxy(for: $0) : nil }
        let counter = try DatabaseSetup.open(path: location).changeCounter
        let cache = TaskCache()
        store = TaskStore(changeCounter: counter, cache: cache)
        let coordinator = storageEngine(for: location).isShared ? SharedWriting(changeCounter: counter, cache: cache) : nil
        writer = try GroupCommitWriter(path: proxy?.uri ?? location, durability: .normal, coordinator: coordinator,
                                       heldWrites: cache)
        group = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try group.start()
    }

    deinit {
        group.stop()
        proxy?.close()
        server?.drop()
        directory?.remove()
    }

    /// Runs `work` in a batch and waits for its committed result.
    func write<Value: Sendable>(_ work: @escaping @Sendable (TaskStore, Database) throws -> Value) throws -> Value {
        let done = DispatchSemaphore(value: 0)
        let box = Box<Result<Value, any Error>>()
        writer.submit({ [store] database in try work(store, database) }) { result in
            box.value = result
            done.signal()
        }
        done.wait()
        return try box.value!.get()
    }

    /// Runs `jobs` as one batch (queued while the writer is held in a batch of its own) and
    /// returns each job's result, in order.
    func batch<Value: Sendable>(_ jobs: [@Sendable (TaskStore, Database) throws -> Value]) -> [Result<Value, any Error>] {
        let running = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        writer.submit({ _ in
            running.signal()
            release.wait()
        }) { _ in }
        running.wait()
        let results = Locked<[Int: Result<Value, any Error>]>([:])
        let done = DispatchGroup()
        for (index, job) in jobs.enumerated() {
            done.enter()
            writer.submit({ [store] database in try job(store, database) }) { result in
                results.withLock { $0[index] = result }
                done.leave()
            }
        }
        release.signal()
        done.wait()
        return results.withLock { results in jobs.indices.map { results[$0]! } }
    }

    /// Runs `sql` on a connection of its own (a trigger of the test's, say).
    func execute(_ sql: String) throws {
        let database = try Database(path: location)
        defer { database.close() }
        try database.execute(sql)
    }

    /// Reads with a connection of its own.
    func read<Value>(_ body: (Database) throws -> Value) throws -> Value {
        let database = try Database(path: location)
        defer { database.close() }
        return try body(database)
    }

    /// The stored `completed` of each task, and its history samples (bucket, completed).
    func stored(_ ids: [String]) throws -> [String: (completed: Int64, label: String?, samples: [[Int64]])] {
        try read { database in
            var stored: [String: (completed: Int64, label: String?, samples: [[Int64]])] = [:]
            for id in ids {
                guard let task = try TaskRepository.find(id, in: database) else { continue }
                let samples = try database.rows("SELECT bucket, completed FROM history WHERE task_id = ? ORDER BY bucket",
                                                [.text(id)]) { [$0.int(0), $0.int(1)] }
                stored[id] = (task.completed, task.label, samples)
            }
            return stored
        }
    }
}

/// A batch's held writes: one statement per table on PostgreSQL whatever the batch's size,
/// sent with the batch's last statements and its `COMMIT` in one pipeline; a failure among
/// them undone exactly (the batch run again, a savepoint per job), on both engines.
@Suite(.serialized) struct SetWritesTests {
    /// Registers `ids` (total 1,000 each) at second 1.
    private static func register(_ ids: [String], on fixture: EngineWriter) throws {
        for id in ids {
            _ = try fixture.write { store, db in
                try store.register(Registration(id: id, name: id, total: 1_000), now: 1_000, in: db)
            }
        }
    }

    /// The statements the writer's connection runs for a batch of `tasks` progress updates,
    /// one per task, each taking a history sample (a new second): from a probe job first in
    /// the batch to a probe job alone in the next (so the batch's end and commit, and the
    /// next batch's beginning, are counted too).
    private static func statementsOfABatch(updating tasks: Int, on fixture: EngineWriter, second: Int64) throws -> Int {
        let ids = (0..<tasks).map { "t\(second)-\($0)" }
        try register(ids, on: fixture)
        var jobs: [@Sendable (TaskStore, Database) throws -> Int] = [{ _, db in db.statementsRun }]
        for id in ids {
            jobs.append({ store, db in
                _ = try store.progress(id, ProgressUpdate(increment: 1), now: second * 1_000, in: db)
                return 0
            })
        }
        let results = fixture.batch(jobs)
        let before = try results[0].get()
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        let after = try fixture.write { _, db in db.statementsRun }
        let stored = try fixture.stored(ids)
        #expect(stored.count == tasks && stored.values.allSatisfy { $0.completed == 1 && $0.samples.last == [second, 1] })
        return after - before
    }

    /// The same, for one `POST /v1/progress` of `tasks` items (`TaskStore.progress(each:)`):
    /// the batch route's items are held and written with the batch, as single updates are.
    private static func statementsOfABatchRequest(updating tasks: Int, on fixture: EngineWriter, second: Int64) throws -> Int {
        let ids = (0..<tasks).map { "r\(second)-\($0)" }
        try register(ids, on: fixture)
        let items = ids.map { ProgressItem(id: $0, update: ProgressUpdate(increment: 1)) }
        let results = fixture.batch([
            { _, db in db.statementsRun },
            { store, db in
                let results = try store.progress(each: items, now: second * 1_000, in: db)
                #expect(results.allSatisfy { (try? $0.get()) != nil })
                return 0
            },
        ] as [@Sendable (TaskStore, Database) throws -> Int])
        let before = try results[0].get()
        let after = try fixture.write { _, db in db.statementsRun }
        let stored = try fixture.stored(ids)
        #expect(stored.count == tasks && stored.values.allSatisfy { $0.completed == 1 && $0.samples.last == [second, 1] })
        return after - before
    }

    /// On PostgreSQL a batch sends the same number of statements with 3 tasks or 40: each
    /// table's writes go as one statement (`PostgresSetWrites`), not one per task and sample.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aBatchSendsOneStatementPerTableWhateverItsNumberOfTasks() throws {
        let fixture = try EngineWriter(.postgres)
        let few = try Self.statementsOfABatch(updating: 3, on: fixture, second: 5)
        let many = try Self.statementsOfABatch(updating: 40, on: fixture, second: 6)
        #expect(few == many, "statements of a batch: \(few) with 3 tasks, \(many) with 40")
        // UPDATE tasks, INSERT INTO history, the change order moved (BEGIN and COMMIT are
        // not counted), then the next batch's read and lock of the change order.
        #expect(many <= 10, "\(many) statements")
        let fewItems = try Self.statementsOfABatchRequest(updating: 3, on: fixture, second: 7)
        let manyItems = try Self.statementsOfABatchRequest(updating: 40, on: fixture, second: 8)
        #expect(fewItems == manyItems && manyItems <= many + 2, "a batch request: \(fewItems) with 3 items, \(manyItems) with 40")
    }

    /// A batch mixing valid updates, one refused by the rules and one whose row the
    /// database refuses when the held writes are written (a trigger of the test's): the
    /// batch runs again with a savepoint per job, and exactly the valid updates are stored,
    /// with their history samples; text with the characters of array literals stored as sent.
    @Test(arguments: TestEngine.available)
    func aMixedBatchStoresExactlyItsValidUpdates(engine: TestEngine) throws {
        let fixture = try EngineWriter(engine)
        try Self.register(["ok1", "ok2", "refused", "poison"], on: fixture)
        _ = try fixture.write { store, db in
            try store.progress("refused", ProgressUpdate(completed: 10), now: 2_000, in: db)
        }
        switch engine {
        case .sqlite:
            try fixture.execute("""
                CREATE TRIGGER refuse_poison BEFORE UPDATE ON tasks WHEN new.id = 'poison' AND new.completed > 0
                BEGIN SELECT RAISE(ABORT, 'poison refused'); END
                """)
        case .postgres:
            try fixture.execute("""
                CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'poison refused'; END $$;
                CREATE TRIGGER refuse_poison BEFORE UPDATE ON tasks FOR EACH ROW
                WHEN (NEW.id = 'poison' AND NEW.completed > 0) EXECUTE FUNCTION refuse_poison();
                """)
        }
        let label = #"a "quoted", {braced} \back\slashed NULL label, é"#
        let jobs: [@Sendable (TaskStore, Database) throws -> Int64] = [
            { store, db in try store.progress("ok1", ProgressUpdate(increment: 1), now: 3_000, in: db).outcome.task.completed },
            { store, db in try store.progress("refused", ProgressUpdate(completed: 5), now: 3_000, in: db).outcome.task.completed },
            { store, db in try store.progress("poison", ProgressUpdate(increment: 7), now: 3_000, in: db).outcome.task.completed },
            { store, db in
                try store.progress("ok2", ProgressUpdate(increment: 2, label: label), now: 3_000, in: db).outcome.task.completed
            },
            { store, db in try store.progress("ok1", ProgressUpdate(increment: 1), now: 4_000, in: db).outcome.task.completed },
        ]
        let results = fixture.batch(jobs)
        #expect((try? results[0].get()) == 1)
        #expect(throws: TaskError.self) { try results[1].get() }
        #expect(throws: DatabaseError.self) { try results[2].get() }
        #expect((try? results[3].get()) == 2)
        #expect((try? results[4].get()) == 2)
        let stored = try fixture.stored(["ok1", "ok2", "refused", "poison"])
        #expect(stored["ok1"]?.completed == 2)
        #expect(stored["ok1"]?.samples == [[1, 0], [3, 1], [4, 2]])
        #expect(stored["ok2"]?.completed == 2)
        #expect(stored["ok2"]?.label == label)
        #expect(stored["ok2"]?.samples == [[1, 0], [3, 2]])
        #expect(stored["refused"]?.completed == 10)
        #expect(stored["refused"]?.samples == [[1, 0], [2, 10]])
        #expect(stored["poison"]?.completed == 0)
        #expect(stored["poison"]?.samples == [[1, 0]])
        // The cache was left exact: the next batch reads what is stored.
        #expect(try fixture.write { store, db in
            try store.progress("ok1", ProgressUpdate(increment: 1), now: 5_000, in: db).outcome.task.completed
        } == 3)
        #expect(try fixture.stored(["ok1"])["ok1"]?.samples == [[1, 0], [3, 1], [4, 2], [5, 3]])
    }

    /// A batch writes only the columns that differ for one of its tasks; when a value
    /// `task_counts` counts by changes without the state (an indeterminate task given a
    /// total becomes quantified), `state` and `stalled` are written too, so the counts
    /// follow, on both engines.
    @Test(arguments: TestEngine.available)
    func aBatchWritesTheColumnsItChangedAndTheCountsFollow(engine: TestEngine) throws {
        let fixture = try EngineWriter(engine)
        for id in ["plain", "given-a-total"] {
            _ = try fixture.write { store, db in try store.register(Registration(id: id, name: id), now: 1_000, in: db) }
        }
        let started: [@Sendable (TaskStore, Database) throws -> Int64] = ["plain", "given-a-total"].map { id in
            { store, db in try store.progress(id, ProgressUpdate(increment: 1), now: 2_000, in: db).outcome.task.completed }
        }
        #expect(fixture.batch(started).allSatisfy { (try? $0.get()) == 1 })
        let quantifiedOf = { (fixture: EngineWriter) in
            try fixture.read { db in
                try db.rows("SELECT quantified, sum(n) FROM task_counts WHERE state = 'running' GROUP BY quantified HAVING sum(n) > 0 ORDER BY quantified") {
                    "\($0.int(0)):\($0.int(1))"
                }
            }
        }
        #expect(try quantifiedOf(fixture) == ["0:2"])
        let jobs: [@Sendable (TaskStore, Database) throws -> Int64] = [
            { store, db in try store.progress("plain", ProgressUpdate(increment: 1), now: 3_000, in: db).outcome.task.completed },
            { store, db in
                try store.progress("given-a-total", ProgressUpdate(increment: 1, total: 10), now: 3_000, in: db).outcome.task.completed
            },
        ]
        #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) == 2 })
        #expect(try quantifiedOf(fixture) == ["0:1", "1:1"])
        #expect(try fixture.read { db in try db.rows("SELECT total FROM tasks WHERE id = 'given-a-total'") { $0.int(0) } } == [10])
        if engine == .postgres {
            #expect(PostgresSetWrites.columns(in: PostgresSetWrites.columnsToWrite(
                [(task: Self.record(completed: 2), previous: Self.record(completed: 1))])) == [.completed])
        }
    }

    /// The columns a batch writes are those that differ for any of its tasks, looked at
    /// task by task: the same as asking each column of every task, with `state` and
    /// `stalled` whenever a counted value differs.
    @Test func theColumnsWrittenAreThoseThatDifferForAnyTask() {
        let base = Self.record(completed: 1)
        var labelled = base
        labelled.label = "copying"
        var later = base
        later.completed = 5
        later.updatedAt = 2_000
        var failed = base
        failed.stallReason = .noProgress
        let batches: [[(task: TaskRecord, previous: TaskRecord)]] = [
            [(task: base, previous: base)],
            [(task: labelled, previous: base), (task: later, previous: base)],
            [(task: later, previous: base), (task: failed, previous: base), (task: base, previous: base)],
        ]
        for changed in batches {
            let counted = changed.contains { TaskRepository.countedValuesDiffer($0.task, $0.previous) }
            let expected = TaskRepository.MutableColumn.allCases.filter { column in
                (counted && (column == .state || column == .stalled)) || changed.contains { column.differs($0.task, $0.previous) }
            }
            #expect(PostgresSetWrites.columns(in: PostgresSetWrites.columnsToWrite(changed)) == expected)
        }
        #expect(PostgresSetWrites.columns(in: PostgresSetWrites.columnsToWrite(batches[2]))
                .contains { $0 == .stalled } == true)
    }

    /// A running task with `completed` done, as the set writes compare them.
    private static func record(completed: Int64) -> TaskRecord {
        TaskRecord(id: "shape", name: "Shape", completed: completed, createdAt: 1_000, updatedAt: 1_000, lastSignalAt: 1_000)
    }

    /// A task's samples thinned in the middle of a batch (its 2,001st second): what the
    /// batch holds is written first, so the count the task keeps is the count stored, and
    /// the samples stay bounded with their ends kept, on both engines.
    @Test(arguments: TestEngine.available)
    func samplesThinnedInTheMiddleOfABatchStayCounted(engine: TestEngine) throws {
        let fixture = try EngineWriter(engine)
        _ = try fixture.write { store, db in
            try store.register(Registration(id: "long", name: "long", total: 1_000_000), now: 1_000, in: db)
        }
        _ = try fixture.write { store, db in
            try store.register(Registration(id: "beside", name: "beside", total: 1_000_000), now: 1_000, in: db)
        }
        let perBatch = 150
        for first in stride(from: 2, through: History.maximumPoints + 200, by: perBatch) {
            var jobs: [@Sendable (TaskStore, Database) throws -> Int64] = []
            for second in Int64(first)..<Int64(first + perBatch) {
                jobs.append({ store, db in
                    try store.progress("long", ProgressUpdate(completed: second), now: second * 1_000, in: db).outcome.task.completed
                })
                jobs.append({ store, db in
                    try store.progress("beside", ProgressUpdate(completed: second), now: second * 1_000, in: db).outcome.task.completed
                })
            }
            #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) != nil })
        }
        try fixture.read { database in
            for id in ["long", "beside"] {
                let task = try #require(try TaskRepository.find(id, in: database))
                let stored = try #require(try database.scalar("SELECT count(*) FROM history WHERE task_id = ?", [.text(id)]))
                #expect(Int64(task.historyPoints) == stored, "\(id)")
                #expect(stored <= Int64(History.maximumPoints) && stored > Int64(History.maximumPoints / 4), "\(id): \(stored)")
                let ends = try database.rows("SELECT min(bucket), max(bucket) FROM history WHERE task_id = ?", [.text(id)]) {
                    [$0.int(0), $0.int(1)]
                }
                #expect(ends == [[1, task.completed]], "\(id): \(ends)")
            }
        }
    }

    /// A `COMMIT` that fails (a deferred check of the test's, run at the commit) loses the
    /// whole batch, as before: the pipeline reports the `COMMIT`'s own error, which is not
    /// taken for a held write's, and nothing of the batch is stored; the next batch works.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aFailedCommitLosesTheWholeBatch() throws {
        let fixture = try EngineWriter(.postgres)
        try Self.register(["a", "b"], on: fixture)
        try fixture.execute("""
            CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
            CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON tasks DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (NEW.completed = 99) EXECUTE FUNCTION refuse_at_commit();
            """)
        let results = fixture.batch([
            { store, db in try store.progress("a", ProgressUpdate(increment: 1), now: 2_000, in: db).outcome.task.completed },
            { store, db in try store.progress("b", ProgressUpdate(completed: 99), now: 2_000, in: db).outcome.task.completed },
        ] as [@Sendable (TaskStore, Database) throws -> Int64])
        for result in results {
            #expect(throws: DatabaseError.self) { try result.get() }
            if case .failure(let error as DatabaseError) = result {
                #expect(error.message.contains("refused at commit") && !error.pipelined, "\(error)")
            }
        }
        let stored = try fixture.stored(["a", "b"])
        #expect(stored["a"]?.completed == 0 && stored["b"]?.completed == 0)
        #expect(stored["a"]?.samples == [[1, 0]] && stored["b"]?.samples == [[1, 0]])
        #expect(try fixture.write { store, db in
            try store.progress("a", ProgressUpdate(increment: 1), now: 3_000, in: db).outcome.task.completed
        } == 1)
    }

    /// PostgreSQL's pipeline on one connection: statements sent without waiting, their
    /// answers read by the `COMMIT`; the first failure is the error thrown (flagged), the
    /// statements after it skipped, the transaction left to roll back; a statement whose
    /// preparation failed there is prepared again next time; the connection stays usable.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aPipelineReportsItsFirstFailureAtTheCommit() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE pipe (n bigint PRIMARY KEY)")
        try database.inTransaction(.immediate) {
            database.pipelineUntilCommit()
            for n in 1...3 { try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(Int64(n))]) }
        }
        #expect(try database.scalar("SELECT count(*) FROM pipe") == 3)
        #expect(database.statementsRun >= 4)

        var thrown: DatabaseError?
        do {
            try database.inTransaction(.immediate) {
                database.pipelineUntilCommit()
                try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(4)])
                try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(1)])  // a duplicate key
                try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(5)])
                try database.run("INSERT INTO no_such_table (n) VALUES (?)", [.integer(6)])
            }
        } catch let error as DatabaseError {
            thrown = error
        }
        #expect(thrown?.pipelined == true && thrown?.sqlState == "23505", "\(String(describing: thrown))")
        #expect(!database.isInsideTransaction, "rolled back")
        #expect(try database.scalar("SELECT count(*) FROM pipe") == 3)
        // The preparation skipped in the failed pipeline is made again, and its own error told.
        #expect(throws: DatabaseError.self) { try database.run("INSERT INTO no_such_table (n) VALUES (?)", [.integer(6)]) }
        try database.execute("CREATE TABLE no_such_table (n bigint)")
        try database.run("INSERT INTO no_such_table (n) VALUES (?)", [.integer(6)])
        // A query in the middle reads the answers first.
        try database.inTransaction(.immediate) {
            database.pipelineUntilCommit()
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(7)])
            #expect(try database.scalar("SELECT count(*) FROM pipe") == 4)
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(8)])
        }
        #expect(try database.scalar("SELECT count(*) FROM pipe") == 5)

        // The connection lost in the middle (the server ends the session): the COMMIT
        // reports it as unavailable, nothing is stored, and the next transaction connects again.
        let pid = try #require(try database.scalar("SELECT pg_backend_pid()"))
        var lost: DatabaseError?
        do {
            try database.inTransaction(.immediate) {
                database.pipelineUntilCommit()
                try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(100)])
                try server.psql("SELECT pg_terminate_backend(\(pid))")
                try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(101)])
            }
        } catch let error as DatabaseError {
            lost = error
        }
        #expect(lost?.isUnavailable == true, "\(String(describing: lost))")
        try database.inTransaction(.immediate) {
            database.pipelineUntilCommit()
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(102)])
        }
        #expect(try database.scalar("SELECT count(*) FROM pipe WHERE n >= 100") == 1)
        #expect(try database.scalar("SELECT count(*) FROM pipe WHERE n = 102") == 1)
    }

    /// A connection lost inside a transaction is not made again inside it: a read whose
    /// error was caught, then a write, must not run on a new connection outside the
    /// transaction (committing alone) and let its `COMMIT` pass as if nothing happened.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aConnectionLostInsideATransactionIsNotMadeAgainInIt() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE lost (n bigint PRIMARY KEY)")
        for pipelined in [false, true] {
            let pid = try #require(try database.scalar("SELECT pg_backend_pid()"))
            #expect(throws: DatabaseError.self) {
                try database.inTransaction(.immediate) {
                    if pipelined { database.pipelineUntilCommit() }
                    try database.run("INSERT INTO lost (n) VALUES (?)", [.integer(1)])
                    try server.psql("SELECT pg_terminate_backend(\(pid))")
                    _ = try? database.scalar("SELECT 1")
                    try database.run("INSERT INTO lost (n) VALUES (?)", [.integer(2)])
                }
            }
            // A statement outside a transaction connects again, even right after a lost
            // pipelined one; nothing of the lost transaction was stored.
            try database.run("INSERT INTO lost (n) VALUES (?)", [.integer(pipelined ? 4 : 3)])
            #expect(try database.scalar("SELECT count(*) FROM lost WHERE n < 3") == 0, "pipelined: \(pipelined)")
        }
    }

    /// A job that loses the connection after changing rows (the server ends the writer's
    /// session) fails its whole batch as unavailable, at once: the batch is not run again
    /// with a savepoint per job on a new connection (every job waiting for the database
    /// once more), nothing of it is stored, and the next batch connects again.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aJobThatLosesTheConnectionFailsItsBatchAsUnavailable() throws {
        let fixture = try EngineWriter(.postgres)
        try Self.register(["a", "b"], on: fixture)
        let runs = Locked(0)
        let results = fixture.batch([
            { store, db in try store.progress("a", ProgressUpdate(increment: 1), now: 2_000, in: db).outcome.task.completed },
            { [fixture] store, db in
                let first = runs.withLock { runs in
                    runs += 1
                    return runs == 1
                }
                let completed = try store.progress("b", ProgressUpdate(increment: 1), now: 2_000, in: db).outcome.task.completed
                if first {
                    let pid = try #require(try db.scalar("SELECT pg_backend_pid()"))
                    try fixture.execute("SELECT pg_terminate_backend(\(pid), 10000)")
                }
                _ = try db.scalar("SELECT 1")
                return completed
            },
        ] as [@Sendable (TaskStore, Database) throws -> Int64])
        #expect(runs.withLock { $0 } == 1, "the batch was run again")
        for result in results {
            guard case .failure(let error as DatabaseError) = result, error.isUnavailable else {
                Issue.record("not failed as unavailable: \(result)")
                continue
            }
        }
        let stored = try fixture.stored(["a", "b"])
        #expect(stored["a"]?.completed == 0 && stored["b"]?.completed == 0)
        #expect(try fixture.write { store, db in
            try store.progress("a", ProgressUpdate(increment: 1), now: 3_000, in: db).outcome.task.completed
        } == 1)
    }

    /// A `COMMIT` the server answered as done is a commit, even when the connection is lost
    /// right after that answer, before the rest of it (a proxy cuts it there): reported
    /// committed, sent in a pipeline or not, its rows stored, and the next statement
    /// connects again. Through the writer, the batch's jobs succeed, and the next batch
    /// continues from what they stored.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aCommitAnsweredBeforeTheConnectionIsLostIsReportedCommitted() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let proxy = try CommitCuttingProxy(for: server)
        defer { proxy.close() }
        let database = try Database(path: proxy.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE cut (n bigint PRIMARY KEY)")
        for (n, pipelined) in [(Int64(1), false), (2, true)] {
            proxy.cut(.afterCommitAnswer)
            #expect(throws: Never.self, "pipelined: \(pipelined)") {
                try database.inTransaction(.immediate) {
                    if pipelined { database.pipelineUntilCommit() }
                    try database.run("INSERT INTO cut (n) VALUES (?)", [.integer(n)])
                }
            }
            #expect(proxy.cuts == Int(n), "pipelined: \(pipelined)")
            #expect(try database.scalar("SELECT count(*) FROM cut") == n, "pipelined: \(pipelined)")
        }

        let fixture = try EngineWriter(.postgres, cuttingCommits: true)
        try Self.register(["a", "b"], on: fixture)
        let results = fixture.batch([
            { [fixture] store, db in
                // Armed inside the batch: the one before it (`batch`'s own) commits uncut.
                fixture.proxy?.cut(.afterCommitAnswer)
                return try store.progress("a", ProgressUpdate(increment: 1), now: 2_000, in: db).outcome.task.completed
            },
            { store, db in try store.progress("b", ProgressUpdate(increment: 2), now: 2_000, in: db).outcome.task.completed },
        ] as [@Sendable (TaskStore, Database) throws -> Int64])
        #expect(fixture.proxy?.cuts == 1)
        #expect(results.map { try? $0.get() } == [1, 2])
        #expect(try fixture.write { store, db in
            try store.progress("a", ProgressUpdate(increment: 1), now: 3_000, in: db).outcome.task.completed
        } == 2)
        let stored = try fixture.stored(["a", "b"])
        #expect(stored["a"]?.completed == 2 && stored["b"]?.completed == 2)
    }

    /// A `COMMIT` whose answer is lost with the connection (a proxy drops it, or the
    /// `COMMIT` itself, and cuts): the connection asks the server, on a new one, whether the
    /// transaction committed (`txid_status` of the id it was told). When it had, the commit
    /// is reported done, sent in a pipeline or not, and through the writer (whose lock
    /// query tells the id) the batch's jobs succeed; when the `COMMIT` never reached the
    /// server, the batch fails as unavailable and nothing of it is stored.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aCommitWhoseAnswerIsLostIsAskedAbout() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let proxy = try CommitCuttingProxy(for: server)
        defer { proxy.close() }
        let database = try Database(path: proxy.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE cut (n bigint PRIMARY KEY)")
        for (n, pipelined) in [(Int64(1), false), (2, true)] {
            proxy.cut(.beforeCommitAnswer)
            #expect(throws: Never.self, "pipelined: \(pipelined)") {
                try database.inTransaction(.immediate) {
                    database.postgres.noteTransactionID(try #require(try database.scalar("SELECT txid_current()")))
                    if pipelined { database.pipelineUntilCommit() }
                    try database.run("INSERT INTO cut (n) VALUES (?)", [.integer(n)])
                }
            }
            #expect(proxy.cuts == Int(n), "pipelined: \(pipelined)")
            #expect(try database.scalar("SELECT count(*) FROM cut") == n, "pipelined: \(pipelined)")
        }

        let fixture = try EngineWriter(.postgres, cuttingCommits: true)
        try Self.register(["a"], on: fixture)
        for (second, cut) in [(Int64(2), CommitCuttingProxy.Cut.beforeCommitAnswer), (3, .beforeCommitRequest)] {
            let result = fixture.batch([
                { [fixture] store, db in
                    fixture.proxy?.cut(cut)
                    return try store.progress("a", ProgressUpdate(completed: second), now: second * 1_000, in: db)
                        .outcome.task.completed
                },
            ] as [@Sendable (TaskStore, Database) throws -> Int64])[0]
            switch cut {
            case .beforeCommitRequest:
                guard case .failure(let error as DatabaseError) = result, error.isUnavailable else {
                    Issue.record("not failed as unavailable: \(result)")
                    continue
                }
            default:
                #expect((try? result.get()) == second, "\(cut): \(result)")
            }
        }
        #expect(fixture.proxy?.cuts == 2)
        #expect(try fixture.stored(["a"])["a"]?.completed == 2)
        #expect(try fixture.write { store, db in
            try store.progress("a", ProgressUpdate(increment: 1), now: 4_000, in: db).outcome.task.completed
        } == 3)
    }

    /// A transaction left failed by a statement whose error was caught and ignored is
    /// rolled back by its `COMMIT`, which PostgreSQL answers without an error: the commit
    /// throws rather than report stored what was not.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func theCommitOfAFailedTransactionThrows() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE kept (n bigint PRIMARY KEY)")
        let thrown = #expect(throws: DatabaseError.self) {
            try database.inTransaction(.immediate) {
                try database.run("INSERT INTO kept (n) VALUES (?)", [.integer(1)])
                _ = try? database.scalar("SELECT 1 / 0")
            }
        }
        #expect(thrown?.isUnavailable == false && thrown?.pipelined == false, "\(String(describing: thrown))")
        #expect(!database.isInsideTransaction)
        #expect(try database.scalar("SELECT count(*) FROM kept") == 0)
    }

    /// A savepoint inside a pipelined transaction: its statements read the pipeline's answers
    /// first, as a query does, and the pipelining goes on after them; a statement that fails
    /// inside the savepoint, told at its release, is rolled back alone, and the rest commits.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aSavepointInsideAPipelineKeepsItGoing() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        try database.execute("CREATE TABLE pipe (n bigint PRIMARY KEY)")
        try database.inTransaction(.immediate) {
            database.pipelineUntilCommit()
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(1)])
            try database.inSavepoint { try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(2)]) }
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(3)])
            #expect(database.postgres.isPipelining)
            let duplicate = #expect(throws: DatabaseError.self) {
                try database.inSavepoint { try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(1)]) }
            }
            #expect(duplicate?.sqlState == "23505", "\(String(describing: duplicate))")
            #expect(database.isInsideTransaction && !database.transactionFailed)
            try database.run("INSERT INTO pipe (n) VALUES (?)", [.integer(4)])
            #expect(database.postgres.isPipelining)
        }
        #expect(try database.scalar("SELECT count(*) FROM pipe") == 4)
    }

    /// Array literals: every element quoted or bare as PostgreSQL reads it.
    @Test func arrayLiteralsQuoteTextAndLeaveNumbersAndNullBare() {
        var literal = ArrayLiteral()
        #expect(literal.finish() == "{}")
        for value: SQLValue in [.text(#"a"b\c,{}"#), .null, .integer(-3), .real(0.5), .real(.infinity), .real(.nan), .text(""),
                                .text("NULL")] {
            literal.append(value)
        }
        #expect(literal.finish() == #"{"a\"b\\c,{}",NULL,-3,0.5,Infinity,NaN,"","NULL"}"#)
    }

    /// Whole numbers go as their digits, a real among them (`3`, which PostgreSQL reads as the
    /// float8 `3.0` is), except -0.0, whose sign only the floating-point text keeps; text
    /// goes byte for byte, any character outside ASCII included.
    @Test func arrayLiteralsWriteWholeNumbersAsDigitsAndTextAsItsBytes() {
        var literal = ArrayLiteral(reservingRoomFor: 2)
        for value: SQLValue in [.integer(0), .integer(.max), .integer(.min), .real(3), .real(-2), .real(0), .real(-0.0),
                                .real(1e300), .real(0.1), .text("é\u{1F600}\"\\ü"), .text("ascii only")] {
            literal.append(value)
        }
        #expect(literal.finish() == #"{0,9223372036854775807,-9223372036854775808,3,-2,0,-0.0,1e+300,0.1,"é😀\"\\ü","ascii only"}"#)
    }

    /// What PostgreSQL reads from an array literal is every value as it was: each kind of
    /// value, and the bounds of the numbers.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func arrayLiteralsReachPostgreSQLAsTheirValues() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        let integers: [Int64] = [0, 7, -7, .max, .min, 1_764_000_000_000]
        let reals: [Double] = [3, -2, 0, -0.0, 0.1, 1e300, -1e-300, 9_007_199_254_740_992, 9.223372036854775807e18,
                               .greatestFiniteMagnitude, .infinity]
        let texts = ["plain", "é😀", #"a"b\c"#, "", "NULL", "{x,y}"]
        var integerLiteral = ArrayLiteral(), realLiteral = ArrayLiteral(), textLiteral = ArrayLiteral()
        integers.forEach { integerLiteral.append(.integer($0)) }
        reals.forEach { realLiteral.append(.real($0)) }
        texts.forEach { textLiteral.append(.text($0)) }
        #expect(try database.rows("SELECT unnest(?::bigint[])", [.text(integerLiteral.finish())]) { $0.int(0) } == integers)
        let readReals = try database.rows("SELECT unnest(?::float8[])", [.text(realLiteral.finish())]) { $0.double(0) }
        #expect(readReals.map(\.bitPattern) == reals.map(\.bitPattern), "\(readReals)")
        #expect(try database.rows("SELECT unnest(?::text[])", [.text(textLiteral.finish())]) { $0.text(0) } == texts)
    }
}
