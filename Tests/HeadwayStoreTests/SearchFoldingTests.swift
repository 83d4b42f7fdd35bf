import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// The listing's search (`TaskSearch`) folds case one way, the index's: queries of one or
/// two characters (looked up in the index's vocabulary, or checked per task within a
/// prefix) agree with longer ones (the tokenizer's own folding); and within a task prefix
/// the search reads that prefix's tasks only.
@Suite struct SearchFoldingTests {
    /// The copy of the tokenizer's folding table is the linked SQLite's: every scalar of
    /// the first two planes (where every cased script lies) folds as the FTS5 trigram
    /// tokenizer folds it, read back from an index of each scalar three times over.
    @Test func theFoldingTableIsTheLinkedTokenizers() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("fold.db"))
        try database.run("CREATE VIRTUAL TABLE f USING fts5(x, tokenize = 'trigram')")
        try database.run("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
        try database.run("BEGIN")
        for value in UInt32(1)...0x1_FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            try database.run("INSERT INTO f (rowid, x) VALUES (?, ?)",
                             [.integer(Int64(value)), .text(String(repeating: String(Character(scalar)), count: 3))])
        }
        try database.run("COMMIT")
        var differing: [String] = []
        let folds = try database.rows("SELECT doc, term FROM v") { (UInt32($0.int(0)), $0.text(1).unicodeScalars.first!) }
        #expect(folds.count > 120_000)
        for (value, folded) in folds where SearchFolding.fold(Unicode.Scalar(value)!) != folded {
            differing.append(String(value, radix: 16))
        }
        #expect(differing.isEmpty, "fold differently (run scripts/search-folding.py): \(differing.prefix(20))")
    }

    /// `headway_search_fold`, the SQL function a search within a prefix checks tasks with.
    @Test func theSQLFunctionFoldsAsTheIndex() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("fold.db"))
        let folded = try database.rows("SELECT headway_search_fold(?), headway_search_fold(NULL) IS NULL",
                                       [.text("ΣΊΣΥΦΟΣ Straẞe \u{212A}elvin")]) { ($0.text(0), $0.int(1)) }
        #expect(folded.first?.0 == "σίσυφοσ straße kelvin" && folded.first?.1 == 1)
        #expect(SearchFolding.fold("ς") == "σ" && SearchFolding.fold("ß") == "ß")
    }

    /// Registers a task for each name under two task prefixes, `p.` and `q.`.
    private func registerNames(_ names: [String], in fixture: StoreFixture) throws {
        let store = fixture.store
        _ = try fixture.write { database in
            for (index, name) in names.enumerated() {
                for prefix in ["p.", "q."] {
                    _ = try store.register(Registration(id: "\(prefix)\(index)", name: name), now: 1_000, in: database)
                }
            }
        }
    }

    /// The names of the tasks a search finds, and the count it reports, within `prefix` if given.
    private func search(_ text: String, prefix: String? = nil, in fixture: StoreFixture) throws -> (names: Set<String>, count: Int64) {
        var filter = TaskFilter()
        filter.search = text
        filter.taskPrefix = prefix
        let page = try fixture.read { database in try TaskRepository.page(filter, size: 100, beforeKey: nil, in: database) }
        let counted = try fixture.read { database in try SQLiteTaskSearch.count(text, filter: filter, in: database) }
        return (Set(page.tasks.map(\.name)), counted)
    }

    /// ς, σ and Σ are one letter to the index, as are ß and ẞ (but not ß and SS): a short
    /// query finds what a long one holding it finds, and a prefixed search finds what the
    /// whole search finds within the prefix.
    @Test func shortAndLongQueriesFoldAlike() throws {
        let fixture = try StoreFixture()
        let names = ["Σίσυφος", "ΣΊΣΥΦΟΣ", "Straße", "STRAẞE", "STRASSE", "Kelvin \u{212A}"]
        try registerNames(names, in: fixture)
        let expected: [(query: String, names: Set<String>)] = [
            ("ς", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]), ("Σ", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]), ("σ", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]),
            ("ος", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]), ("ΦΟς", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]), ("υφοσ", ["Σίσυφος", "ΣΊΣΥΦΟΣ"]),
            ("ß", ["Straße", "STRAẞE"]), ("ẞE", ["Straße", "STRAẞE"]), ("aße", ["Straße", "STRAẞE"]),
            ("ss", ["STRASSE"]), ("asse", ["STRASSE"]),
            ("k", ["Kelvin \u{212A}"]),
            ("n \u{212A}", ["Kelvin \u{212A}"]), ("N K", ["Kelvin \u{212A}"]),
        ]
        for (query, wanted) in expected {
            let whole = try search(query, in: fixture)
            #expect(whole.names == wanted, "q=\(query)")
            #expect(whole.count == Int64(wanted.count * 2), "q=\(query): both prefixes")
            let within = try search(query, prefix: "p.", in: fixture)
            #expect(within.names == wanted && within.count == Int64(wanted.count), "q=\(query) within p.")
        }
    }

    /// Within a task prefix the tasks are read by the id index's range of that prefix and
    /// each is checked alone (its id and name folded): no row of another prefix is read,
    /// and the trigram index, which holds every prefix's tasks, is not asked, so the
    /// search's cost tells nothing of them.
    @Test func aSearchWithinAPrefixReadsOnlyThePrefixsRows() throws {
        let fixture = try StoreFixture()
        try registerNames(["Alpha", "Beta"], in: fixture)
        for query in ["lph", "alpha beta", "a", "Al"] {
            var filter = TaskFilter()
            filter.search = query
            filter.taskPrefix = "p."
            filter.states = [.running]
            let statement = SQLiteTaskSearch.keysWithinPrefix(query, filter: filter, limit: 21, beforeKey: 99)
            let plan = try fixture.read { database in
                try database.rows("EXPLAIN QUERY PLAN " + statement.sql, statement.arguments) { $0.text(3) }
            }
            #expect(plan.filter { !$0.contains("TEMP B-TREE") } == ["SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id>? AND id<?)"],
                    "q=\(query): \(plan)")
        }
    }
}
