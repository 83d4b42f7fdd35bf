/// The listing's search (`GET /v1/tasks?q=`) on PostgreSQL: pg_trgm's GIN index over `id`
/// and `name` (`tasks_search`), asked with `ILIKE '%text%'`; a query shorter than three
/// characters reads that index whole. Within a task prefix the prefix's id range is read
/// and each task checked. `ILIKE` folds case as the database's `LC_CTYPE` does: under the
/// C locale only ASCII letters.
enum PostgresTaskSearch {
    /// Up to `limit` keys of the tasks that hold `text` and match the rest of `filter`,
    /// newest first, below `beforeKey`.
    static func keys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                     in database: Database) throws(DatabaseError) -> [Int64] {
        var (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        if let beforeKey {
            conditions.append("t.seq < ?")
            arguments.append(.integer(beforeKey))
        }
        let pattern = SQLValue.text(likePattern(text))
        return try database.rows(
            "SELECT t.seq FROM tasks AS t WHERE " + match(filter)
                + conditions.map { " AND " + $0 }.joined() + " ORDER BY t.seq DESC LIMIT ?",
            [pattern, pattern] + arguments + [.integer(Int64(limit))]) { $0.int(0) }
    }

    /// How many tasks hold `text` and match the rest of `filter`.
    static func count(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        let (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        let pattern = SQLValue.text(likePattern(text))
        return try database.scalar(
            "SELECT count(*) FROM tasks AS t WHERE " + match(filter) + conditions.map { " AND " + $0 }.joined(),
            [pattern, pattern] + arguments) ?? 0
    }

    /// The condition matching `text` (two `ILIKE` patterns follow): on the trigram index's
    /// columns, or, within a task prefix, on expressions that index does not cover, so that
    /// the prefix's id range is read and nothing else.
    private static func match(_ filter: TaskFilter) -> String {
        filter.taskPrefix == nil ? "(t.id ILIKE ? OR t.name ILIKE ?)" : "((t.id || '') ILIKE ? OR (t.name || '') ILIKE ?)"
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
