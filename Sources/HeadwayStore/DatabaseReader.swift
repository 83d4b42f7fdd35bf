import Lifecycle
import Foundation

/// A connection for queries, shared under a lock. WAL lets it read while the writer commits.
/// The connection is confined to the thread holding the lock while it reads, and to no
/// thread between reads, so a connection kept past its read is caught when used.
public final class DatabaseReader: Sendable {
    private let database: Database
    /// Held by one reader at a time.
    private let inUse = Locked<Void>(())

    /// Opens a connection to an existing database, for reading only.
    public init(path: String) throws(DatabaseError) {
        database = try Database(path: path, access: .queries)
        database.confine(to: .noThread)
    }

    /// Closes the connection; later reads throw.
    public func close() { inUse.withLock { _ in database.close() } }

    /// Runs `body` with the connection, one caller at a time.
    public func read<Value>(_ body: (Database) throws -> Value) rethrows -> Value {
        try inUse.withLock { _ in
            database.confine(to: .currentThread)
            defer { database.confine(to: .noThread) }
            return try body(database)
        }
    }

    /// Runs `body` in one read transaction, so everything it reads is one snapshot.
    public func snapshot<Value>(_ body: (Database) throws -> Value) throws -> Value {
        try read { database in try database.inTransaction(.deferred) { try body(database) } }
    }

    /// The latest schema version recorded in the database (0 before any migration); throws
    /// when the database cannot be read or was never set up. The readiness check.
    public func schemaVersion() throws -> Int {
        try read { database in try Migrator.recordedVersion(in: database) }
    }
}
