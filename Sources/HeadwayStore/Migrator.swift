/// One forward-only schema migration, from `migrations/NNNN_name.sql`.
public struct Migration: Sendable, Equatable {
    /// The number in the file name; migrations run in this order.
    public var version: Int
    /// The file name without its number and extension.
    public var name: String
    /// The SQL text, exactly as in the file.
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Why a database cannot be migrated.
public enum MigrationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The database records a schema version above every migration this build has: a newer
    /// build migrated it, and this one would misread it.
    case databaseIsNewer(databaseVersion: Int, latestKnownVersion: Int)
    /// The database has never been migrated by Headway but holds tables with the names of
    /// Headway's (another application's): it is left as it was.
    case foreignTables([String])

    /// What went wrong and what to do, as `headwayd` prints it.
    public var description: String {
        switch self {
        case .databaseIsNewer(let databaseVersion, let latestKnownVersion):
            "the database was migrated by a newer Headway (schema version \(databaseVersion); "
                + "this build knows up to \(latestKnownVersion)); upgrade headwayd or use another database"
        case .foreignTables(let names):
            "the database holds tables Headway did not create (\(names.joined(separator: ", "))): "
                + "it belongs to another application; give headwayd a database of its own"
        }
    }
}

/// Applies migrations in order, each in its own immediate transaction together with its
/// bookkeeping row in `schema_migrations`, so a migration is either wholly applied and
/// recorded or not at all. A database migrated by a newer build is refused untouched.
public struct Migrator: Sendable {
    /// The migrations this build knows, in version order.
    public let migrations: [Migration]

    /// A migrator for `migrations` (by default those compiled in from `migrations/`).
    public init(_ migrations: [Migration] = EmbeddedMigrations.all) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// A migrator for the engine `location` names: the SQLite migrations for a file, the
    /// PostgreSQL ones (`migrations/postgres/`) for a `postgresql://` URI.
    public init(forLocation location: String) {
        self.init(storageEngine(for: location).migrations)
    }

    /// The highest version this build knows (0 when it knows none).
    public var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies every migration not yet recorded; returns the versions applied. Throws
    /// `MigrationError.databaseIsNewer`, changing nothing, when the database records a
    /// version above `latestVersion`.
    @discardableResult
    public func migrate(_ database: Database) throws -> [Int] {
        // Daemons sharing a database migrate one after the other (PostgreSQL's advisory
        // lock, `SQLDialect.beginMigrating`).
        let dialect = database.dialect
        try dialect.beginMigrating(database)
        defer { dialect.endMigrating(database) }
        try database.inTransaction(.immediate) {
            try dialect.lockOutOtherMigrations(database)
            try dialect.refuseForeignTables(database)
            try database.execute(dialect.createSchemaMigrations)
            let recorded = try Self.recordedVersion(in: database)
            if recorded > latestVersion {
                throw MigrationError.databaseIsNewer(databaseVersion: recorded, latestKnownVersion: latestVersion)
            }
        }
        var applied: [Int] = []
        for migration in migrations {
            let version = SQLValue.integer(Int64(migration.version))
            try database.inTransaction(.immediate) {
                try dialect.lockOutOtherMigrations(database)
                guard try database.scalar("SELECT 1 FROM schema_migrations WHERE version = ?", [version]) == nil else { return }
                try database.execute(migration.sql)
                try database.run("INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                                 [version, .text(migration.name)])
                applied.append(migration.version)
            }
        }
        return applied
    }

    /// The highest version recorded in `database` (0 when none); throws when the database
    /// has no `schema_migrations` table.
    public static func recordedVersion(in database: Database) throws(DatabaseError) -> Int {
        Int(try database.scalar("SELECT max(version) FROM schema_migrations") ?? 0)
    }
}

/// Prepares the daemon's database before it serves: the WAL journal, every migration, and
/// the change sequence where it stands.
public struct DatabaseSetup: Sendable {
    /// The migration versions applied now (empty when the database was up to date).
    public let appliedMigrations: [Int]
    /// Hands out change numbers, loaded from the database.
    public let changeCounter: ChangeCounter

    /// Opens (creating if needed) the database at `path`, migrates it, switches an SQLite
    /// file to WAL and loads its change sequence; the connection is closed again. Throws
    /// `MigrationError.databaseIsNewer` for a database from a newer build, which it leaves
    /// as it was (hence WAL only after migrating).
    /// `stopRequested`: asked while a PostgreSQL migration, or the wait for another daemon's,
    /// is awaited (they have no time limit); true ends the wait, failing the setup.
    public static func open(path: String, migrator: Migrator? = nil,
                            stopRequested: (@Sendable () -> Bool)? = nil) throws -> DatabaseSetup {
        let database = try Database(path: path)
        defer { database.close() }
        if let stopRequested, let postgres = database.connection as? PostgresConnection {
            postgres.waitInterrupted = stopRequested
        }
        let applied = try (migrator ?? Migrator(forLocation: path)).migrate(database)
        try database.dialect.finishMigrating(database)
        return DatabaseSetup(appliedMigrations: applied, changeCounter: try ChangeCounter(database: database))
    }
}
