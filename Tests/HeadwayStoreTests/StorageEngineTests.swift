import Foundation
import Glibc
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// What the daemon asks of the store as a whole (`StorageEngine`, `Database.storageSizes`),
/// answered by each engine, and the rule that keeps each engine in its own files.
@Suite struct StorageEngineTests {
    /// The repository's `Sources` folder, found from this file's path.
    static let sourcesFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources")

    @Test func anSQLiteFileIsOneDaemonsOwnFile() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("db.sqlite")
        let engine = storageEngine(for: path)
        #expect(!engine.isShared)
        #expect(engine.migrations == EmbeddedMigrations.all)
        #expect(engine.fileCommandsRefusal == nil)
        let setup = try DatabaseSetup.open(path: path)
        #expect(!setup.appliedMigrations.isEmpty)
        #expect(engine.fileModeOpenToOthers() == nil, "made 0600")
        chmod(path, 0o644)
        #expect(engine.fileModeOpenToOthers() == 0o644)

        let writer = try Database(path: path)
        try writer.execute("PRAGMA journal_mode = WAL")
        try writer.probeWrite()
        let sizes = try writer.storageSizes()
        var status = stat()
        #expect(stat(path, &status) == 0)
        #expect(sizes.databaseBytes == Int64(status.st_size))
        #expect(stat(path + "-wal", &status) == 0)
        #expect(sizes.writeAheadLogBytes == Int64(status.st_size))
        #expect(sizes.writeAheadLogBytes > 0, "the probe's write went to the WAL")
        writer.close()
    }

    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aPostgreSQLDatabaseIsSharedAndHasNoFileOfOurs() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let engine = storageEngine(for: server.uri)
        #expect(engine.isShared)
        #expect(engine.migrations == EmbeddedMigrations.postgres)
        #expect(engine.fileCommandsRefusal != nil)
        #expect(engine.fileModeOpenToOthers() == nil)
        _ = try DatabaseSetup.open(path: server.uri)
        let database = try Database(path: server.uri)
        defer { database.close() }
        let sizes = try database.storageSizes()
        #expect(sizes.databaseBytes > 0)
        #expect(sizes.writeAheadLogBytes == 0, "the WAL is the server's")
        #expect(try database.checkpointTruncatingWAL())
        try database.probeWrite()
    }

    /// Changing SQLite means reading SQLite's files only: libpq is called only under
    /// `HeadwayStore/PostgreSQL`, SQLite's C API only under `HeadwayStore/SQLite`, and
    /// outside the store no code asks which engine it is nor writes SQL.
    @Test func eachEngineStaysInItsOwnFiles() throws {
        let files = try FileManager.default.subpathsOfDirectory(atPath: Self.sourcesFolder.path)
            .filter { $0.hasSuffix(".swift") && !$0.hasSuffix("EmbeddedMigrations.swift") }
        #expect(files.count > 50)
        var misplaced: [String] = []
        for file in files {
            let text = try String(contentsOf: Self.sourcesFolder.appendingPathComponent(file), encoding: .utf8)
            let inStore = file.hasPrefix("HeadwayStore/")
            let inSQLite = file.hasPrefix("HeadwayStore/SQLite/")
            let inPostgreSQL = file.hasPrefix("HeadwayStore/PostgreSQL/")
            if text.contains("import CLibPQ") && !inPostgreSQL { misplaced.append("\(file): imports libpq") }
            if text.contains("sqlite3_") && !inSQLite {
                misplaced.append("\(file): calls SQLite")
            }
            if text.contains("isPostgres") && !inPostgreSQL && file != "HeadwayStore/Engine/StorageEngine.swift" {
                misplaced.append("\(file): asks whether the database is PostgreSQL")
            }
            if !inStore, text.contains("\"SELECT ") || text.contains("\"INSERT ") || text.contains("\"UPDATE ")
                || text.contains("pg_database_size") {
                misplaced.append("\(file): runs SQL")
            }
        }
        #expect(misplaced == [])
    }

    /// Every table the PostgreSQL migrations create is one the foreign-tables check looks
    /// for (`PostgresDialect.tableNames`), so a new migration's table cannot be forgotten
    /// there: a database holding another application's table of that name is refused
    /// before anything is created.
    @Test func theForeignTablesCheckNamesEveryTableThePostgresMigrationsCreate() throws {
        let create = try Regex(#"(?i)CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)"#)
        let created = EmbeddedMigrations.postgres.flatMap { migration in
            migration.sql.matches(of: create).compactMap { $0.output[1].substring.map(String.init) }
        }
        #expect(created.count >= 10)
        #expect(Set(created) == Set(PostgresDialect.tableNames))
    }
}
