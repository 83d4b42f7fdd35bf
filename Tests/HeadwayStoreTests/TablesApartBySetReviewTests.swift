import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// Attacks on the writer's set update keeping `task_changes` and `task_deadlines` itself
/// (migration 0013, `PostgresSetWrites`): whatever else writes `tasks` meanwhile, and however
/// large `tasks` grows after the statement is prepared, the tables apart agree with `tasks`
/// and the statement reads only the rows it writes.
@Suite(.serialized) struct TablesApartBySetReviewTests {
    /// `(stall_deadline, seq)` of every task with a deadline, and the rows of
    /// `task_deadlines`, as `due:task` texts.
    private static func deadlines(_ fixture: EngineWriter) throws -> (stored: [String], kept: [String]) {
        let stored = try fixture.read { database in
            try database.rows("SELECT stall_deadline, seq FROM tasks WHERE stall_deadline IS NOT NULL ORDER BY seq") {
                "\($0.int(0)):\($0.int(1))"
            }
        }
        let kept = try fixture.read { database in
            try database.rows("SELECT due, task FROM task_deadlines ORDER BY task, due") { "\($0.int(0)):\($0.int(1))" }
        }
        return (stored, kept)
    }

    /// Waits (bounded) until a session of the test's database waits for a row another
    /// transaction holds.
    private static func waitForRowLockWait(_ fixture: EngineWriter) throws -> Bool {
        for _ in 0..<2_000 {
            let waiting = try fixture.read { database in
                try database.scalar("""
                    SELECT count(*) FROM pg_stat_activity
                    WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid' AND datname = current_database()
                    """)
            }
            if waiting ?? 0 > 0 { return true }
            usleep(5_000)
        }
        return false
    }

    /// A statement the writer does not order (a hand's, as migrations 0012 and 0013 name
    /// it) moves a task's stall deadline while a batch's set update waits for the task's
    /// row. The set update goes on with the row as the hand committed it (READ COMMITTED),
    /// but reads the "old" deadline it keeps `task_deadlines` by from its statement's
    /// snapshot, before the hand's commit: the task's deadline is stored in `tasks` with no
    /// row in `task_deadlines`, and the sweep never finds it. The trigger it replaces read
    /// the row's old version from the transition table, the one the update really replaced.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aHandsWriteDuringTheSetUpdateLeavesTheTablesApartRight() throws {
        let fixture = try EngineWriter(.postgres)
        for id in ["quiet", "moving"] {
            _ = try fixture.write { store, db in try store.register(Registration(id: id, name: id), now: 1_000, in: db) }
        }
        let started: [@Sendable (TaskStore, Database) throws -> Bool] = ["quiet", "moving"].map { id in
            { store, db in _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000, in: db); return true }
        }
        #expect(fixture.batch(started).allSatisfy { (try? $0.get()) == true })
        let before = try Self.deadlines(fixture)
        #expect(before.stored == before.kept && before.stored.count == 2)

        // The hand moves `quiet`'s deadline and holds its row until the batch waits for it.
        let hand = try Database(path: fixture.location)
        defer { hand.close() }
        try hand.execute("BEGIN; UPDATE tasks SET stall_deadline = NULL WHERE id = 'quiet'")
        // `quiet` reports again within the same second (its stored deadline stays), `moving`
        // two seconds later (its deadline moves, so the batch writes `stall_deadline`).
        let jobs: [@Sendable (TaskStore, Database) throws -> Bool] = [
            { store, db in _ = try store.progress("quiet", ProgressUpdate(increment: 1), now: 2_100, in: db); return true },
            { store, db in _ = try store.progress("moving", ProgressUpdate(increment: 1), now: 4_000, in: db); return true },
        ]
        let results = Locked<[Result<Bool, any Error>]?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            results.withLock { $0 = fixture.batch(jobs) }
            done.signal()
        }
        let waited = try Self.waitForRowLockWait(fixture)
        try hand.execute("COMMIT")
        #expect(waited, "the batch's update never waited for the hand's row")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(results.withLock { $0 }?.allSatisfy { (try? $0.get()) == true } == true)

        let after = try Self.deadlines(fixture)
        #expect(after.kept == after.stored, "task_deadlines \(after.kept), tasks \(after.stored)")
        let due = try fixture.read { db in try TaskRepository.dueForStallCheck(at: .max, limit: 10, in: db) }
        let withDeadline = try fixture.read { db in
            try db.rows("SELECT id FROM tasks WHERE stall_deadline IS NOT NULL ORDER BY id") { $0.text(0) }
        }
        #expect(due.map(\.id).sorted() == withDeadline, "the sweep finds every task with a stored deadline")
    }

    /// The set update's statement is prepared while the tables are small (a daemon started
    /// on a new database), and with batches of more than the 10 rows a generic plan expects
    /// of `unnest`, PostgreSQL keeps its generic plan after the fifth; then the tables grow
    /// by 5,000 rows before anything analyzes them again (autovacuum's next round; here
    /// the tables are analyzed once, small, and autovacuum is off, so that the window is not
    /// a race). A batch of 30 tasks must still read each table
    /// through its keys. The plan kept scans and hashes `task_changes` and `task_deadlines`
    /// whole, in every batch, holding the writers' order: the trigger it replaces leaves the
    /// planner no other choice than keys (`SET enable_seqscan = off …` on
    /// `tasks_apart_follow`). It also scans `tasks` whole, as main's `UPDATE tasks … FROM
    /// unnest(…)` does (its plan kept the same way).
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func theSetUpdateReadsTasksByKeyAfterTasksGrew() throws {
        let fixture = try EngineWriter(.postgres)
        for table in ["tasks", "task_changes", "task_deadlines"] {
            try fixture.execute("ALTER TABLE \(table) SET (autovacuum_enabled = off)")
        }
        let ids = (1...30).map { "grow-\($0)" }
        for id in ids {
            _ = try fixture.write { store, db in try store.register(Registration(id: id, name: id), now: 1_000, in: db) }
        }
        // As autovacuum soon does for tables whose every row each batch moves.
        try fixture.execute("ANALYZE tasks, task_changes, task_deadlines")
        // Eight batches of the same set of columns: past the fifth, PostgreSQL keeps a generic plan.
        for round in 0..<8 {
            let jobs: [@Sendable (TaskStore, Database) throws -> Bool] = ids.map { id in
                { store, db in
                    _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000 + Int64(round) * 2_000, in: db)
                    return true
                }
            }
            #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) == true })
        }
        try fixture.execute("""
            INSERT INTO tasks (id, name, state, stall_timeout_ms, created_at, updated_at, last_signal_at, definition, is_root,
                               stall_deadline)
            SELECT 'other-' || n, 'Other', 'running', 30000, 1000, 1000, 1000, '{}', 1, 90000000 + n
            FROM generate_series(1, 5000) AS n
            """)
        let written = try fixture.taskRowsWritten()
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: written))
        let scannedBefore = try Self.rowsScanned(fixture)
        let jobs: [@Sendable (TaskStore, Database) throws -> Bool] = ids.map { id in
            { store, db in _ = try store.progress(id, ProgressUpdate(increment: 1), now: 20_000, in: db); return true }
        }
        #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) == true })
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: written + Int64(ids.count)))
        let scannedAfter = try Self.rowsScanned(fixture)
        // The tables apart first (new in 0013), then `tasks` (as on main).
        for table in ["task_changes", "task_deadlines", "tasks"] {
            let scanned = scannedAfter[table, default: 0] - scannedBefore[table, default: 0]
            #expect(scanned < 1_000, "one batch of 30 tasks read \(scanned) rows of \(table) by sequential scans")
        }
    }

    /// Rows of `tasks` and of the tables apart read by sequential scans, by every session so far.
    private static func rowsScanned(_ fixture: EngineWriter) throws -> [String: Int64] {
        try fixture.read { db in
            try db.rows("""
                SELECT relname, seq_tup_read FROM pg_stat_user_tables
                WHERE relname IN ('tasks', 'task_changes', 'task_deadlines')
                """) { ($0.text(0), $0.int(1)) }
        }.reduce(into: [:]) { $0[$1.0] = $1.1 }
    }

    /// A held write that PostgreSQL refuses (here a trigger of the test's refuses one task's
    /// update) fails the batch's pipeline after the setting was turned on: the batch runs
    /// again with a savepoint per job and per-row updates, and the setting must not let
    /// those pass the trigger that keeps the tables apart.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aRefusedSetUpdateLeavesTheTriggerOn() throws {
        let fixture = try EngineWriter(.postgres)
        let ids = ["fine-1", "refused", "fine-2"]
        for id in ids {
            _ = try fixture.write { store, db in try store.register(Registration(id: id, name: id), now: 1_000, in: db) }
        }
        try fixture.execute("""
            CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.id = 'refused' AND NEW.completed >= 2 THEN RAISE EXCEPTION 'refused by the test'; END IF;
                RETURN NEW;
            END;
            $$;
            CREATE TRIGGER refuse_one BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse_one();
            """)
        for (round, now) in [(1, Int64(2_000)), (2, Int64(5_000))] {
            let jobs: [@Sendable (TaskStore, Database) throws -> Int64] = ids.map { id in
                { store, db in try store.progress(id, ProgressUpdate(increment: 1), now: now, in: db).outcome.task.completed }
            }
            let results = fixture.batch(jobs)
            #expect((try? results[0].get()) == Int64(round) && (try? results[2].get()) == Int64(round))
        }
        let stored = try fixture.read { db in
            try db.rows("SELECT change_seq, seq FROM tasks ORDER BY seq") { "\($0.int(0)):\($0.int(1))" }
        }
        let kept = try fixture.read { db in
            try db.rows("SELECT number, task FROM task_changes ORDER BY task, number") { "\($0.int(0)):\($0.int(1))" }
        }
        #expect(kept == stored)
        let deadlines = try Self.deadlines(fixture)
        #expect(deadlines.kept == deadlines.stored)
    }
}
