import CSQLite
import HeadwayCore

/// What an operator asks of a database file, outside the daemon: its schema version and
/// task counts, an integrity check, and an online backup (`headway db`).
extension Database {
    /// The schema version recorded by the migrations; nil when the file has no
    /// `schema_migrations` table (not a Headway database).
    public func schemaVersion() throws(DatabaseError) -> Int? {
        let tables = try rows(isPostgres
            ? "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'schema_migrations'"
            : "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") {
            $0.text(0)
        }
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

    /// Writes the header's `user_version` again with its own value: a real write (one page
    /// to the WAL) that changes nothing, so it fails where any write would (a full disk, a
    /// read-only file, an I/O error). The readiness probe. On PostgreSQL: a transaction id
    /// taken, so the commit writes a record to the server's WAL (a standby refuses it).
    public func probeWrite() throws(DatabaseError) {
        if isPostgres { return try run("SELECT txid_current()") }
        let version = try scalar("PRAGMA user_version") ?? 0
        try execute("PRAGMA user_version = \(version)")
    }

    /// `PRAGMA integrity_check`: empty when the database is sound, else SQLite's problems.
    public func integrityProblems() throws(DatabaseError) -> [String] {
        let lines = try rows("PRAGMA integrity_check") { $0.text(0) }
        return lines == ["ok"] ? [] : lines
    }

    /// Copies this database into the empty file at `destinationPath`, which the caller made
    /// (`PrivateFile.create`: mode 0600, which SQLite gives its journal too), with SQLite's
    /// online backup API, while other connections (the daemon) go on writing. The file is
    /// opened as it is, never created here nor reached through a symbolic link. Under WAL
    /// one step copies every page from one read snapshot, so writers never restart the
    /// copy; the copy is then switched to a rollback journal, a single self-contained file.
    public func backup(to destinationPath: String) throws(DatabaseError) {
        var pointer: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX
        let openCode = sqlite3_open_v2(destinationPath, &pointer, flags, nil)
        guard openCode == SQLITE_OK, let destination = pointer else {
            let message = pointer.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(pointer)
            throw DatabaseError(code: openCode, message: message, sql: nil)
        }
        defer { sqlite3_close_v2(destination) }
        guard let backup = sqlite3_backup_init(destination, "main", handle, "main") else {
            throw DatabaseError(code: sqlite3_errcode(destination), message: String(cString: sqlite3_errmsg(destination)),
                              sql: nil)
        }
        var code = SQLITE_OK
        // Busy or locked only while another connection holds a lock briefly: bounded retries.
        for _ in 0..<100 {
            code = sqlite3_backup_step(backup, -1)
            guard code == SQLITE_BUSY || code == SQLITE_LOCKED else { break }
            sqlite3_sleep(50)
        }
        let finishCode = sqlite3_backup_finish(backup)
        guard code == SQLITE_DONE, finishCode == SQLITE_OK else {
            let failed = code == SQLITE_DONE ? finishCode : code
            throw DatabaseError(code: failed, message: String(cString: sqlite3_errstr(failed)), sql: nil)
        }
        var errorMessage: UnsafeMutablePointer<CChar>?
        let sql = "PRAGMA journal_mode = DELETE"
        let journalCode = sqlite3_exec(destination, sql, nil, nil, &errorMessage)
        guard journalCode == SQLITE_OK else {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(journalCode))
            sqlite3_free(errorMessage)
            throw DatabaseError(code: journalCode, message: message, sql: sql)
        }
    }
}

/// How many tasks share a state, a mode and a stall reason (nil: not stalled).
public struct TaskCount: Sendable, Equatable {
    public var state: String
    public var mode: TaskMode
    public var stallReason: StallReason?
    public var count: Int64
}
