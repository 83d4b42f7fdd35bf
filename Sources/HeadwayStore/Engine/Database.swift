import Synchronization

// @unchecked Sendable: it owns a storage engine's C handle (`connection`: SQLite's or
// libpq's); `confinement` checks its use.
/// One connection to the database, whichever engine holds it: an SQLite file, or a
/// PostgreSQL server when its location is a `postgresql://` URI (`storageEngine(for:)`).
/// The engine's connection (`EngineConnection`) runs the statements; the statements whose
/// text differs between the engines come from its `dialect`. A connection is used by one
/// thread at a time: its owner says which (`confine(to:)`) and every statement checks it.
/// Transactions and savepoints go through `inTransaction(_:_:)` and `inSavepoint(_:)`,
/// which commit, roll back and keep `rollbacks` themselves.
public final class Database: @unchecked Sendable {
    /// The engine's connection, which runs the statements.
    let connection: any EngineConnection
    /// The statements whose text differs between the engines, for this connection's.
    let dialect: any SQLDialect
    /// Which threads may use the connection now, as `ThreadConfinement.encoded`. Atomic, so
    /// that a thread the connection does not belong to reads it without a data race.
    let confinementValue = Atomic<UInt>(ThreadConfinement.anyThread.encoded)
    private var isClosed = false
    /// The file this connection opened (or the PostgreSQL URI).
    public let path: String
    /// How many times a transaction or savepoint of this connection was rolled back after
    /// it had changed rows (counted by `inTransaction` and `inSavepoint`): caches of what
    /// the connection stored check it, and forget what they hold when it moves.
    public private(set) var rollbacks = 0
    /// How many statements this connection has run (each use of a prepared statement
    /// counts once): what tests count to check that work grows as it should.
    public var statementsRun: Int { connection.statementsRun }
    /// Rows returned by this connection's queries (`rows(_:_:map:)`), for tests and
    /// measurements of how much a read touches.
    public private(set) var rowsRead = 0
    /// What holds row writes back until this connection's transaction commits (the task
    /// cache's held writes, `TaskCache`): told as savepoints and transactions begin and end,
    /// and asked to write what it holds before each commit.
    public var heldWrites: (any HeldWrites)?
    /// Changes held back by `heldWrites`, counted in `totalChanges` as if written, so that
    /// "did this change anything" means the same whether a write is held or made.
    private var heldChanges: Int64 = 0
    /// How many times `heldWrites` wrote what it held (`heldWritesMade`).
    private var heldWritesSent: Int64 = 0
    /// What must run before the next statement of the open transaction that is not a read
    /// of a task by id (`withoutOrder`): the shared writer's taking of the order all
    /// writers share (`SharedWriting`), when its batch runs ahead of it. Cleared as it runs.
    var orderGate: (any OrderGate)?
    /// Set when `orderGate` found the batch's reads outrun by another daemon: every later
    /// statement of the transaction fails, so that nothing of the batch goes on (the writer
    /// looks at it after each job, whatever a job did with the error).
    private(set) var orderLost = false
    /// Inside `withoutOrder`: statements pass `orderGate` by.
    private var passingOrderGate = false

    /// Opens (creating if needed: an SQLite file is made mode 0600, never through a
    /// symbolic link, `PrivateFile`) the database at `path`, or connects to the PostgreSQL
    /// server `path` names (`postgresql://…`). `readOnly`: a connection that refuses every
    /// write (an SQLite file opened read-only; a PostgreSQL session whose transactions are
    /// read-only by default).
    public convenience init(path: String, readOnly: Bool = false) throws(DatabaseError) {
        try self.init(path: path, access: readOnly ? .readOnly : .readWrite)
    }

    /// Opens the database at `path` for `access`.
    init(path: String, access: ConnectionAccess) throws(DatabaseError) {
        self.path = path
        connection = try openEngineConnection(location: path, access: access)
        dialect = connection.dialect
    }

    /// How long a statement waits for a lock another connection holds (another process's
    /// write transaction, say) before it fails as busy (`DatabaseError.isBusy`).
    public static let busyTimeoutMilliseconds: Int32 = 5000

    deinit { close() }

    /// Closes the connection (its statements first); later calls throw. Closing the last
    /// connection of an SQLite WAL database checkpoints it and removes the `-wal` file.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        connection.close()
    }

    /// Every statement starts here: the connection must be open and used on its own thread.
    func checkOpen(_ sql: String) throws(DatabaseError) {
        precondition(isUsable(on: .current),
                     "database connection to \(path) used on \(ThreadID.current), but it is \(confinement)")
        if isClosed { throw DatabaseError.misuse("the connection is closed", sql: sql) }
    }

    /// Runs one or more statements that return no rows.
    public func execute(_ sql: String) throws(DatabaseError) {
        try checkOpen(sql)
        try checkOrder()
        try connection.execute(sql)
    }

    /// Runs a statement that returns no rows.
    public func run(_ sql: String, _ arguments: [SQLValue] = []) throws(DatabaseError) {
        try checkOpen(sql)
        try checkOrder()
        try connection.run(sql, arguments)
    }

    /// Runs a query to its end and maps every row (`map` reads the columns of the row it
    /// is handed, and never keeps it).
    public func rows<Row>(_ sql: String, _ arguments: [SQLValue] = [],
                          map: (any ResultRow) -> Row) throws(DatabaseError) -> [Row] {
        try checkOpen(sql)
        try checkOrder()
        let rows = try connection.rows(sql, arguments, map: map)
        rowsRead += rows.count
        return rows
    }

    /// The first column of the first row as an integer.
    public func scalar(_ sql: String, _ arguments: [SQLValue] = []) throws(DatabaseError) -> Int64? {
        try rows(sql, arguments) { $0.optionalInt(0) }.first ?? nil
    }

    /// Rows inserted, updated or deleted on this connection since it opened (triggers
    /// included on SQLite). Writes held back (`HeldWrites`) count as changes.
    var totalChanges: Int64 { connection.changedRows + heldChanges }

    /// Counts a change that `heldWrites` holds back until the commit.
    public func countHeldChange() { heldChanges += 1 }

    /// Notes that `heldWrites` wrote what it held (or sent it, in a pipeline, whose
    /// statements' changes are not counted until answered) and remembers it as stored.
    public func heldWritesMade() { heldWritesSent += 1 }

    /// Rows written by statements, and writes of what was held: what a rollback undoes
    /// (`noteRollback`).
    private var changesMade: Int64 { connection.changedRows + heldWritesSent }
}

/// What a statement of a batch that runs ahead of the order all writers share must wait
/// for (`Database.orderGate`).
protocol OrderGate: AnyObject {
    /// Takes the order, before the statement runs; throws `DatabaseError.lostOrder()` if
    /// the batch must run again.
    func takeOrder(in database: Database) throws
}

extension Database {
    /// Before a statement: passes `orderGate` (unless inside `withoutOrder`), and fails
    /// once the order was lost.
    @inline(__always)
    private func checkOrder() throws(DatabaseError) {
        if orderGate != nil || orderLost { try passOrderGate() }
    }

    /// Takes the order now if the batch runs ahead of it (`orderGate`): before numbers
    /// handed out ahead of it are written by a statement (they may move, `ChangeCounter`).
    func passOrderGate() throws(DatabaseError) {
        if orderLost { throw DatabaseError.lostOrder() }
        guard !passingOrderGate, let gate = orderGate else { return }
        orderGate = nil
        do {
            try gate.takeOrder(in: self)
        } catch let error as DatabaseError {
            if error.orderMoved { orderLost = true }
            throw error
        } catch {
            throw DatabaseError(code: 1, message: "\(error)", sql: nil)
        }
    }

    /// Runs `body`, a read of tasks by their ids, without taking the order: the shared
    /// writer notes each task its batch reads (`TaskCache`) and checks, when it takes the
    /// order, that no other daemon wrote one of them since.
    func withoutOrder<Value>(_ body: () throws(DatabaseError) -> Value) throws(DatabaseError) -> Value {
        let outer = passingOrderGate
        passingOrderGate = true
        defer { passingOrderGate = outer }
        return try body()
    }

    /// Ends a batch's use of the order gate (the transaction ended).
    func clearOrderGate() {
        orderGate = nil
        orderLost = false
    }
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
    /// A read snapshot from the first read on (SQLite's `BEGIN DEFERRED`: no lock until
    /// the first read or write; PostgreSQL's `REPEATABLE READ`).
    case deferred
    /// SQLite's `BEGIN IMMEDIATE`: the write lock at once, so the transaction never fails
    /// to upgrade a read lock later. On PostgreSQL each statement reads what is committed
    /// when it runs, which the writer needs once it holds the lock all writers take
    /// (`SharedWriting`).
    case immediate
}

extension Database {
    /// Whether a transaction is open on this connection (SQLite can also end one by itself,
    /// rolling it back after some errors, such as a full disk).
    public var isInsideTransaction: Bool { connection.isInsideTransaction }

    /// Whether the open transaction can only be rolled back: on PostgreSQL, a statement
    /// of it failed (outside a savepoint). SQLite rolls back or keeps going by itself.
    public var transactionFailed: Bool { connection.transactionFailed }

    /// From now until the open transaction ends, the statements that return no rows
    /// (`run`) need not wait for their answers: on PostgreSQL they are sent at once, in
    /// libpq's pipeline mode, and the `COMMIT` behind them, whose call reads every answer
    /// (one round trip for all); nothing changes on SQLite, whose statements run in
    /// process. A statement's failure is then thrown by a later call (the `COMMIT`'s, or a
    /// query's, or a savepoint statement's: each reads the answers first, and the pipelining
    /// goes on after it), flagged `DatabaseError.pipelined`, and the transaction can only be
    /// rolled back (to a savepoint begun before the statement, or whole). Only for
    /// statements whose failure the caller handles at the commit: the writer's batch end
    /// (`GroupCommitWriter.runBatch`). Once the `COMMIT` is answered, the transaction is
    /// committed, whatever happens to the connection after.
    func pipelineUntilCommit() {
        connection.pipelineUntilCommit()
    }

    /// Runs a statement that begins, ends or marks a transaction.
    private func control(_ sql: String) throws(DatabaseError) {
        try checkOpen(sql)
        try connection.control(sql)
    }

    /// Runs `body` in a transaction: commits when it returns, rolls back when it throws,
    /// and rethrows. A failed `COMMIT` rolls back too and throws the commit's error. Every
    /// rollback after changes is counted in `rollbacks`.
    @discardableResult
    public func inTransaction<Value>(_ kind: TransactionKind = .deferred, _ body: () throws -> Value) throws -> Value {
        switch kind {
        case .deferred: try control(dialect.beginDeferred)
        case .immediate:
            // Where a writer waits for another process's lock: its wait, if any, is over.
            defer { connection.lockWaitEnded() }
            try control(dialect.beginImmediate)
        }
        let changesAtStart = changesMade
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
        clearOrderGate()
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
        let changesAtStart = changesMade
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
        } else {
            connection.transactionEndedUnsent()
        }
        noteRollback(changedSince: changesAtStart)
        heldWrites?.transactionEnded()
        clearOrderGate()
    }

    /// Undoes and ends the innermost savepoint.
    private func rollBackSavepoint(changedSince changesAtStart: Int64) {
        guard isInsideTransaction else {
            // SQLite already rolled back the whole transaction (after a full disk, say),
            // with whatever was changed before this savepoint too (or its connection was lost).
            connection.transactionEndedUnsent()
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

    /// Counts a rollback in `rollbacks` if rows were written since `changesAtStart`
    /// (`changesMade`). A rollback that undid nothing leaves what caches remember true;
    /// changes only held (`heldWrites`) are undone by what holds them, told of the
    /// rollback, and no cache learned them as stored.
    private func noteRollback(changedSince changesAtStart: Int64) {
        if changesMade != changesAtStart { rollbacks += 1 }
    }
}

/// A value bound to a statement parameter.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// One row of a query's result, as `Database.rows(_:_:map:)` hands it to its `map`: read
/// the columns there (numbered from 0), never keep it.
public protocol ResultRow {
    /// Whether the column is NULL.
    func isNull(_ column: Int32) -> Bool
    /// The column as an integer (a boolean as 1 or 0; NULL as 0).
    func int(_ column: Int32) -> Int64
    /// The column as a floating-point number.
    func double(_ column: Int32) -> Double
    /// The column as text (NULL as "").
    func text(_ column: Int32) -> String
}

extension ResultRow {
    /// The column as an integer, nil when NULL.
    public func optionalInt(_ column: Int32) -> Int64? { isNull(column) ? nil : int(column) }
    /// The column as text, nil when NULL.
    public func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
}

// MARK: - What differs by engine, asked of the connection

extension Database {
    /// Sets this connection up as the daemon's writer (`GroupCommitWriter`): `durability`,
    /// SQLite's WAL kept under `walSizeLimit` with its checkpoints after the replies, long
    /// lock waits told to `lockWaits`; on PostgreSQL the writer's session settings.
    func prepareForWriting(durability: Durability, walSizeLimit: Int, lockWaits: LockWaits) throws(DatabaseError) {
        try checkOpen("PRAGMA journal_mode = WAL")
        try connection.prepareForWriting(durability: durability, walSizeLimit: walSizeLimit, lockWaits: lockWaits)
    }

    /// Tells `waits` whenever a statement of this connection waits for a lock another
    /// connection holds (SQLite's busy handler; the wait itself stays
    /// `busyTimeoutMilliseconds`).
    public func reportLockWaits(to waits: LockWaits) {
        connection.reportLockWaits(to: waits)
    }

    /// Runs the checkpoint the last commits made due (SQLite's WAL; never on PostgreSQL,
    /// whose WAL is the server's); returns whether it ran. Not inside a transaction.
    @discardableResult
    public func checkpointIfDue() -> Bool {
        guard (try? checkOpen("PRAGMA wal_checkpoint(PASSIVE)")) != nil else { return false }
        return connection.checkpointIfDue()
    }

    /// The bytes of the database's own write-ahead log: SQLite's `-wal` file; 0 on
    /// PostgreSQL, whose WAL is the server's.
    var writeAheadLogBytes: Int { connection.writeAheadLogBytes }

    /// Empties SQLite's `-wal` file without waiting for anyone; returns whether it did
    /// (false: another connection was in the way, which is not an error). True at once on
    /// PostgreSQL. Not inside a transaction of this connection.
    public func checkpointTruncatingWAL() throws(DatabaseError) -> Bool {
        try checkOpen("PRAGMA wal_checkpoint(TRUNCATE)")
        return try connection.checkpointTruncatingWAL()
    }

    /// How big the database is on its storage (`GET /metrics`).
    public func storageSizes() throws(DatabaseError) -> StorageSizes {
        try checkOpen("storage sizes")
        return try connection.storageSizes()
    }

    /// A write that changes nothing but fails where any write would (a full disk, a
    /// read-only file or standby, an I/O error): the readiness probe.
    public func probeWrite() throws(DatabaseError) {
        try dialect.probeWrite(in: self)
    }

    /// While `refuse` is true, every `COMMIT` of this connection fails and SQLite rolls the
    /// transaction back itself (SQLite's commit hook): for tests of failed commits.
    func refuseCommits(_ refuse: Bool) {
        connection.refuseCommits(refuse)
    }
}
