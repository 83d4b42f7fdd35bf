import HeadwayCore

/// SQLite's statements where the engines' SQL differs (`SQLDialect`).
struct SQLiteDialect: SQLDialect {
    static let shared = SQLiteDialect()

    /// No lock until the first read or write (a read snapshot starts at the first read).
    let beginDeferred = "BEGIN DEFERRED"
    /// The write lock at once, so the transaction never fails to upgrade a read lock later.
    let beginImmediate = "BEGIN IMMEDIATE"

    let schemaMigrationsTableQuery = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"

    let trimOutput = TaskOutput.trimSQL(bytes: "length(CAST(line AS BLOB))")

    let createSchemaMigrations = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        ) STRICT
        """

    /// Both are indexed on `tasks`: SQLite updates a row in place, and only the index
    /// entries of the columns that changed.
    let changeNumbers = TasksByColumn(source: "tasks", column: "change_seq")
    let stallDeadlines = TasksByColumn(source: "tasks", column: "stall_deadline")

    /// One daemon writes: the latest change is the highest number a task or a tombstone
    /// holds. What was forgotten still counts: the sequence never goes back, even when its
    /// latest changes were pruned.
    func changeFeedPosition(in database: Database) throws(DatabaseError) -> ChangeFeed.Position {
        let state = try database.rows("SELECT first_seq, pruned_through FROM stream_state") { ($0.int(0), $0.int(1)) }
        let (first, prunedThrough) = state.first ?? (0, -1)
        let lastTask = try database.scalar("SELECT max(change_seq) FROM tasks") ?? first
        let lastTombstone = try database.scalar("SELECT max(change_seq) FROM tombstones") ?? first
        return ChangeFeed.Position(first: first, last: max(first, lastTask, lastTombstone, prunedThrough),
                                   prunedThrough: prunedThrough)
    }

    /// A prepared statement per row: in process, each costs a few microseconds, and only
    /// the columns that differ are bound and copied.
    func writeHeldTasks(_ changes: [(task: TaskRecord, previous: TaskRecord)], samples: [History.Sample],
                        in database: Database) throws(DatabaseError) {
        for (task, previous) in changes { try TaskRepository.update(task, previous: previous, in: database) }
        try History.insert(samples, in: database)
    }

    func searchKeys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                    in database: Database) throws(DatabaseError) -> [Int64] {
        try SQLiteTaskSearch.keys(text, filter: filter, limit: limit, beforeKey: beforeKey, in: database)
    }

    func searchCount(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        try SQLiteTaskSearch.count(text, filter: filter, in: database)
    }

    /// Writes the header's `user_version` again with its own value: a real write (one page
    /// to the WAL) that changes nothing, so it fails where any write would (a full disk, a
    /// read-only file, an I/O error).
    func probeWrite(in database: Database) throws(DatabaseError) {
        let version = try database.scalar("PRAGMA user_version") ?? 0
        try database.execute("PRAGMA user_version = \(version)")
    }

    // MARK: Migrations

    /// One daemon writes a file: each migration's immediate transaction is lock enough.
    func beginMigrating(_ database: Database) throws {}
    func endMigrating(_ database: Database) {}
    func lockOutOtherMigrations(_ database: Database) throws(DatabaseError) {}
    /// A file named by `--db` is Headway's own.
    func refuseForeignTables(_ database: Database) throws {}

    /// The WAL journal, once migrated (a database from a newer build is refused before,
    /// and left as it was).
    func finishMigrating(_ database: Database) throws(DatabaseError) {
        try database.execute("PRAGMA journal_mode = WAL")
    }
}
