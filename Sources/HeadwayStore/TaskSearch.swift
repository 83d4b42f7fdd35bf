import Foundation
import HeadwayCore

/// The listing's search (`GET /v1/tasks?q=`): tasks whose id or name holds a text, whatever
/// its case, read from a trigram index and never by scanning the tasks.
///
/// On SQLite the index is FTS5's trigram tokenizer (`task_search`, migration 0011), which
/// folds case itself. A query of three characters or more is the phrase of its trigrams;
/// one of one or two characters has no trigram of its own, so it is answered by every
/// indexed trigram that begins with it (each text is indexed with two U+001F after it, so
/// any occurrence begins one), read from the index's vocabulary (`task_search_terms`) and
/// matched as one OR: still from the index, though such a short text matches many tasks.
/// The index hands out the matching keys newest first (FTS5 reads its rowids backwards),
/// joined with `tasks` for the listing's other conditions. The join is a `CROSS JOIN`,
/// which keeps the index as the outer loop: with a plain join SQLite walked the listing
/// index of a state (100,000 running tasks) and asked FTS5 about each row, 2.6 s for a
/// count that the index answers in half a millisecond.
///
/// On PostgreSQL it is pg_trgm's GIN index over `id` and `name` (`tasks_search`), asked
/// with `ILIKE '%text%'`; a query shorter than three characters reads that index whole.
///
/// Either way a page costs what reading its matches newest first costs, and `total_size`
/// what counting every match does: little for a text a few tasks hold, about a
/// microsecond per match for one that most tasks hold (docs/benchmarks.md).
enum TaskSearch {
    /// Up to `limit` keys of the tasks that hold `text` and match the rest of `filter`,
    /// newest first, below `beforeKey`.
    static func keys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                     in database: Database) throws(DatabaseError) -> [Int64] {
        var (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if database.isPostgres {
            if let beforeKey {
                conditions.append("t.seq < ?")
                arguments.append(.integer(beforeKey))
            }
            let pattern = SQLValue.text(likePattern(text))
            return try database.rows(
                "SELECT t.seq FROM tasks AS t WHERE (t.id ILIKE ? OR t.name ILIKE ?)"
                    + conditions.map { " AND " + $0 }.joined() + " ORDER BY t.seq DESC LIMIT ?",
                [pattern, pattern] + arguments + [.integer(Int64(limit))]) { $0.int(0) }
        }
        guard let match = try matchExpression(text, in: database) else { return [] }
        if let beforeKey {
            conditions.append("task_search.rowid < ?")
            arguments.append(.integer(beforeKey))
        }
        return try database.rows(
            "SELECT t.seq FROM task_search CROSS JOIN tasks AS t ON t.seq = task_search.rowid WHERE task_search MATCH ?"
                + conditions.map { " AND " + $0 }.joined() + " ORDER BY task_search.rowid DESC LIMIT ?",
            [.text(match)] + arguments + [.integer(Int64(limit))]) { $0.int(0) }
    }

    /// How many tasks hold `text` and match the rest of `filter`.
    static func count(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        let (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if database.isPostgres {
            let pattern = SQLValue.text(likePattern(text))
            return try database.scalar(
                "SELECT count(*) FROM tasks AS t WHERE (t.id ILIKE ? OR t.name ILIKE ?)" + conditions.map { " AND " + $0 }.joined(),
                [pattern, pattern] + arguments) ?? 0
        }
        guard let match = try matchExpression(text, in: database) else { return 0 }
        // Without other conditions the index alone answers.
        guard !conditions.isEmpty else {
            return try database.scalar("SELECT count(*) FROM task_search WHERE task_search MATCH ?", [.text(match)]) ?? 0
        }
        return try database.scalar(
            "SELECT count(*) FROM task_search CROSS JOIN tasks AS t ON t.seq = task_search.rowid WHERE task_search MATCH ?"
                + conditions.map { " AND " + $0 }.joined(),
            [.text(match)] + arguments) ?? 0
    }

    /// The FTS5 query for `text` (see the type's comment); nil when no indexed trigram
    /// begins with a short `text`, so nothing matches.
    static func matchExpression(_ text: String, in database: Database) throws(DatabaseError) -> String? {
        guard text.unicodeScalars.count < 3 else { return quoted(text) }
        let folded = text.lowercased()
        let terms = try database.rows(
            "SELECT term FROM task_search_terms WHERE term >= ? AND term < ?",
            [.text(folded), .text(folded + "\u{10FFFF}")]) { $0.text(0) }
        guard !terms.isEmpty else { return nil }
        return terms.map(quoted).joined(separator: " OR ")
    }

    /// `text` as an FTS5 string (a phrase of its trigrams).
    private static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// `%text%` for `ILIKE`, its own `%`, `_` and `\` escaped (PostgreSQL's default escape
    /// character is the backslash).
    private static func likePattern(_ text: String) -> String {
        var pattern = "%"
        for character in text {
            if character == "%" || character == "_" || character == "\\" { pattern.append("\\") }
            pattern.append(character)
        }
        return pattern + "%"
    }
}
