import Foundation
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// The tables apart (`task_changes`, `task_deadlines`, migration 0012) must keep every
/// read and write an index range whatever the sizes involved: the triggers' statements
/// for a one-row update after a large one, the reads with a `LIMIT` (the sweep's page, a
/// page of another daemon's changes, `timeNoLaterThan`) when many rows qualify, and a
/// catch-up that names tasks.
@Suite(.serialized) struct HeapOnlyReadsTests {
    static let taskCount = 5_000

    /// A migrated database holding `taskCount` running tasks, task `n` (seq `n`) at change
    /// number `n` with its stall deadline at `100_000 + n`, its statistics up to date.
    private static func database(_ server: TestPostgresDatabase) throws -> Database {
        let database = try Database(path: server.uri)
        try Migrator(EmbeddedMigrations.postgres).migrate(database)
        try database.execute("""
            INSERT INTO tasks (id, name, state, stall_timeout_ms, created_at, updated_at, last_signal_at, definition,
                               is_root, change_seq, change_kind, stall_deadline)
            SELECT 'task-' || g, 'Task ' || g, 'running', 30000, 1000, 1000 + g, 1000, '{}', 1, g, 'task.updated', 100000 + g
            FROM generate_series(1, \(taskCount)) AS g;
            ANALYZE tasks, task_changes, task_deadlines;
            """)
        return database
    }

    /// Sequential scans of `table` in this session's open transaction (no parallel workers,
    /// whose scans another process counts).
    private static func sequentialScans(of table: String, in database: Database) throws -> Int64 {
        try database.scalar("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = ?", [.text(table)]) ?? 0
    }

    /// Rows of `tasks` fetched through an index in this session's open transaction.
    private static func taskRowsFetched(in database: Database) throws -> Int64 {
        try database.scalar("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'tasks'") ?? 0
    }

    /// plpgsql prepares each statement of `tasks_apart_follow` once per session, with the
    /// transition tables' sizes of its first call: a first statement of thousands of rows
    /// (a writer batch of a few large batch requests) must not leave every later one-row
    /// update scanning `task_changes` and `task_deadlines` whole.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func oneRowUpdatesAfterALargeOneUseTheIndexesApart() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Self.database(server)
        defer { database.close() }
        try database.execute("UPDATE tasks SET change_seq = change_seq + 100000, stall_deadline = stall_deadline + 1")
        try database.inTransaction {
            try database.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            let before = try ["task_changes", "task_deadlines"].map { try Self.sequentialScans(of: $0, in: database) }
            for seq in 1...20 {
                try database.run(
                    "UPDATE tasks SET change_seq = change_seq + 200000, stall_deadline = stall_deadline + 1 WHERE seq = ?",
                    [.integer(Int64(seq))])
            }
            let after = try ["task_changes", "task_deadlines"].map { try Self.sequentialScans(of: $0, in: database) }
            #expect(after == before, "sequential scans of task_changes, task_deadlines: \(before) then \(after)")
        }
        let kept = try database.scalar("SELECT count(*) FROM task_changes JOIN tasks ON seq = task AND change_seq = number")
        #expect(kept == Int64(Self.taskCount))
    }

    /// Reads with a `LIMIT` through the tables apart stop after their page when many rows
    /// qualify (5,000 tasks past their stall deadline, a daemon 5,000 changes behind
    /// another), as they did through `tasks`' own indexes: no scan of `tasks`.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func pagedReadsThroughTheTablesApartReadOnlyTheirPage() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Self.database(server)
        defer { database.close() }
        try database.inTransaction {
            try database.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            let before = try Self.sequentialScans(of: "tasks", in: database)
            let due = try TaskRepository.dueForStallCheck(at: 1_000_000, limit: 100, in: database)
            #expect(due.map(\.id) == (1...100).map { "task-\($0)" })
            let sweep = try Self.sequentialScans(of: "tasks", in: database)
            #expect(sweep == before, "the sweep's page scanned tasks")
            let page = try ChangeFeed.changes(after: 0, through: Int64(Self.taskCount), limit: 100, in: database)
            #expect(page.events.count == 100 && page.events.last?.changeNumber == 100)
            let feed = try Self.sequentialScans(of: "tasks", in: database)
            #expect(feed == sweep, "a page of changes scanned tasks")
            #expect(try ChangeFeed.timeNoLaterThan(change: 4_000, in: database) == 5_000)
            #expect(try Self.sequentialScans(of: "tasks", in: database) == feed, "timeNoLaterThan scanned tasks")
        }
    }

    /// A catch-up that names tasks or parents (the stream's `task=`, `parent_id=`, as a
    /// dashboard resuming for the tasks it shows) reads those tasks through `tasks`' id
    /// and parent indexes, as `ChangeFeed.Selection` promises ("a filtered catch-up costs
    /// what it shows, not what the database holds"), not every task changed since its id.
    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func filteredCatchUpReadsOnlyTheNamedTasks() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let database = try Self.database(server)
        defer { database.close() }
        try database.inTransaction {
            try database.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            let start = try Self.taskRowsFetched(in: database)
            let named = try ChangeFeed.changes(after: 0, of: .init(taskIDs: ["task-2500"], parentIDs: []), in: database)
            #expect(named.map(\.taskID) == ["task-2500"])
            let afterNamed = try Self.taskRowsFetched(in: database)
            #expect(afterNamed - start <= 10, "task= read \(afterNamed - start) rows of tasks")
            let children = try ChangeFeed.changes(after: 0, of: .init(taskIDs: [], parentIDs: ["task-1"]), in: database)
            #expect(children.isEmpty)
            let afterChildren = try Self.taskRowsFetched(in: database)
            #expect(afterChildren - afterNamed <= 10, "parent_id= read \(afterChildren - afterNamed) rows of tasks")
        }
    }
}
