import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// On PostgreSQL a task's progress update is a heap-only tuple (HOT): the new version of
/// the row is written beside the old one and no index of `tasks` is touched, because no
/// indexed column changes — the change number the feed reads and the stall deadline the
/// sweeper reads are indexed apart, in `task_changes` and `task_deadlines` (migration
/// 0012), one row per task, kept by the writer's set update and, for any other statement,
/// by triggers.
@Suite(.serialized) struct HeapOnlyUpdatesTests {
    private static let ids = (0..<20).map { "copy-\($0)" }

    /// 20 tasks, then six rounds of updates of each, a second apart (each moves the
    /// stored stall deadline: `StallRule.deadlineToStore`): five as the writer batches
    /// single updates, one through the batch route.
    private static func registerAndUpdate(_ fixture: EngineWriter) throws {
        for id in ids {
            _ = try fixture.write { store, database in
                try store.register(Registration(id: id, name: "Copy " + id, total: 1_000), now: 1_000, in: database)
            }
        }
        for round in 0..<5 {
            let jobs: [@Sendable (TaskStore, Database) throws -> Bool] = ids.map { id in
                { store, database in
                    _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000 + Int64(round) * 1_000, in: database)
                    return true
                }
            }
            #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) == true })
        }
        _ = try fixture.write { store, database in
            try store.progress(each: ids.map { ProgressItem(id: $0, update: ProgressUpdate(increment: 1)) },
                               now: 7_000, in: database)
        }
    }

    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func progressUpdatesWriteNoIndexOfTasks() throws {
        let fixture = try EngineWriter(.postgres)
        // Room on each page for every version these updates write, so that none waits for
        // the pruning of dead versions, which another database's transactions on the same
        // server can hold back: what is measured is that no update changes an indexed column.
        #expect(try fixture.read { database in
            try database.rows("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'tasks'") {
                $0.optionalText(0)
            }.first ?? nil
        } == "fillfactor=50")
        try fixture.execute("ALTER TABLE tasks SET (autovacuum_enabled = off, fillfactor = 10)")
        let start = try fixture.taskRowsWritten()
        try Self.registerAndUpdate(fixture)
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: start + Int64(7 * Self.ids.count)))
        let updates = try fixture.taskUpdates()
        #expect(updates.all >= Int64(6 * Self.ids.count))
        #expect(updates.heapOnly == updates.all, "\(updates.heapOnly) of \(updates.all) updates heap-only")

        // The feed reads them all: each task once, at its latest change, in number order.
        let events = try fixture.read { database in try ChangeFeed.changes(after: 0, in: database) }
        #expect(events.map(\.taskID).sorted() == Self.ids.sorted())
        #expect(events.map(\.changeNumber) == events.map(\.changeNumber).sorted())
        #expect(events.allSatisfy { $0.data.contains(#""completed":6,"#) })
        let numbers = try fixture.read { database in
            try database.rows("SELECT count(*), count(DISTINCT task) FROM task_changes") { ($0.int(0), $0.int(1)) }.first
        }
        #expect(numbers?.0 == Int64(Self.ids.count) && numbers?.1 == Int64(Self.ids.count), "one row per task")
    }

    /// Whoever writes `tasks` — here a hand, with plain SQL — keeps the tables apart: a
    /// change of value moves the task's row there, a deletion removes it, an insertion adds one.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func everyWriteOfTasksKeepsTheNumbers() throws {
        let fixture = try EngineWriter(.postgres)
        try Self.registerAndUpdate(fixture)
        try fixture.execute("""
            UPDATE tasks SET change_seq = change_seq + 1000000 WHERE id IN ('copy-1', 'copy-2');
            UPDATE tasks SET message = 'quiet' WHERE id = 'copy-3';
            UPDATE tasks SET stall_deadline = NULL WHERE id = 'copy-5';
            UPDATE tasks SET stall_deadline = stall_deadline + 5, change_seq = change_seq + 3000000 WHERE id = 'copy-6';
            DELETE FROM tasks WHERE id = 'copy-4';
            INSERT INTO tasks (id, name, state, stall_timeout_ms, created_at, updated_at, last_signal_at, definition,
                               is_root, change_seq)
            VALUES ('by-hand', 'By hand', 'running', 30000, 1000, 1000, 1000, '{}', 1,
                    (SELECT max(change_seq) + 2000000 FROM tasks));
            """)
        let stored = try fixture.read { database in
            try database.rows("SELECT change_seq, seq FROM tasks ORDER BY seq") { "\($0.int(0)):\($0.int(1))" }
        }
        let kept = try fixture.read { database in
            try database.rows("SELECT number, task FROM task_changes ORDER BY task") { "\($0.int(0)):\($0.int(1))" }
        }
        #expect(kept == stored)
        let storedDeadlines = try fixture.read { database in
            try database.rows("SELECT stall_deadline, seq FROM tasks WHERE stall_deadline IS NOT NULL ORDER BY seq") {
                "\($0.int(0)):\($0.int(1))"
            }
        }
        let keptDeadlines = try fixture.read { database in
            try database.rows("SELECT due, task FROM task_deadlines ORDER BY task") { "\($0.int(0)):\($0.int(1))" }
        }
        #expect(keptDeadlines == storedDeadlines && storedDeadlines.count == Self.ids.count - 2)
        let events = try fixture.read { database in try ChangeFeed.changes(after: 0, in: database) }
        #expect(events.suffix(4).map(\.taskID) == ["copy-1", "copy-2", "copy-6", "by-hand"])
        let due = try fixture.read { database in try TaskRepository.dueForStallCheck(at: .max, limit: 100, in: database) }
        #expect(due.count == Self.ids.count - 2 && due.last?.id == "copy-6")
    }

    /// The writer's set update keeps the tables apart itself, and lets the trigger that
    /// keeps them for other statements pass for itself only: here the trigger's function
    /// refuses every update, so the writer's batches pass only if it is not run for them,
    /// and a hand's update after them is still refused.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func theWritersSetUpdateKeepsTheTablesApartItself() throws {
        let fixture = try EngineWriter(.postgres)
        try fixture.execute("""
            CREATE OR REPLACE FUNCTION tasks_apart_follow() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'UPDATE' THEN RAISE EXCEPTION 'the trigger ran for an update'; END IF;
                IF TG_OP = 'INSERT' THEN
                    INSERT INTO task_changes (number, task) SELECT change_seq, seq FROM new_tasks;
                    INSERT INTO task_deadlines (due, task)
                    SELECT stall_deadline, seq FROM new_tasks WHERE stall_deadline IS NOT NULL;
                END IF;
                RETURN NULL;
            END;
            $$
            """)
        try Self.registerAndUpdate(fixture)
        let stored = try fixture.read { database in
            try database.rows("SELECT change_seq, seq FROM tasks ORDER BY seq") { "\($0.int(0)):\($0.int(1))" }
        }
        let kept = try fixture.read { database in
            try database.rows("SELECT number, task FROM task_changes ORDER BY task") { "\($0.int(0)):\($0.int(1))" }
        }
        #expect(kept == stored && stored.count == Self.ids.count)
        let storedDeadlines = try fixture.read { database in
            try database.rows("SELECT stall_deadline, seq FROM tasks WHERE stall_deadline IS NOT NULL ORDER BY seq") {
                "\($0.int(0)):\($0.int(1))"
            }
        }
        let keptDeadlines = try fixture.read { database in
            try database.rows("SELECT due, task FROM task_deadlines ORDER BY task") { "\($0.int(0)):\($0.int(1))" }
        }
        #expect(keptDeadlines == storedDeadlines && storedDeadlines.count == Self.ids.count)
        // The feed and the sweep find every task at its latest values.
        let events = try fixture.read { database in try ChangeFeed.changes(after: 0, in: database) }
        #expect(events.map(\.taskID).sorted() == Self.ids.sorted())
        #expect(events.allSatisfy { $0.data.contains(#""completed":6,"#) })
        let due = try fixture.read { database in try TaskRepository.dueForStallCheck(at: .max, limit: 100, in: database) }
        #expect(due.count == Self.ids.count)
        #expect(throws: (any Error).self) { try fixture.execute("UPDATE tasks SET message = 'by hand' WHERE id = 'copy-1'") }
    }

    /// A database whose tasks were stored before migration 0012 finds them in the feed and,
    /// when due, in the sweep.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func tasksStoredBeforeTheMigrationAreInTheFeed() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Database(path: server.uri)
        defer { database.close() }
        try Migrator(EmbeddedMigrations.postgres.filter { $0.version < 12 }).migrate(database)
        for (number, id, deadline) in [(7, "early", "31000"), (5, "earlier", "NULL"), (9, "latest", "41000")] {
            try database.execute("""
                INSERT INTO tasks (id, name, state, stall_timeout_ms, created_at, updated_at, last_signal_at, definition,
                                   is_root, change_seq, stall_deadline)
                VALUES ('\(id)', 'Early', 'running', 30000, 1000, 1000, 1000, '{}', 1, \(number), \(deadline))
                """)
        }
        try Migrator(EmbeddedMigrations.postgres).migrate(database)
        #expect(try ChangeFeed.changes(after: 0, in: database).map(\.taskID) == ["earlier", "early", "latest"])
        #expect(try ChangeFeed.changes(after: 5, in: database).map(\.taskID) == ["early", "latest"])
        #expect(try ChangeFeed.timeNoLaterThan(change: 8, in: database) == 1000)
        #expect(try TaskRepository.dueForStallCheck(at: 35_000, limit: 10, in: database).map(\.id) == ["early"])
        #expect(try TaskRepository.dueForStallCheck(at: 50_000, limit: 10, in: database).map(\.id) == ["early", "latest"])
    }
}
