import Foundation
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

@Suite struct MigrationTests {
    /// The repository's `migrations/` folder, found from this file's path.
    static let migrationsFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("migrations")

    @Test(arguments: [("", EmbeddedMigrations.all), ("postgres", EmbeddedMigrations.postgres)])
    func compiledCopyMatchesTheFiles(subfolder: String, compiled: [Migration]) throws {
        let folder = subfolder.isEmpty ? Self.migrationsFolder : Self.migrationsFolder.appendingPathComponent(subfolder)
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(!files.isEmpty)
        #expect(files.count == compiled.count, "run `make migrations` after changing migrations/")
        for (file, migration) in zip(files, compiled) {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            #expect(file == String(format: "%04d_%@.sql", migration.version, migration.name))
            #expect(text == migration.sql, "\(file) differs from its compiled copy: run `make migrations`")
        }
    }

    @Test func appliesEachMigrationOnceAndRecordsIt() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("db.sqlite"))
        #expect(try Migrator().migrate(database) == EmbeddedMigrations.all.map(\.version))
        #expect(try Migrator().migrate(database) == [])
        #expect(try database.scalar("SELECT count(*) FROM schema_migrations") == Int64(EmbeddedMigrations.all.count))
    }

    @Test func aFailingMigrationLeavesNoTrace() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("db.sqlite"))
        let migrations = [
            Migration(version: 1, name: "good", sql: "CREATE TABLE a (x INTEGER);"),
            Migration(version: 2, name: "bad", sql: "CREATE TABLE b (x INTEGER); INSERT INTO nowhere VALUES (1);"),
        ]
        #expect(throws: DatabaseError.self) { try Migrator(migrations).migrate(database) }
        #expect(try database.scalar("SELECT count(*) FROM schema_migrations") == 1)
        #expect(try database.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'b'") == 0)
    }

    /// A database whose `schema_migrations` records a version above every migration of
    /// this build is refused with both versions named, and not changed at all (the file's
    /// bytes are the same; it is not even switched to WAL).
    @Test func aDatabaseFromANewerBuildIsRefusedAndLeftUnchanged() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("db.sqlite")
        let known = Migrator().latestVersion
        do {
            let newerBuild = Migrator(EmbeddedMigrations.all + [Migration(version: known + 4, name: "later", sql: "CREATE TABLE later (x INTEGER);")])
            let database = try Database(path: path)
            defer { database.close() }
            try newerBuild.migrate(database)
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))

        let refusal = MigrationError.databaseIsNewer(databaseVersion: known + 4, latestKnownVersion: known)
        #expect(throws: refusal) { try DatabaseSetup.open(path: path) }
        let database = try Database(path: path)
        #expect(throws: refusal) { try Migrator().migrate(database) }
        database.close()

        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        #expect("\(MigrationError.databaseIsNewer(databaseVersion: 7, latestKnownVersion: 3))"
            == "the database was migrated by a newer Headway (schema version 7; this build knows up to 3); "
            + "upgrade headwayd or use another database")
    }

    /// A database at an older version is brought up to date; one at this build's version is
    /// left as it is.
    @Test func anOlderDatabaseIsMigratedForward() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("db.sqlite"))
        let all = EmbeddedMigrations.all
        #expect(try Migrator(Array(all.prefix(1))).migrate(database) == [all[0].version])
        #expect(try Migrator().migrate(database) == all.dropFirst().map(\.version))
        #expect(try Migrator.recordedVersion(in: database) == Migrator().latestVersion)
    }
}
