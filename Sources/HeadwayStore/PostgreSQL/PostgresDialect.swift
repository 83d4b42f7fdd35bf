import HeadwayCore

/// PostgreSQL's statements where the engines' SQL differs (`SQLDialect`).
struct PostgresDialect: SQLDialect {
    static let shared = PostgresDialect()

    /// A deferred transaction reads one snapshot throughout, as SQLite's does; an
    /// immediate one reads what is committed at each statement, which the writer needs
    /// once it holds the lock all writers take (`SharedWriting`).
    let beginDeferred = "BEGIN ISOLATION LEVEL REPEATABLE READ"
    let beginImmediate = "BEGIN"

    let schemaMigrationsTableQuery =
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'schema_migrations'"

    let trimOutput = TaskOutput.trimSQL(bytes: "octet_length(line)")

    let createSchemaMigrations = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version integer PRIMARY KEY,
            name text NOT NULL,
            applied_at text NOT NULL
                DEFAULT (to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
        )
        """

    /// Both are indexed apart (`task_changes`, `task_deadlines`, kept by triggers;
    /// migration 0012), so that a progress update changes no indexed column of `tasks` and
    /// is heap-only. A query reads a range of the table apart, in its order, and each
    /// task by its key (`LATERAL`, kept from being flattened into a join by `OFFSET 0`):
    /// the statements are prepared once per connection, maybe while `tasks` is still
    /// small, and a plan that hashed the whole of `tasks` would be kept as it grows. The
    /// task's own value must match: a row apart stands for its current value only.
    let changeNumbers = PostgresDialect.tasks(apartIn: "task_changes", value: "number", column: "change_seq")
    let stallDeadlines = PostgresDialect.tasks(apartIn: "task_deadlines", value: "due", column: "stall_deadline")

    /// `tasks`, read row by row from `table`'s rows (`value`, `task`), named `tasks`.
    private static func tasks(apartIn table: String, value: String, column: String) -> TasksByColumn {
        TasksByColumn(source: "\(table) CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = \(table).task "
                          + "AND tasks.\(column) = \(table).\(value) OFFSET 0) AS tasks",
                      column: "\(table).\(value)")
    }

    /// Several daemons write: the latest number committed is kept in one row, which every
    /// writer locks first and moves before it commits (`SharedWriting`).
    func changeFeedPosition(in database: Database) throws(DatabaseError) -> ChangeFeed.Position {
        let state = try database.rows("SELECT first_seq, pruned_through, last_change FROM stream_state") {
            ($0.int(0), $0.int(1), $0.int(2))
        }
        guard let (first, prunedThrough, last) = state.first else { return ChangeFeed.Position(first: 0, last: 0, prunedThrough: -1) }
        return ChangeFeed.Position(first: first, last: max(first, last, prunedThrough), prunedThrough: prunedThrough)
    }

    /// One statement per table for the whole batch (`PostgresSetWrites`).
    func writeHeldTasks(_ changes: [(task: TaskRecord, previous: TaskRecord)], samples: [History.Sample],
                        in database: Database) throws(DatabaseError) {
        try PostgresSetWrites.write(changes, samples: samples, in: database)
    }

    func searchKeys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                    in database: Database) throws(DatabaseError) -> [Int64] {
        try PostgresTaskSearch.keys(text, filter: filter, limit: limit, beforeKey: beforeKey, in: database)
    }

    func searchCount(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        try PostgresTaskSearch.count(text, filter: filter, in: database)
    }

    /// A transaction id taken, so the commit writes a record to the server's WAL (a
    /// standby refuses it).
    func probeWrite(in database: Database) throws(DatabaseError) {
        try database.run("SELECT txid_current()")
    }

    // MARK: Migrations

    /// The advisory lock every migrating daemon holds for its whole run, so that daemons
    /// started together migrate one after the other (the later ones find nothing to do).
    static let migrationLockKey: Int64 = 0x4865_6164_7761_7901

    /// The tables of Headway's PostgreSQL schema, whose names another application may use too.
    static let tableNames = ["tasks", "tombstones", "stream_state", "history", "task_counts", "tokens", "token_state",
                             "webhooks", "webhook_deliveries", "task_output", "written_tasks", "task_search",
                             "task_changes", "task_deadlines"]

    /// The lock is held from the first check to the last migration, so a daemon started
    /// beside another waits until the schema is whole and applies nothing (each
    /// migration's own transaction takes it again, which a holder always gets). Neither
    /// that wait nor a migration (an index built over a large table) has a time limit.
    func beginMigrating(_ database: Database) throws {
        try database.postgres.liftTimeLimits()
        try database.inTransaction(.immediate) {
            try database.execute("SET LOCAL lock_timeout = 0")
            _ = try database.rows("SELECT pg_advisory_lock(\(Self.migrationLockKey))") { _ in () }
        }
    }

    func endMigrating(_ database: Database) {
        _ = try? database.rows("SELECT pg_advisory_unlock(\(Self.migrationLockKey))") { _ in () }
        try? database.postgres.restoreTimeLimits()
    }

    /// The lock ends with the transaction.
    func lockOutOtherMigrations(_ database: Database) throws(DatabaseError) {
        try database.execute("SET LOCAL lock_timeout = 0")
        _ = try database.rows("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))") { _ in () }
    }

    /// A database an organisation already operates may hold another application's tables:
    /// refused before anything is created.
    func refuseForeignTables(_ database: Database) throws {
        guard try database.scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations' "
                                  + "AND schemaname = current_schema()") == 0 else { return }
        let names = Self.tableNames.map { "'\($0)'" }.joined(separator: ", ")
        let found = try database.rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                                      + "AND tablename IN (\(names)) ORDER BY tablename") { $0.text(0) }
        if !found.isEmpty { throw MigrationError.foreignTables(found) }
    }

    func finishMigrating(_ database: Database) throws(DatabaseError) {}
}
