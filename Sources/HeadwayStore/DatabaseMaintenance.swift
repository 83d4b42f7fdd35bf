import HeadwayCore

/// What an operator asks of a database file, outside the daemon: its schema version and
/// task counts, an integrity check, and an online backup (`headway db`).
extension Database {
    /// The schema version recorded by the migrations; nil when the file has no
    /// `schema_migrations` table (not a Headway database).
    public func schemaVersion() throws(DatabaseError) -> Int? {
        let tables = try rows(dialect.schemaMigrationsTableQuery) { $0.text(0) }
        guard !tables.isEmpty else { return nil }
        return try Migrator.recordedVersion(in: self)
    }

    /// How many tasks there are in each state (from the counts the triggers keep, so it
    /// costs the same however many tasks exist); states without tasks are left out.
    public func taskCountsByState() throws(DatabaseError) -> [(state: String, count: Int64)] {
        try rows("SELECT state, sum(n) FROM task_counts GROUP BY state HAVING sum(n) > 0 ORDER BY state") {
            (state: $0.text(0), count: $0.int(1))
        }
    }

    /// How many tasks there are per state, mode and stall reason (from the counts the
    /// triggers keep, a few rows: what `GET /metrics` shows); empty combinations are left out.
    public func taskCountsByStateModeAndStall() throws(DatabaseError) -> [TaskCount] {
        try rows("SELECT state, quantified, stall_reason, sum(n) FROM task_counts "
                    + "GROUP BY state, quantified, stall_reason HAVING sum(n) > 0 ORDER BY 1, 2, 3") {
            TaskCount(state: $0.text(0), mode: $0.int(1) != 0 ? .quantified : .indeterminate,
                      stallReason: StallReason(rawValue: $0.text(2)), count: $0.int(3))
        }
    }

    /// `PRAGMA integrity_check`: empty when the database is sound, else SQLite's problems.
    public func integrityProblems() throws(DatabaseError) -> [String] {
        let lines = try rows("PRAGMA integrity_check") { $0.text(0) }
        return lines == ["ok"] ? [] : lines
    }

    /// Copies this SQLite database into the empty file at `destinationPath`, which the
    /// caller made (`PrivateFile.create`: mode 0600), with SQLite's online backup API,
    /// while other connections (the daemon) go on writing; the copy is a single
    /// self-contained file (`SQLiteConnection.backup(to:)`).
    public func backup(to destinationPath: String) throws(DatabaseError) {
        try checkOpen("backup")
        try connection.backup(to: destinationPath)
    }
}

/// How many tasks share a state, a mode and a stall reason (nil: not stalled).
public struct TaskCount: Sendable, Equatable {
    public var state: String
    public var mode: TaskMode
    public var stallReason: StallReason?
    public var count: Int64
}
