import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// The search's pages on SQLite (`SQLiteTaskSearch.keys`): a phrase with few matches is
/// read from the trigram index oldest first, the index's own order, and its page taken
/// from the end; one with more is read newest first. Either way a page holds the same
/// tasks, in the same order, with the same cursor.
@Suite struct SearchOrderTests {
    /// Both reads leave the order to the index (no sort) and look up each match's task by
    /// its key. FTS5 names its plan's order in the index number: 64 is "by rowid", and 128
    /// more is "descending"; `M2` is the MATCH, `<` the bound below a page's cursor.
    @Test func fewMatchesAreReadInTheIndexsOwnOrder() throws {
        let fixture = try StoreFixture()
        var filter = TaskFilter()
        filter.states = [.running]
        filter.rootOnly = true
        let source = SQLiteTaskSearch.IndexSource.phrase("\"backup\"")
        let plan = { (statement: (sql: String, arguments: [SQLValue])) throws -> [String] in
            try fixture.read { database in
                try database.rows("EXPLAIN QUERY PLAN " + statement.sql, statement.arguments) { $0.text(3) }
            }
        }
        for beforeKey in [nil, Int64(99)] {
            let bound = beforeKey == nil ? "" : "<"
            let oldest = SQLiteTaskSearch.oldestMatches(source, filter: filter, beforeKey: beforeKey, maximum: 200)
            #expect(try plan(oldest) == ["SCAN task_search VIRTUAL TABLE INDEX 64:M2" + bound,
                                         "SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"], "\(oldest.sql)")
            let newest = SQLiteTaskSearch.newestMatches(source, filter: filter, limit: 51, beforeKey: beforeKey)
            #expect(try plan(newest) == ["SCAN task_search VIRTUAL TABLE INDEX 192:M2" + bound,
                                         "SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"], "\(newest.sql)")
        }
    }

    /// Every page of every search, under every filter, is the same whichever way the index
    /// is read (oldest first always, newest first always, or as `keys` chooses), and is what
    /// a check of every task finds: its id or name, folded, holds the text.
    @Test func pagesAreTheSameWhicheverWayTheIndexIsRead() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { database in
            for index in 0..<40 {
                let name = ["Nightly BACKUP \(index)", "Resize photos \(index)", "backup of photos \(index)"][index % 3]
                var registration = Registration(id: "job-\(index)", name: name)
                registration.state = index % 4 == 0 ? .pending : .running
                if index % 5 == 0 && index > 0 { registration.parentID = "job-0" }
                _ = try store.register(registration, now: 1_000, in: database)
            }
        }
        let tasks = try fixture.read { database in
            try database.rows("SELECT seq, id, name, state, is_root, parent_id FROM tasks ORDER BY seq DESC") {
                (key: $0.int(0), id: $0.text(1), name: $0.text(2), state: $0.text(3), isRoot: $0.int(4) == 1,
                 parentID: $0.optionalText(5))
            }
        }
        var running = TaskFilter(), roots = TaskFilter(), children = TaskFilter()
        running.states = [.running]
        roots.rootOnly = true
        children.parentID = "job-0"
        for text in ["backup", "PHOTOS", "job-1", "ckup of ph", "b", "os", "nothing here"] {
            for var filter in [TaskFilter(), running, roots, children] {
                filter.search = text
                let folded = SearchFolding.fold(text)
                let expected = tasks.filter { task in
                    (SearchFolding.fold(task.id).contains(folded) || SearchFolding.fold(task.name).contains(folded))
                        && (filter.states.isEmpty || task.state == "running")
                        && (!filter.rootOnly || task.isRoot)
                        && (filter.parentID == nil || task.parentID == filter.parentID)
                }.map(\.key)
                for fewMatches in [0, 5, 1_000, nil] {
                    var pages: [[Int64]] = []
                    var beforeKey: Int64?
                    repeat {
                        let keys = try fixture.read { database in
                            try SQLiteTaskSearch.keys(text, filter: filter, limit: 4, beforeKey: beforeKey,
                                                      fewMatches: fewMatches, in: database)
                        }
                        pages.append(Array(keys.prefix(3)))
                        beforeKey = keys.count > 3 ? keys[2] : nil
                    } while beforeKey != nil && pages.count < 50
                    #expect(pages.joined().elementsEqual(expected), "q=\(text) \(filter) fewMatches=\(String(describing: fewMatches))")
                    #expect(pages.dropLast().allSatisfy { $0.count == 3 }, "q=\(text): every page full but the last")
                }
            }
        }
    }
}
