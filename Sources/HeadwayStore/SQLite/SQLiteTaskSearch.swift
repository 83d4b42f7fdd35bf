import Foundation
import HeadwayCore

/// The listing's search (`GET /v1/tasks?q=`) on SQLite: tasks whose id or name holds a
/// text, whatever its case, read from a trigram index and never by scanning the tasks.
///
/// The index is FTS5's trigram tokenizer (`task_search`, migration 0011), which
/// folds case itself. A query of three characters or more is the phrase of its trigrams;
/// one of one or two characters has no trigram of its own, so it is answered by every
/// indexed trigram that begins with it (each text is indexed with two U+001F after it, so
/// any occurrence begins one), read from the index's vocabulary (`task_search_terms`) and
/// matched as one OR: still from the index, though such a short text matches many tasks.
/// When it begins more than `maximumTermsInOr` trigrams (names can be made to hold a
/// million beginning with "a"), the tasks are read from the index's instances of those
/// trigrams instead (`task_search_instances`, migration 0012).
/// The index hands out the matching keys in either order without a sort (a phrase with few
/// matches is read oldest first and the page taken from its end, see `keys`), joined with
/// `tasks` for the listing's other conditions. The join is a `CROSS JOIN`,
/// which keeps the index as the outer loop: with a plain join SQLite walked the listing
/// index of a state (100,000 running tasks) and asked FTS5 about each row, 2.6 s for a
/// count that the index answers in half a millisecond.
///
/// Within a task prefix the prefix's tasks are read and each checked (`withinPrefix`).
///
/// A page costs what reading its few matches costs (or a page's worth of them newest
/// first), and `total_size` what counting every match does: little for a text a few tasks
/// hold, about a microsecond per match for one that most tasks hold (docs/benchmarks.md).
enum SQLiteTaskSearch {
    /// Up to `limit` keys of the tasks that hold `text` and match the rest of `filter`,
    /// newest first, below `beforeKey`.
    ///
    /// A phrase's matches are first read in the index's own order, oldest first, up to
    /// `fewMatches` of them (`oldestMatches`): when that is all of them, the newest are
    /// their last. Only a phrase with more matches is read newest first (`newestMatches`).
    /// FTS5 reads a doclist backwards slowly, and a phrase holding a trigram that most tasks
    /// hold ("tas" of "task") seeks that trigram's doclist backwards to each candidate, in
    /// every segment of the index: at 1,000,000 tasks (ten segments) one task's name took
    /// 1.3–2.1 ms newest first and 0.45 ms oldest first, and a text with 11 matches 2.3 ms
    /// against 1.3 ms (docs/benchmarks.md). A text most tasks hold finds a page near the
    /// newest end at once and pays the first read, `fewMatches` matches, for nothing.
    static func keys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?, fewMatches: Int? = nil,
                     in database: Database) throws(DatabaseError) -> [Int64] {
        if filter.taskPrefix != nil {
            let query = keysWithinPrefix(text, filter: filter, limit: limit, beforeKey: beforeKey)
            return try database.rows(query.sql, query.arguments) { $0.int(0) }
        }
        guard let source = try indexSource(text, in: database) else { return [] }
        if case .phrase = source {
            let maximum = fewMatches ?? limit * pagesReadOldestFirst
            let oldest = oldestMatches(source, filter: filter, beforeKey: beforeKey, maximum: maximum)
            let matches = try database.rows(oldest.sql, oldest.arguments) { (key: $0.int(0), kept: $0.int(1) != 0) }
            if matches.count <= maximum {
                return matches.reversed().filter(\.kept).prefix(limit).map(\.key)
            }
        }
        let newest = newestMatches(source, filter: filter, limit: limit, beforeKey: beforeKey)
        return try database.rows(newest.sql, newest.arguments) { $0.int(0) }
    }

    /// How many pages' worth of a phrase's matches `keys` reads oldest first before it reads
    /// them newest first instead: what a text most tasks hold pays for nothing.
    static let pagesReadOldestFirst = 4

    /// The query of `keys` reading the index newest first: up to `limit` keys of the tasks
    /// `source` finds that match the rest of `filter`, below `beforeKey`.
    static func newestMatches(_ source: IndexSource, filter: TaskFilter, limit: Int,
                              beforeKey: Int64?) -> (sql: String, arguments: [SQLValue]) {
        var (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if let beforeKey {
            conditions.append(source.key + " < ?")
            arguments.append(.integer(beforeKey))
        }
        return ("SELECT t.seq FROM " + source.from + conditions.map { " AND " + $0 }.joined() + " ORDER BY " + source.key + " DESC LIMIT ?",
                source.arguments + arguments + [.integer(Int64(limit))])
    }

    /// The query of `keys` reading a phrase's matches in the index's order, oldest first:
    /// the first `maximum` + 1 below `beforeKey`, each with whether its task matches the
    /// rest of `filter` (1 or 0). The filter is a column, not a condition, so that the
    /// rows returned count the index's matches: `maximum` + 1 rows say there are more.
    static func oldestMatches(_ source: IndexSource, filter: TaskFilter, beforeKey: Int64?,
                              maximum: Int) -> (sql: String, arguments: [SQLValue]) {
        let (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        let kept = conditions.isEmpty ? "1" : "CASE WHEN " + conditions.joined(separator: " AND ") + " THEN 1 ELSE 0 END"
        let below = beforeKey.map { [SQLValue.integer($0)] } ?? []
        return ("SELECT t.seq, " + kept + " FROM " + source.from + (beforeKey == nil ? "" : " AND " + source.key + " < ?")
                    + " ORDER BY " + source.key + " LIMIT ?",
                arguments + source.arguments + below + [.integer(Int64(maximum) + 1)])
    }

    /// The SQLite query of `keys` within `filter`'s task prefix (`withinPrefix`).
    static func keysWithinPrefix(_ text: String, filter: TaskFilter, limit: Int,
                                 beforeKey: Int64?) -> (sql: String, arguments: [SQLValue]) {
        var (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if let beforeKey {
            conditions.append("t.seq < ?")
            arguments.append(.integer(beforeKey))
        }
        let within = withinPrefix(text)
        return ("SELECT t.seq FROM " + within.from + conditions.map { " AND " + $0 }.joined() + " ORDER BY t.seq DESC LIMIT ?",
                within.arguments + arguments + [.integer(Int64(limit))])
    }

    /// How many tasks hold `text` and match the rest of `filter`.
    static func count(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        let (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if filter.taskPrefix != nil {
            let within = withinPrefix(text)
            return try database.scalar("SELECT count(*) FROM " + within.from + conditions.map { " AND " + $0 }.joined(),
                                       within.arguments + arguments) ?? 0
        }
        guard let source = try indexSource(text, in: database) else { return 0 }
        // A phrase without other conditions: the index alone answers.
        if conditions.isEmpty, case .phrase(let match) = source {
            return try database.scalar("SELECT count(*) FROM task_search WHERE task_search MATCH ?", [.text(match)]) ?? 0
        }
        return try database.scalar("SELECT count(*) FROM " + source.from + conditions.map { " AND " + $0 }.joined(),
                                   source.arguments + arguments) ?? 0
    }

    /// The most trigrams a short text's OR may name; past it, the index's instances are read.
    static let maximumTermsInOr = 64

    /// Where the index finds a text's tasks, as the start of a query over `tasks AS t` that
    /// more conditions follow with `AND`.
    enum IndexSource {
        /// An FTS5 query: a text's phrase, or the OR of the few trigrams a short text begins.
        case phrase(String)
        /// The tasks holding any trigram in `[lower, upper)`, from the index's instances: for a
        /// short text that begins more trigrams than an OR should name (an OR of n trigrams
        /// costs n steps per match; this costs what those trigrams' entries are).
        case instances(lower: String, upper: String)

        var from: String {
            switch self {
            case .phrase:
                "task_search CROSS JOIN tasks AS t ON t.seq = task_search.rowid WHERE task_search MATCH ?"
            case .instances:
                "(SELECT DISTINCT doc FROM task_search_instances WHERE term >= ? AND term < ?) AS found"
                    + " CROSS JOIN tasks AS t ON t.seq = found.doc WHERE 1 = 1"
            }
        }

        /// The task's key as the query should order by it: a phrase's rowid, which FTS5
        /// hands out in either order without a sort.
        var key: String {
            switch self {
            case .phrase: "task_search.rowid"
            case .instances: "t.seq"
            }
        }

        var arguments: [SQLValue] {
            switch self {
            case .phrase(let match): [.text(match)]
            case .instances(let lower, let upper): [.text(lower), .text(upper)]
            }
        }
    }

    /// Where a query finds the tasks that hold `text` within one task prefix: `FROM` and
    /// `WHERE` over `tasks AS t`, more conditions following with `AND` (the prefix's id
    /// range among them, from the filter).
    ///
    /// Within a prefix (a token's, or `id_prefix`) the prefix's tasks are read by their
    /// id, and each is checked on its own, never the index's matches of every prefix:
    /// its id and name folded as the index folds them (`SearchFolding`) hold the folded
    /// text. So the search costs what the prefix's tasks cost, whatever other prefixes'
    /// tasks hold (its time cannot tell a prefixed token whether they hold a word), and
    /// answers as the index would.
    static func withinPrefix(_ text: String) -> (from: String, arguments: [SQLValue]) {
        // INDEXED BY: the id's index, or SQLite may walk another in the listing's order
        // through every prefix's rows.
        let fold = SearchFolding.sqlFunctionName
        let folded = SQLValue.text(SearchFolding.fold(text))
        return ("tasks AS t INDEXED BY sqlite_autoindex_tasks_1 WHERE (instr(\(fold)(t.id), ?) > 0 OR instr(\(fold)(t.name), ?) > 0)",
                [folded, folded])
    }

    /// How the index answers `text` (see the type's comment); nil when no indexed trigram
    /// begins with a short `text`, so nothing matches.
    static func indexSource(_ text: String, in database: Database) throws(DatabaseError) -> IndexSource? {
        guard text.unicodeScalars.count < 3 else { return .phrase(quoted(text)) }
        // Folded as the index folded what it holds.
        let lower = SearchFolding.fold(text)
        let upper = lower + "\u{10FFFF}"
        let terms = try database.rows(
            "SELECT term FROM task_search_terms WHERE term >= ? AND term < ? LIMIT ?",
            [.text(lower), .text(upper), .integer(Int64(maximumTermsInOr + 1))]) { $0.text(0) }
        guard !terms.isEmpty else { return nil }
        guard terms.count <= maximumTermsInOr else { return .instances(lower: lower, upper: upper) }
        return .phrase(terms.map(quoted).joined(separator: " OR "))
    }

    /// `text` as an FTS5 string (a phrase of its trigrams).
    private static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
