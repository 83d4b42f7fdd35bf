import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// The search's trigram index on PostgreSQL is written when a task is registered, never
/// when it is updated: a task's id and name never change, and every update of `tasks` is
/// a new row version with all of that table's indexes written again, so the index lives
/// on a table of its own (`task_search`, migration 0011).
@Suite(.serialized) struct SearchIndexWritesTests {
    /// The blocks of the trigram index read or found in the cache, as the server's
    /// statistics count them (a write of the index reads its blocks).
    private static func searchIndexBlocks(_ fixture: EngineWriter) throws -> Int64 {
        try fixture.read { database in
            try database.scalar("""
                SELECT coalesce(sum(s.idx_blks_hit + s.idx_blks_read), -1)::bigint
                FROM pg_statio_user_indexes AS s JOIN pg_indexes AS i
                    ON i.schemaname = s.schemaname AND i.indexname = s.indexrelname
                WHERE i.indexdef LIKE '%gin_trgm_ops%'
                """) ?? -1
        }
    }

    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func updatesOfTasksNeverWriteTheSearchIndex() throws {
        let fixture = try EngineWriter(.postgres)
        // No vacuum of the tables meanwhile: it reads the indexes too.
        try fixture.execute("""
            ALTER TABLE tasks SET (autovacuum_enabled = off);
            DO $$ BEGIN
                IF to_regclass('task_search') IS NOT NULL THEN
                    ALTER TABLE task_search SET (autovacuum_enabled = off);
                END IF;
            END $$;
            """)
        let ids = (0..<20).map { "backup-\($0)" }
        for id in ids {
            _ = try fixture.write { store, database in
                try store.register(Registration(id: id, name: "Nightly " + id, total: 1_000), now: 1_000, in: database)
            }
        }
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: Int64(ids.count)))
        let registered = try fixture.taskRowsWritten()
        let before = try Self.searchIndexBlocks(fixture)
        #expect(before > 0, "the index is found and its registrations counted")

        // Single updates, batched as the writer batches them, and the batch route's items.
        for round in 0..<5 {
            let jobs: [@Sendable (TaskStore, Database) throws -> Bool] = ids.map { id in
                { store, database in
                    _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000 + Int64(round) * 1_000, in: database)
                    return true
                }
            }
            #expect(fixture.batch(jobs).allSatisfy { (try? $0.get()) == true })
        }
        _ = try fixture.write { store, database in
            try store.progress(each: ids.map { ProgressItem(id: $0, update: ProgressUpdate(increment: 1)) },
                               now: 9_000, in: database)
        }
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: registered + Int64(6 * ids.count)))
        #expect(try Self.searchIndexBlocks(fixture) == before, "120 updates of 20 tasks read or wrote the search index")

        // A registration writes it (what the probe above would have seen).
        _ = try fixture.write { store, database in
            try store.register(Registration(id: "late", name: "Late"), now: 10_000, in: database)
        }
        let updated = try fixture.taskRowsWritten()
        #expect(try fixture.flushStatistics(untilTaskRowsWritten: updated + 1))
        #expect(try Self.searchIndexBlocks(fixture) > before)
        let found = try fixture.read { database in
            try PostgresTaskSearch.keys("nightly BACKUP-1", filter: TaskFilter(), limit: 100, beforeKey: nil, in: database)
        }
        #expect(found.count == 11, "backup-1 and backup-10 … backup-19: \(found)")
    }
}
