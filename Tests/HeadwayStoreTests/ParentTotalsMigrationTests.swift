import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// Migration 0013 (a parent with its own total counts its children as units of it):
/// the backfill of `unfinished_children_done`, and of the ancestors' shares of a parent
/// whose fraction the rule changes, bottom-up.
@Suite struct ParentTotalsMigrationTests {
    /// A root without a total over a parent of 10 units (1 completed) with a running child
    /// at 5/10 and a succeeded one: under the former rule the parent showed their mean,
    /// 0.75, and the root 0.75; after the upgrade the parent is (1 + 0.5) / 10 and the
    /// root, the mean of its one child, the same.
    @Test func theBackfillFollowsTheNewRuleBottomUp() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("upgrade.db"))
        let former = EmbeddedMigrations.all.filter { $0.version < 13 }
        _ = try Migrator(former).migrate(database)
        func insert(_ id: String, parent: String?, depth: Int, state: String, completed: Int64, total: Int64?,
                    childrenWeight: Double = 0, childrenDone: Double = 0) throws {
            try database.run("""
                INSERT INTO tasks (id, name, parent_id, is_root, depth, state, completed, total, stall_timeout_ms,
                                   created_at, updated_at, last_signal_at, definition, children_weight, children_done)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, 30000, 1, 1, 1, '{}', ?, ?)
                """, [.text(id), .text(id), parent.map { .text($0) } ?? .null, .integer(parent == nil ? 1 : 0),
                      .integer(Int64(depth)), .text(state), .integer(completed), total.map { .integer($0) } ?? .null,
                      .real(childrenWeight), .real(childrenDone)])
        }
        try insert("root", parent: nil, depth: 1, state: "running", completed: 0, total: nil, childrenWeight: 1, childrenDone: 0.75)
        try insert("parent", parent: "root", depth: 2, state: "running", completed: 1, total: 10, childrenWeight: 2, childrenDone: 1.5)
        try insert("running", parent: "parent", depth: 3, state: "running", completed: 5, total: 10)
        try insert("done", parent: "parent", depth: 3, state: "succeeded", completed: 10, total: 10)

        #expect(try Migrator().migrate(database) == EmbeddedMigrations.all.map(\.version).filter { $0 >= 13 })
        let parent = try #require(try TaskRepository.find("parent", in: database))
        let root = try #require(try TaskRepository.find("root", in: database))
        #expect(parent.unfinishedChildrenDone == 0.5)
        #expect(parent.childrenDone == 1.5, "its own children's shares do not move")
        #expect(abs((parent.fraction ?? -1) - 0.15) < 1e-12)
        #expect(abs(root.childrenDone - 0.15) < 1e-12, "the root's share of the parent moved with it")
        #expect(abs(root.unfinishedChildrenDone - 0.15) < 1e-12)
        #expect(abs((root.fraction ?? -1) - 0.15) < 1e-12)
        #expect(try database.scalar("SELECT count(*) FROM sqlite_temp_master") == 0, "no table of the backfill is left")
    }
}
