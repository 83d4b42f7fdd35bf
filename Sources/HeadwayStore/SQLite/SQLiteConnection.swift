import CSQLite
import Glibc

// @unchecked Sendable: an SQLite connection handle, opened without SQLite's mutex;
// `Database` confines its use to one thread at a time.
/// One connection to an SQLite file, as `Database` runs statements on it. Statements are
/// prepared once and cached. The writer's connection keeps its WAL small itself: the
/// automatic checkpoint is taken out of the commit (`deferCheckpoints`) and run after the
/// replies (`checkpointIfDue`), and a `-wal` file over the limit is emptied between
/// batches (`checkpointTruncatingWAL`).
final class SQLiteConnection: EngineConnection, @unchecked Sendable {
    let handle: OpaquePointer
    /// The file this connection opened.
    let path: String
    var dialect: any SQLDialect { SQLiteDialect.shared }
    private var statements: [String: SQLiteStatement] = [:]
    /// The statements used last, looked up before `statements`: the hot path's SQL are
    /// the same strings every time, which compare equal at once (no hashing of long SQL).
    private var recentStatements: [(sql: String, statement: SQLiteStatement)] = []
    private var nextRecentSlot = 0
    private var isClosed = false
    private(set) var statementsRun = 0
    /// The busy handler that tells of lock waits, once `prepareForWriting` set it (kept
    /// here: SQLite holds only its address).
    private var busyHandler: ReportingBusyHandler?
    /// Pages in the WAL as this connection's last commit left them (SQLite's WAL hook),
    /// while checkpoints are deferred (`deferCheckpoints`).
    private var walPagesAfterCommit: Int32 = 0
    /// The WAL's size in pages from which `checkpointIfDue` checkpoints; 0 until
    /// `deferCheckpoints` (SQLite's automatic checkpoint then runs inside the commit).
    private var deferredCheckpointPages: Int32 = 0

    /// Opens (creating it if needed and writable: mode 0600, never through a symbolic
    /// link, `PrivateFile`) the file at `path`. A connection for queries opens the file
    /// for writing (so that it shares the writer's `-shm`) and refuses writes by
    /// `PRAGMA query_only`.
    init(path: String, access: ConnectionAccess) throws(DatabaseError) {
        self.path = path
        _ = Self.sqliteConfigured
        let readOnly = access == .readOnly
        if !readOnly {
            do {
                try PrivateFile.createDatabaseIfMissing(path)
            } catch {
                throw DatabaseError(code: SQLITE_CANTOPEN, message: "cannot create the database file \(error)", sql: nil,
                                    systemError: error.systemError)
            }
        }
        var pointer: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &pointer, flags, nil)
        guard code == SQLITE_OK, let pointer else {
            let message = pointer.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(pointer)
            throw DatabaseError(code: code, message: message, sql: nil)
        }
        handle = pointer
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Database.busyTimeoutMilliseconds)
        SearchFolding.register(on: pointer)
        if access == .queries { try execute("PRAGMA query_only = 1") }
    }

    /// SQLite's process-wide settings, made once before the first connection opens.
    /// Nothing here reads SQLite's memory counts (`sqlite3_memory_used`, a soft heap
    /// limit), so they are not kept: that saves a global mutex at every allocation.
    private static let sqliteConfigured: Bool = headway_sqlite_stop_counting_memory() == SQLITE_OK

    deinit { close() }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        statements.removeAll()
        recentStatements.removeAll()
        sqlite3_close_v2(handle)
    }

    func execute(_ sql: String) throws(DatabaseError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard code == SQLITE_OK else {
            let systemError = lastSystemError  // first, while the thread's errno is the failure's
            let message = errorMessage.map { String(cString: $0) } ?? lastErrorMessage
            sqlite3_free(errorMessage)
            throw DatabaseError(code: code, message: message, sql: sql, systemError: systemError)
        }
    }

    /// A prepared statement for `sql`, taken from the cache and reset, ready to bind.
    /// `run` and `rows` always finish the statement: a statement left in the middle of its
    /// rows keeps a read transaction open, which pins the connection to an old snapshot
    /// and stops WAL checkpoints.
    private func statement(_ sql: String) throws(DatabaseError) -> SQLiteStatement {
        statementsRun += 1
        for recent in recentStatements where recent.sql == sql {
            recent.statement.reset()
            return recent.statement
        }
        if let cached = statements[sql] {
            remember(sql, cached)
            cached.reset()
            return cached
        }
        var pointer: OpaquePointer?
        let code = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &pointer, nil)
        guard code == SQLITE_OK, let pointer else {
            throw DatabaseError(code: code, message: lastErrorMessage, sql: sql, systemError: lastSystemError)
        }
        let statement = SQLiteStatement(pointer, connection: self, sql: sql)
        statements[sql] = statement
        remember(sql, statement)
        return statement
    }

    private func remember(_ sql: String, _ statement: SQLiteStatement) {
        if recentStatements.count < 8 {
            recentStatements.append((sql, statement))
        } else {
            recentStatements[nextRecentSlot] = (sql, statement)
            nextRecentSlot = (nextRecentSlot + 1) % 8
        }
    }

    func run(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError) {
        try statement(sql).run(arguments)
    }

    func rows<Row>(_ sql: String, _ arguments: [SQLValue], map: (any ResultRow) -> Row) throws(DatabaseError) -> [Row] {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        var rows: [Row] = []
        while try statement.step() { rows.append(map(statement)) }
        return rows
    }

    /// Transaction statements are prepared and cached like any other (their texts are
    /// literals, found in the recent statements without hashing).
    func control(_ sql: String) throws(DatabaseError) {
        try run(sql, [])
    }

    /// In process, a statement's answer costs no wait: each runs as it comes.
    func pipelineUntilCommit() {}

    /// SQLite keeps no state of its own about a transaction it rolled back itself.
    func transactionEndedUnsent() {}

    var changedRows: Int64 { sqlite3_total_changes64(handle) }

    var isInsideTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// SQLite rolls back or keeps going by itself.
    var transactionFailed: Bool { false }

    var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// The `errno` under the connection's last error, read at once after it: SQLite's own
    /// record of its last failed system call; when it has none for an I/O error (SQLite
    /// does not keep the `errno` of a failed write to the `-wal` file, say), the thread's
    /// `errno` if it tells of the storage (`ENOSPC`, `EDQUOT`, `EROFS`: SQLite's own calls
    /// after the failed one succeed and leave it), else what the filesystem holding the
    /// database shows now (`EROFS` if mounted read-only, `ENOSPC` if no block is left);
    /// else 0.
    var lastSystemError: Int32 {
        let threadError = errno
        let reported = sqlite3_system_errno(handle)
        guard reported == 0, sqlite3_errcode(handle) & 0xff == SQLITE_IOERR else { return reported }
        if [ENOSPC, EDQUOT, EROFS].contains(threadError) { return threadError }
        var filesystem = statvfs()
        guard statvfs(path, &filesystem) == 0 else { return 0 }
        if filesystem.f_flag & UInt(ST_RDONLY) != 0 { return EROFS }
        if filesystem.f_bavail == 0 { return ENOSPC }
        return 0
    }

    func refuseCommits(_ refuse: Bool) {
        if refuse {
            sqlite3_commit_hook(handle, { _ in 1 }, nil)
        } else {
            sqlite3_commit_hook(handle, nil, nil)
        }
    }

    // MARK: The writer's connection

    func prepareForWriting(durability: Durability, walSizeLimit: Int, lockWaits: LockWaits) throws(DatabaseError) {
        try execute("PRAGMA journal_mode = WAL")
        try execute("PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
        // After the WAL has been reset, its first commit cuts the file back to this size.
        try execute("PRAGMA journal_size_limit = \(walSizeLimit)")
        // A batch's replies do not wait for a checkpoint: it runs after them (`run()`).
        deferCheckpoints()
        reportLockWaits(to: lockWaits)
    }

    /// Tells `waits` whenever a statement of this connection waits for a lock another
    /// connection holds (the wait itself stays `busyTimeoutMilliseconds`).
    func reportLockWaits(to waits: LockWaits) {
        busyHandler = ReportingBusyHandler(waits: waits, timeoutMilliseconds: Database.busyTimeoutMilliseconds)
        restoreBusyWaits()
    }

    func lockWaitEnded() { busyHandler?.statementReturned() }

    /// Waits for other connections' locks again as the connection was set to.
    private func restoreBusyWaits() {
        if let busyHandler {
            sqlite3_busy_handler(handle, ReportingBusyHandler.callback, Unmanaged.passUnretained(busyHandler).toOpaque())
        } else {
            sqlite3_busy_timeout(handle, Database.busyTimeoutMilliseconds)
        }
    }

    /// Checkpoints the WAL and truncates the `-wal` file to zero bytes, without waiting for
    /// anyone: SQLite's `TRUNCATE` checkpoint with the busy handler off. It copies into the
    /// database every page no reader still needs; then, if no other connection reads from
    /// the WAL or writes, it empties the file. Returns whether it did; false when another
    /// connection was in the way (a reader of an older snapshot, a writer), which is not an
    /// error: only what could be copied was. Not inside a transaction of this connection.
    func checkpointTruncatingWAL() throws(DatabaseError) -> Bool {
        sqlite3_busy_timeout(handle, 0)
        defer { restoreBusyWaits() }
        let code = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
        switch code & 0xff {
        case SQLITE_OK: return true
        case SQLITE_BUSY: return false
        default:
            throw DatabaseError(code: code, message: lastErrorMessage, sql: "PRAGMA wal_checkpoint(TRUNCATE)",
                              systemError: lastSystemError)
        }
    }

    /// Takes SQLite's automatic checkpoint out of the commit. By default the `COMMIT` that
    /// leaves 1,000 pages or more in the WAL also copies them into the database file and
    /// syncs both files (in WAL mode with `synchronous` `FULL` or `NORMAL` alike) before it
    /// returns, so every reply of that commit waits for the checkpoint too. Deferred, a
    /// commit only notes how many pages the WAL holds, and `checkpointIfDue()`, called once
    /// the replies are out, runs the same passive checkpoint. (A later `PRAGMA
    /// wal_autocheckpoint` would bring the automatic checkpoint back: SQLite keeps one WAL
    /// hook per connection.)
    func deferCheckpoints(fromPages pages: Int32 = 1000) {
        guard pages > 0 else { return }
        deferredCheckpointPages = pages
        sqlite3_wal_hook(handle, { context, _, _, pages in
            Unmanaged<SQLiteConnection>.fromOpaque(context!).takeUnretainedValue().walPagesAfterCommit = pages
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// With checkpoints deferred, runs a passive checkpoint (SQLite's automatic one: it
    /// copies what no reader still needs and waits for no one) if the last commit left the
    /// WAL at the threshold or over it. A checkpoint that fails changes nothing stored: the
    /// pages stay in the WAL and the next commit makes it due again. Returns whether it ran
    /// (even if it failed). Not inside a transaction of this connection.
    func checkpointIfDue() -> Bool {
        guard deferredCheckpointPages > 0, walPagesAfterCommit >= deferredCheckpointPages, !isClosed else { return false }
        walPagesAfterCommit = 0
        _ = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        return true
    }

    /// The `-wal` file's size (stat(2) alone: FileManager's attributes would also read
    /// /etc/passwd and /etc/group each time, for the owner's names).
    var writeAheadLogBytes: Int { Int(Self.fileSize(path + "-wal")) }

    func storageSizes() throws(DatabaseError) -> StorageSizes {
        StorageSizes(databaseBytes: Self.fileSize(path), writeAheadLogBytes: Self.fileSize(path + "-wal"))
    }

    /// The size of the file at `path`, 0 if there is none.
    static func fileSize(_ path: String) -> Int64 {
        var status = stat()
        return stat(path, &status) == 0 ? Int64(status.st_size) : 0
    }

    /// Copies this database into the empty file at `destinationPath`, which the caller made
    /// (`PrivateFile.create`: mode 0600, which SQLite gives its journal too), with SQLite's
    /// online backup API, while other connections (the daemon) go on writing. The file is
    /// opened as it is, never created here nor reached through a symbolic link. Under WAL
    /// one step copies every page from one read snapshot, so writers never restart the
    /// copy; the copy is then switched to a rollback journal, a single self-contained file.
    func backup(to destinationPath: String) throws(DatabaseError) {
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
