import CSQLite
import Glibc

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
    /// Whether the statement was sent ahead of the one whose call reported its failure
    /// (`Database.pipelineUntilCommit`): it failed inside the still open transaction, which
    /// then skipped the statements sent after it, the `COMMIT` too.
    public var pipelined = false
    /// Whether the batch ran ahead of the order all writers share and lost it: another
    /// daemon wrote tasks the batch had read (`Database.orderGate`). Nothing of the batch
    /// is kept; the writer runs it again holding the order from its start.
    public var orderMoved = false

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

extension DatabaseError {
    /// The batch lost its place in the writers' order (`orderMoved`).
    static func lostOrder() -> DatabaseError {
        var error = DatabaseError(code: SQLITE_ABORT, message: "another daemon wrote tasks this batch read; it runs again",
                                  sql: nil)
        error.orderMoved = true
        return error
    }

    /// A misuse of the connection (`SQLITE_MISUSE`): a statement on a closed one, say.
    static func misuse(_ message: String, sql: String?) -> DatabaseError {
        DatabaseError(code: SQLITE_MISUSE, message: message, sql: sql)
    }
}
