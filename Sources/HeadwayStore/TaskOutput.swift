import HeadwayCore

/// SQL for `task_output`: each task's output tail (`OutputTail`) as a ring of at most 50
/// rows, line number `n` in slot `n % 50`, within 8 KiB. An append of any number of lines is one
/// multi-row upsert of the new lines only (never a read, never the old lines written
/// again), and the task's `last_output` and `output_lines` ride in its row's update, which
/// the writer makes anyway; so a runner that sends lines at every update costs a few small
/// rows more, not its whole tail. The 8 KiB bound is kept as lines are stored, and again as the tail is read.
public enum TaskOutput {
    /// Stores `lines`, arrived at `now`, as the lines numbered from `firstNumber` (the
    /// task's `outputLines` before them) of the task `taskID`; only the last 50 can stay.
    static func append(_ lines: [String], from firstNumber: Int64, to taskID: String, at now: EpochMilliseconds,
                       in database: Database) throws(DatabaseError) {
        let kept = lines.suffix(OutputTail.maximumLines)
        var number = firstNumber + Int64(lines.count - kept.count)
        var arguments: [SQLValue] = []
        arguments.reserveCapacity(kept.count * 5)
        for line in kept {
            arguments += [.text(taskID), .integer(number % Int64(OutputTail.maximumLines)), .integer(number), .integer(now), .text(line)]
            number += 1
        }
        try database.run(appendSQL[kept.count], arguments)
        try database.run(database.dialect.trimOutput, [.text(taskID), .integer(Int64(OutputTail.maximumBytes))])
    }

    /// Forgets the task's lines older than the newest that fit in `maximumBytes` bytes of
    /// UTF-8 together (the newest line, at most 4,000 bytes, always fits), as
    /// `OutputTail.trimmed` keeps them; `bytes` counts a line's bytes in the engine's SQL
    /// (SQLite 3.40 has no `octet_length`). Each dialect's `trimOutput`.
    static func trimSQL(bytes: String) -> String {
        "DELETE FROM task_output WHERE task_id = ?1 AND n < (SELECT min(n) FROM (SELECT n, sum(\(bytes)) OVER (ORDER BY n DESC) AS newer_bytes"
            + " FROM task_output WHERE task_id = ?1) AS sized WHERE newer_bytes <= ?2)"
    }

    /// The upsert of `count` lines, for each count a request may keep (built once).
    private static let appendSQL: [String] = (0...OutputTail.maximumLines).map { count in
        "INSERT INTO task_output (task_id, slot, n, t, line) VALUES "
            + Array(repeating: "(?, ?, ?, ?, ?)", count: max(count, 1)).joined(separator: ", ")
            + " ON CONFLICT (task_id, slot) DO UPDATE SET n = excluded.n, t = excluded.t, line = excluded.line"
    }

    /// The tail of the task `id` as the API shows it: a JSON array of `{"t", "line"}`,
    /// oldest first, the newest lines within 8 KiB; nil when it has none.
    public static func json(of id: String, in database: Database) throws(DatabaseError) -> String? {
        let lines = try database.rows("SELECT t, line FROM task_output WHERE task_id = ? ORDER BY n", [.text(id)]) {
            OutputTail.Line(t: Timestamp.rfc3339($0.int(0)), line: $0.text(1))
        }
        return lines.isEmpty ? nil : OutputTail(lines: lines).trimmed().json
    }

    /// The task's newest `count` lines (at most), oldest first: what an alert shows.
    public static func lastLines(of id: String, count: Int, in database: Database) throws(DatabaseError) -> [String] {
        try database.rows("SELECT line FROM task_output WHERE task_id = ? ORDER BY n DESC LIMIT ?",
                          [.text(id), .integer(Int64(count))]) { $0.text(0) }.reversed()
    }

    /// Forgets a task's tail.
    static func delete(_ taskID: String, in database: Database) throws(DatabaseError) {
        try database.run("DELETE FROM task_output WHERE task_id = ?", [.text(taskID)])
    }
}
