import CLibPQ
import CSQLite
import Glibc
import Synchronization

/// An error from the database, with its result code and the statement that failed. An
/// error from PostgreSQL carries its SQLSTATE too, and the SQLite code of the same meaning
/// (`DatabaseError.postgres`), so both engines' failures are judged alike.
public struct DatabaseError: Error, CustomStringConvertible, Sendable {
    /// SQLite's (extended) result code.
    public var code: Int32
    /// SQLite's message.
    public var message: String
    /// The SQL that failed, if any.
    public var sql: String?
    /// The operating system's `errno` under the failure, 0 if unknown: what an I/O error
    /// was underneath (`Database.lastSystemError` says where it comes from).
    public var systemError: Int32 = 0
    /// PostgreSQL's SQLSTATE (`23505`, say); nil for SQLite (and for a PostgreSQL error
    /// without one: a lost connection).
    public var sqlState: String? = nil
    /// Whether PostgreSQL (or libpq) reported the error.
    public var isFromPostgres = false
    /// Whether the database could not be reached (PostgreSQL down or restarting; the
    /// connection lost): nothing was changed, and a later try may succeed.
    public var isUnavailable = false

    public init(code: Int32, message: String, sql: String?, systemError: Int32 = 0) {
        self.code = code
        self.message = message
        self.sql = sql
        self.systemError = systemError
    }

    public var description: String {
        (isFromPostgres ? "PostgreSQL error \(sqlState ?? "(no SQLSTATE)"): \(message)" : "SQLite error \(code): \(message)")
            + (systemError != 0 ? " (errno \(systemError))" : "")
            + (sql.map { " — while running: \($0)" } ?? "")
    }

    /// What the error says of the storage, if it is a storage failure (see `StorageFailure`).
    public var storageFailure: StorageFailure? { StorageFailure(resultCode: code, systemError: systemError) }

    /// Whether another connection held a lock the statement needed for longer than
    /// `Database.busyTimeoutMilliseconds` (`SQLITE_BUSY`): nothing was changed, and a later
    /// try may succeed.
    public var isBusy: Bool { code & 0xff == SQLITE_BUSY }
}

/// Why the storage under the database takes no writes now: a write that fails this way
/// changed nothing, and the same write may succeed later without a restart, once space is
/// freed or the filesystem is writable again.
public enum StorageFailure: String, Sendable, Equatable {
    /// No space left: `SQLITE_FULL`, or an I/O error whose `errno` is `ENOSPC` or `EDQUOT`.
    case full
    /// The database cannot be written: `SQLITE_READONLY` (any extended code), or an I/O
    /// error whose `errno` is `EROFS` (the filesystem went read-only).
    case readOnly

    /// The failure an SQLite result code (extended or primary) and the `errno` under it
    /// stand for; nil for any other error.
    public init?(resultCode: Int32, systemError: Int32) {
        switch resultCode & 0xff {
        case SQLITE_FULL: self = .full
        case SQLITE_READONLY: self = .readOnly
        case SQLITE_IOERR:
            switch systemError {
            case ENOSPC, EDQUOT: self = .full
            case EROFS: self = .readOnly
            default: return nil
            }
        default: return nil
        }
    }
}

// @unchecked Sendable: a C handle, opened without SQLite's mutex (or a libpq connection);
// `confinement` checks its use.
/// One connection to the database: an SQLite file, or a PostgreSQL server when its location
/// is a `postgresql://` URI (`PostgresConnection` then runs the statements, and the few
/// statements whose dialects differ ask `isPostgres`). A connection is used by one thread at a time: its owner says
/// which (`confine(to:)`) and every statement checks it. Statements are prepared once and
/// cached. Transactions and savepoints go through `inTransaction(_:_:)` and
/// `inSavepoint(_:)`, which commit, roll back and keep `rollbacks` themselves.
public final class Database: @unchecked Sendable {
    /// The SQLite connection; nil on PostgreSQL.
    private let sqliteHandle: OpaquePointer?
    /// The PostgreSQL connection; nil on SQLite.
    let postgres: PostgresConnection?
    /// The SQLite connection (only SQLite's code paths use it).
    var handle: OpaquePointer { sqliteHandle! }
    /// Whether this is a connection to PostgreSQL.
    public var isPostgres: Bool { postgres != nil }
    /// Which threads may use the connection now, as `ThreadConfinement.encoded`. Atomic, so
    /// that a thread the connection does not belong to reads it without a data race.
    let confinementValue = Atomic<UInt>(ThreadConfinement.anyThread.encoded)
    private var statements: [String: Statement] = [:]
    /// The statements used last, looked up before `statements`: the hot path's SQL are
    /// the same strings every time, which compare equal at once (no hashing of long SQL).
    private var recentStatements: [(sql: String, statement: Statement)] = []
    private var nextRecentSlot = 0
    private var isClosed = false
    /// The file this connection opened (or the PostgreSQL URI).
    public let path: String
    /// How many times a transaction or savepoint of this connection was rolled back after
    /// it had changed rows (counted by `inTransaction` and `inSavepoint`): caches of what
    /// the connection stored check it, and forget what they hold when it moves.
    public private(set) var rollbacks = 0
    /// How many statements this connection has run (each use of a prepared statement
    /// counts once): what tests count to check that work grows as it should.
    public private(set) var statementsRun = 0
    /// Rows returned by this connection's queries (`rows(_:_:map:)`), for tests and
    /// measurements of how much a read touches.
    public private(set) var rowsRead = 0
    /// What holds row writes back until this connection's transaction commits (the task
    /// cache's held writes, `TaskCache`): told as savepoints and transactions begin and end,
    /// and asked to write what it holds before each commit.
    public var heldWrites: (any HeldWrites)?
    /// The busy handler that tells of lock waits, once `reportLockWaits(to:)` set it
    /// (kept here: SQLite holds only its address).
    private var busyHandler: ReportingBusyHandler?
    /// Changes held back by `heldWrites`, counted in `totalChanges` as if written, so that
    /// "did this change anything" means the same whether a write is held or made.
    private var heldChanges: Int64 = 0
    /// Pages in the WAL as this connection's last commit left them (SQLite's WAL hook),
    /// while checkpoints are deferred (`deferCheckpoints`).
    private var walPagesAfterCommit: Int32 = 0
    /// The WAL's size in pages from which `checkpointIfDue` checkpoints; 0 until
    /// `deferCheckpoints` (SQLite's automatic checkpoint then runs inside the commit).
    private var deferredCheckpointPages: Int32 = 0

    /// Opens (creating if needed: mode 0600, never through a symbolic link, `PrivateFile`)
    /// the database at `path`, or connects to the PostgreSQL server `path` names
    /// (`postgresql://…`). A read-only PostgreSQL connection refuses writes by its
    /// session's default (`default_transaction_read_only`).
    public init(path: String, readOnly: Bool = false) throws(DatabaseError) {
        self.path = path
        if isPostgresLocation(path) {
            let connection = try PostgresConnection(location: path)
            // Waits for a lock as long as SQLite's busy timeout, then fails as busy.
            try connection.addSessionSetting("SET lock_timeout = '\(Self.busyTimeoutMilliseconds)ms'")
            // Notices (a table that already exists, say) are not worth a line on stderr.
            try connection.addSessionSetting("SET client_min_messages = warning")
            if readOnly { try connection.addSessionSetting("SET default_transaction_read_only = on") }
            postgres = connection
            sqliteHandle = nil
            return
        }
        postgres = nil
        _ = Self.sqliteConfigured
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
        sqliteHandle = pointer
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Self.busyTimeoutMilliseconds)
        SearchFolding.register(on: pointer)
    }

    /// Tells `waits` whenever a statement of this connection waits for a lock another
    /// connection holds (SQLite only; the wait itself is as long as before:
    /// `busyTimeoutMilliseconds`).
    public func reportLockWaits(to waits: LockWaits) {
        guard !isPostgres else { return }
        busyHandler = ReportingBusyHandler(waits: waits, timeoutMilliseconds: Self.busyTimeoutMilliseconds)
        restoreBusyWaits()
    }

    /// Waits for other connections' locks again as the connection was set to.
    private func restoreBusyWaits() {
        if let busyHandler {
            sqlite3_busy_handler(handle, ReportingBusyHandler.callback, Unmanaged.passUnretained(busyHandler).toOpaque())
        } else {
            sqlite3_busy_timeout(handle, Self.busyTimeoutMilliseconds)
        }
    }

    /// SQLite's process-wide settings, made once before the first connection opens.
    /// Nothing here reads SQLite's memory counts (`sqlite3_memory_used`, a soft heap
    /// limit), so they are not kept: that saves a global mutex at every allocation.
    private static let sqliteConfigured: Bool = headway_sqlite_stop_counting_memory() == SQLITE_OK

    /// How long a statement waits for a lock another connection holds (another process's
    /// write transaction, say) before it fails with `SQLITE_BUSY`.
    public static let busyTimeoutMilliseconds: Int32 = 5000

    deinit { close() }

    /// Finalizes the statements and closes the connection; later calls throw. Closing the
    /// last connection of a WAL database checkpoints it and removes the `-wal` file.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        statements.removeAll()
        recentStatements.removeAll()
        if let postgres { postgres.close() } else { sqlite3_close_v2(handle) }
    }

    /// Every statement starts here: the connection must be open and used on its own thread.
    private func checkOpen(_ sql: String) throws(DatabaseError) {
        precondition(isUsable(on: .current),
                     "database connection to \(path) used on \(ThreadID.current), but it is \(confinement)")
        if isClosed { throw DatabaseError(code: SQLITE_MISUSE, message: "the connection is closed", sql: sql) }
    }

    /// Runs one or more statements that return no rows.
    public func execute(_ sql: String) throws(DatabaseError) {
        try checkOpen(sql)
        if let postgres { return try postgres.execute(sql) }
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
    /// Prefer `run(_:_:)` and `rows(_:_:map:)`, which always finish the statement: a
    /// statement left in the middle of its rows keeps a read transaction open, which pins
    /// the connection to an old snapshot and stops WAL checkpoints.
    func statement(_ sql: String) throws(DatabaseError) -> Statement {
        try checkOpen(sql)
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
        let statement = Statement(pointer, database: self, sql: sql)
        statements[sql] = statement
        remember(sql, statement)
        return statement
    }

    private func remember(_ sql: String, _ statement: Statement) {
        if recentStatements.count < 8 {
            recentStatements.append((sql, statement))
        } else {
            recentStatements[nextRecentSlot] = (sql, statement)
            nextRecentSlot = (nextRecentSlot + 1) % 8
        }
    }

    /// Runs a statement that returns no rows.
    public func run(_ sql: String, _ arguments: [SQLValue] = []) throws(DatabaseError) {
        if let postgres {
            try checkOpen(sql)
            statementsRun += 1
            PQclear(try postgres.query(sql, arguments))
            return
        }
        try statement(sql).run(arguments)
    }

    /// Runs a query to its end and maps every row; the statement is reset afterwards.
    public func rows<Row>(_ sql: String, _ arguments: [SQLValue] = [],
                          map: (Statement) -> Row) throws(DatabaseError) -> [Row] {
        if let postgres {
            try checkOpen(sql)
            statementsRun += 1
            let result = try postgres.query(sql, arguments)
            defer { PQclear(result) }
            let row = Statement(postgresResult: result)
            let count = PQntuples(result)
            var rows: [Row] = []
            rows.reserveCapacity(Int(count))
            for index in 0..<count {
                row.row = index
                rows.append(map(row))
            }
            rowsRead += rows.count
            return rows
        }
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.bind(arguments)
        var rows: [Row] = []
        while try statement.step() { rows.append(map(statement)) }
        rowsRead += rows.count
        return rows
    }

    /// The first column of the first row as an integer.
    public func scalar(_ sql: String, _ arguments: [SQLValue] = []) throws(DatabaseError) -> Int64? {
        try rows(sql, arguments) { $0.optionalInt(0) }.first ?? nil
    }

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

    /// While `refuse` is true, every `COMMIT` of this connection fails and SQLite rolls the
    /// transaction back itself (SQLite's commit hook): for tests of failed commits.
    func refuseCommits(_ refuse: Bool) {
        if refuse {
            sqlite3_commit_hook(handle, { _ in 1 }, nil)
        } else {
            sqlite3_commit_hook(handle, nil, nil)
        }
    }

    /// Checkpoints the WAL and truncates the `-wal` file to zero bytes, without waiting for
    /// anyone: SQLite's `TRUNCATE` checkpoint with the busy handler off. It copies into the
    /// database every page no reader still needs; then, if no other connection reads from
    /// the WAL or writes, it empties the file. Returns whether it did; false when another
    /// connection was in the way (a reader of an older snapshot, a writer), which is not an
    /// error: only what could be copied was. Not inside a transaction of this connection.
    public func checkpointTruncatingWAL() throws(DatabaseError) -> Bool {
        try checkOpen("PRAGMA wal_checkpoint(TRUNCATE)")
        if isPostgres { return true }
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
    /// returns, so every reply of that commit waits for the checkpoint too. Deferred, a commit only notes how many
    /// pages the WAL holds, and `checkpointIfDue()`, called once the replies are out, runs
    /// the same passive checkpoint. No-op on PostgreSQL. (A later `PRAGMA wal_autocheckpoint`
    /// would bring the automatic checkpoint back: SQLite keeps one WAL hook per connection.)
    public func deferCheckpoints(fromPages pages: Int32 = 1000) {
        guard !isPostgres, pages > 0 else { return }
        deferredCheckpointPages = pages
        sqlite3_wal_hook(handle, { context, _, _, pages in
            Unmanaged<Database>.fromOpaque(context!).takeUnretainedValue().walPagesAfterCommit = pages
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// With checkpoints deferred, runs a passive checkpoint (SQLite's automatic one: it
    /// copies what no reader still needs and waits for no one) if the last commit left the
    /// WAL at the threshold or over it; returns whether it ran and succeeded. A checkpoint
    /// that fails changes nothing stored: the pages stay in the WAL and the next commit
    /// makes it due again. Returns whether it ran (even if it failed). Not inside a
    /// transaction of this connection.
    @discardableResult
    public func checkpointIfDue() -> Bool {
        guard deferredCheckpointPages > 0, walPagesAfterCommit >= deferredCheckpointPages,
              (try? checkOpen("PRAGMA wal_checkpoint(PASSIVE)")) != nil else { return false }
        walPagesAfterCommit = 0
        _ = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        return true
    }

    /// Rows inserted, updated or deleted on this connection since it opened (triggers included).
    /// Writes held back (`HeldWrites`) count as changes.
    var totalChanges: Int64 { (postgres?.changedRows ?? sqlite3_total_changes64(handle)) + heldChanges }

    /// Counts a change that `heldWrites` holds back until the commit.
    public func countHeldChange() { heldChanges += 1 }
}

/// Row writes a connection holds back until its transaction commits, so that a row changed
/// many times in one transaction is written once, with its latest values. What holds them
/// must write them (`writeHeld`) before any statement of the transaction reads those rows,
/// and forget them as savepoints roll back and transactions end; the connection calls it
/// for its own transactions and savepoints (`inTransaction`, `inSavepoint`).
public protocol HeldWrites: AnyObject, Sendable {
    /// Writes what is held; after a failure the transaction is rolled back.
    func writeHeld(in database: Database) throws
    /// A savepoint began (nested in the transaction).
    func savepointBegan()
    /// The innermost savepoint was released, or rolled back (what it held is forgotten,
    /// what was held before it is held again).
    func savepointEnded(rolledBack: Bool)
    /// The transaction committed or rolled back: nothing is held any more.
    func transactionEnded()
}

// MARK: - Transactions

/// How a transaction takes its locks.
public enum TransactionKind: Sendable {
    /// `BEGIN DEFERRED`: no lock until the first read or write (a read snapshot starts at
    /// the first read).
    case deferred
    /// `BEGIN IMMEDIATE`: the write lock at once, so the transaction never fails to upgrade
    /// a read lock later.
    case immediate
}

extension Database {
    /// Whether a transaction is open on this connection (SQLite can also end one by itself,
    /// rolling it back after some errors, such as a full disk).
    public var isInsideTransaction: Bool { postgres?.isInsideTransaction ?? (sqlite3_get_autocommit(handle) == 0) }

    /// Whether the open transaction can only be rolled back: on PostgreSQL, a statement
    /// of it failed (outside a savepoint). SQLite rolls back or keeps going by itself.
    public var transactionFailed: Bool { postgres?.transactionFailed ?? false }

    /// Runs a statement that begins, ends or marks a transaction: on PostgreSQL without
    /// preparing it.
    private func control(_ sql: String) throws(DatabaseError) {
        if postgres != nil { try execute(sql) } else { try run(sql) }
    }

    /// Runs `body` in a transaction: commits when it returns, rolls back when it throws,
    /// and rethrows. A failed `COMMIT` rolls back too and throws the commit's error. Every
    /// rollback after changes is counted in `rollbacks`.
    @discardableResult
    public func inTransaction<Value>(_ kind: TransactionKind = .deferred, _ body: () throws -> Value) throws -> Value {
        // String literals, so the statements come from the cache without hashing or allocating.
        // On PostgreSQL a deferred transaction reads one snapshot throughout (as SQLite's
        // does); an immediate one reads what is committed at each statement, which the
        // writer needs once it holds the lock all writers take (`SharedWriting`).
        switch kind {
        case .deferred: try control(isPostgres ? "BEGIN ISOLATION LEVEL REPEATABLE READ" : "BEGIN DEFERRED")
        case .immediate:
            // Where a writer waits for another process's lock: its wait, if any, is over.
            defer { busyHandler?.statementReturned() }
            try control(isPostgres ? "BEGIN" : "BEGIN IMMEDIATE")
        }
        let changesAtStart = totalChanges
        let value: Value
        do {
            value = try body()
            try heldWrites?.writeHeld(in: self)
            try control("COMMIT")
        } catch {
            rollBackTransaction(changedSince: changesAtStart)
            throw error
        }
        heldWrites?.transactionEnded()
        return value
    }

    /// Runs `body` inside a savepoint (nested in a transaction, or alone as its own
    /// transaction): releases it when `body` returns; when `body` throws, rolls back to it,
    /// releases it and rethrows, leaving the enclosing transaction as it was before. Every
    /// rollback after changes is counted in `rollbacks`. Savepoints nest.
    @discardableResult
    public func inSavepoint<Value>(_ body: () throws -> Value) throws -> Value {
        // Outside a transaction the savepoint is one, and its release commits.
        let isTransaction = !isInsideTransaction
        try control("SAVEPOINT nested")
        heldWrites?.savepointBegan()
        let changesAtStart = totalChanges
        let value: Value
        do {
            value = try body()
            if isTransaction { try heldWrites?.writeHeld(in: self) }
            try control("RELEASE nested")
        } catch {
            rollBackSavepoint(changedSince: changesAtStart)
            heldWrites?.savepointEnded(rolledBack: true)
            if isTransaction || !isInsideTransaction { heldWrites?.transactionEnded() }
            throw error
        }
        heldWrites?.savepointEnded(rolledBack: false)
        if isTransaction { heldWrites?.transactionEnded() }
        return value
    }

    /// Ends the open transaction with `ROLLBACK`, unless SQLite already rolled it back.
    private func rollBackTransaction(changedSince changesAtStart: Int64) {
        if isInsideTransaction {
            // If even ROLLBACK fails (an I/O error), there is nothing more to try: the
            // caller learns the error that got here.
            do { try control("ROLLBACK") } catch {}
        }
        noteRollback(changedSince: changesAtStart)
        heldWrites?.transactionEnded()
    }

    /// Undoes and ends the innermost savepoint.
    private func rollBackSavepoint(changedSince changesAtStart: Int64) {
        guard isInsideTransaction else {
            // SQLite already rolled back the whole transaction (after a full disk, say),
            // with whatever was changed before this savepoint too.
            rollbacks += 1
            return
        }
        do {
            try control("ROLLBACK TO nested")
            try control("RELEASE nested")
        } catch {
            // The savepoint could not be restored: end the whole transaction rather than
            // keep half of its changes. Its user learns it from `isInsideTransaction`.
            do { try control("ROLLBACK") } catch {}
            rollbacks += 1
            return
        }
        noteRollback(changedSince: changesAtStart)
    }

    /// Counts a rollback in `rollbacks` if rows had changed since `changesAtStart`. A
    /// rollback that undid nothing leaves what caches remember true.
    private func noteRollback(changedSince changesAtStart: Int64) {
        if totalChanges != changesAtStart { rollbacks += 1 }
    }
}

/// A value bound to a statement parameter.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// A prepared SQLite statement, reset by `Database.statement(_:)` before each use; or, on
/// PostgreSQL, a row of a query's result. `Database.rows(_:_:map:)` hands it to its `map`
/// positioned on each row in turn: read the columns there, never keep it.
public final class Statement {
    private let sqliteHandle: OpaquePointer?
    private unowned let database: Database?
    private let sql: String
    /// On PostgreSQL: the result, and the row the column accessors read.
    private let postgresResult: OpaquePointer?
    var row: Int32 = 0
    /// How many parameters the SQL has (SQLite only).
    private let parameterCount: Int

    private var handle: OpaquePointer { sqliteHandle! }

    init(_ handle: OpaquePointer, database: Database, sql: String) {
        sqliteHandle = handle
        self.database = database
        self.sql = sql
        postgresResult = nil
        parameterCount = Int(sqlite3_bind_parameter_count(handle))
    }

    /// Rows of `result` (a PostgreSQL result, cleared by its owner).
    init(postgresResult result: OpaquePointer) {
        sqliteHandle = nil
        database = nil
        sql = ""
        postgresResult = result
        parameterCount = 0
    }

    deinit { if let sqliteHandle { sqlite3_finalize(sqliteHandle) } }

    /// Ends the statement's last run; its bindings stay until `bind` replaces them.
    func reset() {
        sqlite3_reset(handle)
    }

    /// Binds `values` to parameters 1, 2, …; parameters past them are NULL. Clearing the
    /// last run's bindings costs a pass over every parameter, so it is done only when some
    /// would not be bound again.
    public func bind(_ values: [SQLValue]) throws(DatabaseError) {
        if values.count < parameterCount { sqlite3_clear_bindings(handle) }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let number): code = sqlite3_bind_int64(handle, index, number)
            case .real(let number): code = sqlite3_bind_double(handle, index, number)
            case .text(var text):
                // Through the text's own bytes (a String passed as a C pointer is first
                // copied into a new array); an empty text's buffer may have no address,
                // which SQLite would bind as NULL.
                code = text.withUTF8 { utf8 in
                    guard let start = utf8.baseAddress, !utf8.isEmpty else {
                        return sqlite3_bind_text(handle, index, "", 0, headway_sqlite_transient())
                    }
                    return sqlite3_bind_text(handle, index, UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self),
                                             Int32(utf8.count), headway_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else { throw DatabaseError(code: code, message: database!.lastErrorMessage, sql: sql) }
        }
    }

    /// Advances to the next row: true when a row is available, false when done.
    @discardableResult
    public func step() throws(DatabaseError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code:
            let systemError = database!.lastSystemError  // first, while the thread's errno is the failure's
            let error = DatabaseError(code: code, message: database!.lastErrorMessage, sql: sql, systemError: systemError)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Binds `values`, runs the statement to its end and resets it (which ends its read).
    public func run(_ values: [SQLValue] = []) throws(DatabaseError) {
        defer { sqlite3_reset(handle) }
        try bind(values)
        while try step() {}
    }

    public func isNull(_ column: Int32) -> Bool {
        if let postgresResult { return PQgetisnull(postgresResult, row, column) == 1 }
        return sqlite3_column_type(handle, column) == SQLITE_NULL
    }
    public func int(_ column: Int32) -> Int64 {
        if let postgresResult {
            // A boolean comes as `t` or `f`: 1 or 0, as SQLite gives it.
            guard let value = PQgetvalue(postgresResult, row, column) else { return 0 }
            switch UInt8(bitPattern: value.pointee) {
            case UInt8(ascii: "t"): return 1
            case UInt8(ascii: "f"): return 0
            default: return strtoll(value, nil, 10)
            }
        }
        return sqlite3_column_int64(handle, column)
    }
    public func double(_ column: Int32) -> Double {
        if let postgresResult { return strtod(PQgetvalue(postgresResult, row, column), nil) }
        return sqlite3_column_double(handle, column)
    }
    public func optionalInt(_ column: Int32) -> Int64? { isNull(column) ? nil : int(column) }
    public func text(_ column: Int32) -> String {
        if let postgresResult {
            guard let pointer = PQgetvalue(postgresResult, row, column) else { return "" }
            return String(cString: pointer)
        }
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: pointer)
    }
    public func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
}
