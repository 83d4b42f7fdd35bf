import Foundation
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

@Suite struct MigrationTests {
    /// The repository's `migrations/` folder, found from this file's path.
    static let migrationsFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("migrations")

    @Test func compiledCopyMatchesTheFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.migrationsFolder.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(files.count == EmbeddedMigrations.all.count, "run `make migrations` after changing migrations/")
        for (file, migration) in zip(files, EmbeddedMigrations.all) {
            let text = try String(contentsOf: Self.migrationsFolder.appendingPathComponent(file), encoding: .utf8)
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
        #expect(throws: SQLiteError.self) { try Migrator(migrations).migrate(database) }
        #expect(try database.scalar("SELECT count(*) FROM schema_migrations") == 1)
        #expect(try database.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'b'") == 0)
    }
}
