/// The listing's search (`GET /v1/tasks?q=`) on PostgreSQL: pg_trgm's GIN index over `id`
/// and `name` of `task_search` (a copy of each task's id and name kept by triggers on
/// insert and delete, apart from `tasks`, whose rows every update rewrites, indexes and
/// all: migration 0011), asked with `ILIKE '%text%'`; a query shorter than three
/// characters reads that index whole. The other filters are read from `tasks`, joined by
/// key. Within a task prefix the prefix's id range of `tasks` is read and each task
/// checked. `ILIKE` folds case as the column's collation does: the id's "C" and the
/// name's the database's (`LC_CTYPE`), under the C locale only ASCII letters.
enum PostgresTaskSearch {
    /// Up to `limit` keys of the tasks that hold `text` and match the rest of `filter`,
    /// newest first, below `beforeKey`.
    static func keys(_ text: String, filter: TaskFilter, limit: Int, beforeKey: Int64?,
                     in database: Database) throws(DatabaseError) -> [Int64] {
        var (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        let source = matching(filter, conditions: conditions)
        if let beforeKey {
            conditions.append(source.key + " < ?")
            arguments.append(.integer(beforeKey))
        }
        let pattern = SQLValue.text(likePattern(text))
        return try database.rows(
            "SELECT " + source.key + " FROM " + source.sql + conditions.map { " AND " + $0 }.joined()
                + " ORDER BY " + source.key + " DESC LIMIT ?",
            [pattern, pattern] + arguments + [.integer(Int64(limit))]) { $0.int(0) }
    }

    /// How many tasks hold `text` and match the rest of `filter`.
    static func count(_ text: String, filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        let (conditions, arguments) = TaskRepository.whereClause(filter, table: "t")
        let pattern = SQLValue.text(likePattern(text))
        return try database.scalar(
            "SELECT count(*) FROM " + matching(filter, conditions: conditions).sql + conditions.map { " AND " + $0 }.joined(),
            [pattern, pattern] + arguments) ?? 0
    }

    /// The tables read and the condition matching `text` (`sql`, to which `conditions`, on
    /// `tasks AS t`, are appended; two `ILIKE` patterns follow), and the column of the
    /// tasks' keys (`key`). Without a task prefix the trigram index of `task_search` is
    /// read, joined with `tasks` only when another filter needs its columns; within a
    /// prefix, expressions that index does not cover are matched on `tasks`, so that the
    /// prefix's id range is read and nothing else.
    private static func matching(_ filter: TaskFilter, conditions: [String]) -> (sql: String, key: String) {
        if filter.taskPrefix != nil {
            return ("tasks AS t WHERE ((t.id || '') ILIKE ? OR (t.name || '') ILIKE ?)", "t.seq")
        }
        let tables = conditions.isEmpty ? "task_search AS s" : "task_search AS s JOIN tasks AS t ON t.seq = s.seq"
        return (tables + " WHERE (s.id ILIKE ? OR s.name ILIKE ?)", "s.seq")
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
