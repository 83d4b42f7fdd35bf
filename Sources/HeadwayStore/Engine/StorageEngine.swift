import Glibc
import HeadwayCore

/// The storage engine a `--db` location names, as the daemon sees the store as a whole:
/// the questions it asks instead of looking at the location itself.
/// `SQLiteEngine` (a file) and `PostgresEngine` (a `postgresql://` URI) answer them.
public protocol StorageEngine: Sendable {
    /// The location (`--db`): a file's path or a PostgreSQL URI.
    var location: String { get }
    /// Whether several daemons may write the database at once: each batch then takes the
    /// writers' lock and delivers the others' changes (`SharedWriting`, `ChangeListener`),
    /// and one daemon at a time leads the maintenance and the webhooks (`Leadership`).
    var isShared: Bool { get }
    /// The migrations that build this engine's schema, in version order.
    var migrations: [Migration] { get }
    /// The permission bits of the database's file when they let others than its owner
    /// read or write it; nil when they do not, or when there is no file of ours.
    func fileModeOpenToOthers() -> mode_t?
    /// Why `headway db` (which works on the file itself) cannot work on this database;
    /// nil when it can.
    var fileCommandsRefusal: String? { get }
    /// Waits, at most `seconds`, while the database's server takes no connections (it does
    /// not answer, or starts up, shuts down or recovers), telling `waiting` what it found
    /// at once and then every `waitReportSeconds`; returns as soon as the server takes
    /// connections, or when what stands in the way will not pass by itself (a wrong
    /// password, a missing database: opening the database then says so), or once
    /// `stopRequested` says so (it is asked about once a second). Returns nil when it
    /// stopped waiting because the server takes connections (at once for a file) or will
    /// not by itself; else, having given up, what it found last.
    func waitForServer(upTo seconds: Double, stopRequested: () -> Bool,
                       waiting: (_ waitedSeconds: Double, _ finding: String) -> Void) -> String?
}

/// How often a daemon waiting for its database's server at start says it still waits.
public let waitReportSeconds = 10.0

/// The engine that `location` names: PostgreSQL for a `postgresql://` (or `postgres://`)
/// URI, else an SQLite file.
public func storageEngine(for location: String) -> any StorageEngine {
    isPostgresLocation(location) ? PostgresEngine(location: location) : SQLiteEngine(location: location)
}

/// How big the database is on its storage, for `GET /metrics`.
public struct StorageSizes: Sendable, Equatable {
    /// The database's own bytes (SQLite: the file; PostgreSQL: the server's count of the
    /// database's files).
    public var databaseBytes: Int64
    /// The write-ahead log's bytes that are the database's own (SQLite's `-wal` file;
    /// 0 on PostgreSQL, whose WAL is the server's).
    public var writeAheadLogBytes: Int64

    public init(databaseBytes: Int64, writeAheadLogBytes: Int64) {
        self.databaseBytes = databaseBytes
        self.writeAheadLogBytes = writeAheadLogBytes
    }
}

/// What a connection is opened for.
enum ConnectionAccess {
    /// Reads and writes.
    case readWrite
    /// Refuses every write, from the open on (`headway db`, a token check at start).
    case readOnly
    /// A reader of a database the daemon writes (`DatabaseReader`): refuses writes, but
    /// may share what a writer's connection uses (SQLite's `-shm`).
    case queries
}

/// Opens a connection of the engine `location` names.
func openEngineConnection(location: String, access: ConnectionAccess) throws(DatabaseError) -> any EngineConnection {
    if isPostgresLocation(location) { return try PostgresConnection(location: location, access: access) }
    return try SQLiteConnection(path: location, access: access)
}

/// One connection of a storage engine, as `Database` runs statements on it. Used on one
/// thread at a time (`Database` checks which). Statements use SQLite's parameter markers
/// (`?`, `?N`); an engine that numbers them otherwise translates.
protocol EngineConnection: AnyObject {
    /// The statements whose text differs between the engines, for this one.
    var dialect: any SQLDialect { get }
    /// How many statements have run (each use of a prepared statement counts once).
    var statementsRun: Int { get }
    /// Rows inserted, updated or deleted by this connection's statements.
    var changedRows: Int64 { get }
    /// Whether a transaction is open (or failed and not yet rolled back).
    var isInsideTransaction: Bool { get }
    /// Whether the open transaction failed and can only be rolled back.
    var transactionFailed: Bool { get }

    /// Runs one or more statements without parameters and without rows.
    func execute(_ sql: String) throws(DatabaseError)
    /// Runs a statement that returns no rows.
    func run(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError)
    /// Runs a query to its end and maps every row.
    func rows<Row>(_ sql: String, _ arguments: [SQLValue], map: (any ResultRow) -> Row) throws(DatabaseError) -> [Row]
    /// Runs a statement that begins, ends or marks a transaction.
    func control(_ sql: String) throws(DatabaseError)
    /// Until the transaction ends, statements that return no rows may be sent without
    /// waiting for their answers, which the `COMMIT` reads (`Database.pipelineUntilCommit`).
    func pipelineUntilCommit()
    /// The open transaction ended without a `ROLLBACK` sent (its connection was lost, or
    /// the engine rolled it back itself).
    func transactionEndedUnsent()
    /// Closes the connection; its statements first.
    func close()

    /// Sets the connection up as the daemon's writer: `durability`, and what keeps a
    /// write-ahead log of its own under `walSizeLimit`; long waits for other processes'
    /// locks told to `lockWaits`.
    func prepareForWriting(durability: Durability, walSizeLimit: Int, lockWaits: LockWaits) throws(DatabaseError)
    /// Tells `waits` whenever a statement waits for a lock another connection holds (the
    /// wait itself stays `Database.busyTimeoutMilliseconds`).
    func reportLockWaits(to waits: LockWaits)
    /// A statement that waited for another connection's lock has returned.
    func lockWaitEnded()
    /// Runs the checkpoint that the writer's last commits made due, if any (an engine
    /// whose log is the server's has none); returns whether it ran.
    func checkpointIfDue() -> Bool
    /// The bytes of the database's own write-ahead log (0 when the log is the server's).
    var writeAheadLogBytes: Int { get }
    /// Empties the database's own write-ahead log into the database without waiting for
    /// anyone; returns whether it did (false: another connection was in the way).
    func checkpointTruncatingWAL() throws(DatabaseError) -> Bool
    /// The database's size on its storage.
    func storageSizes() throws(DatabaseError) -> StorageSizes
    /// Copies the database into the empty file at `destinationPath` while others write.
    func backup(to destinationPath: String) throws(DatabaseError)
    /// While `refuse` is true, every `COMMIT` fails and the transaction is rolled back:
    /// for tests of failed commits (SQLite's commit hook).
    func refuseCommits(_ refuse: Bool)
}

/// Where queries find tasks by a column whose value changes often (a task's change number,
/// its stall deadline): `source` is the table expression to read tasks from (`tasks`, or
/// `tasks` joined to a table that indexes the column apart), `column` the column's name
/// there. The queries name `tasks`' own columns unqualified besides it.
struct TasksByColumn: Sendable {
    let source: String
    let column: String
}

/// What the engines' SQL differs in, chosen once per connection (`Database.dialect`):
/// statement texts, and the few reads and writes whose shape differs.
protocol SQLDialect: Sendable {
    /// Begins a transaction that reads one snapshot throughout (`TransactionKind.deferred`).
    var beginDeferred: String { get }
    /// Begins the writer's transaction (`TransactionKind.immediate`).
    var beginImmediate: String { get }
    /// A query with one row when the schema has a `schema_migrations` table, none when not.
    var schemaMigrationsTableQuery: String { get }
    /// Creates `schema_migrations` unless it exists.
    var createSchemaMigrations: String { get }
    /// Forgets a task's output lines (`?1`) older than the newest that fit in `?2` bytes
    /// together (`TaskOutput.append`): the engines count a text's bytes differently.
    var trimOutput: String { get }

    /// Where the change feed finds tasks by their latest change number (`ChangeFeed`).
    var changeNumbers: TasksByColumn { get }
    /// Where the sweeper finds tasks by their stored stall deadline (`TaskRepository.dueForStallCheck`).
    var stallDeadlines: TasksByColumn { get }
    /// Where the change sequence stands (`ChangeFeed.position`).
    func changeFeedPosition(in database: Database) throws(DatabaseError) -> ChangeFeed.Position
    /// Up to `limit` keys of the tasks holding `text` that match the rest of `filter`,
    /// newest first, below `beforeKey` (`SQLiteTaskSearch`, `PostgresTaskSearch`).
    func searchKeys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                    in database: Database) throws(DatabaseError) -> [Int64]
    /// How many tasks hold `text` and match the rest of `filter`.
    func searchCount(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64
    /// A write that changes nothing but fails where any write would (the readiness probe).
    func probeWrite(in database: Database) throws(DatabaseError)
    /// Writes the changes of tasks and the history samples a writer's batch held back
    /// (`TaskCache.writeHeld`): each change over the task as its row stores it
    /// (`previous`), each sample replacing one of the same task and second.
    func writeHeldTasks(_ changes: [(task: TaskRecord, previous: TaskRecord)], samples: [History.Sample],
                        in database: Database) throws(DatabaseError)

    /// Waits for, and takes, what keeps other daemons from migrating at the same time,
    /// for the whole migration (outside a transaction).
    func beginMigrating(_ database: Database) throws
    /// Gives back what `beginMigrating` took.
    func endMigrating(_ database: Database)
    /// Inside each migration's transaction: waits for other daemons' migrations.
    func lockOutOtherMigrations(_ database: Database) throws(DatabaseError)
    /// Throws `MigrationError.foreignTables` when the database was never migrated by
    /// Headway but holds tables with the names of Headway's.
    func refuseForeignTables(_ database: Database) throws
    /// What the database needs once migrated, before the daemon serves (SQLite: WAL).
    func finishMigrating(_ database: Database) throws(DatabaseError)
}
