import HeadwayCore

/// A writer batch's held writes on PostgreSQL (`SQLDialect.writeHeldTasks`): one statement
/// per table for the whole batch, whatever its number of tasks, so that a batch sends a
/// fixed number of statements, each parsed, planned and answered once. Each column's
/// values travel as one array parameter (a text literal, `{…}`), which `unnest` turns
/// back into rows: the statements' texts do not depend on the batch's size, so each is
/// prepared once per connection.
///
/// Every column a task's life can change is written, not only those that differ (as the
/// per-row `UPDATE` of SQLite does): one statement must serve every task of the batch, and
/// a column rewritten with its own value costs nothing more than the row's new version,
/// which PostgreSQL writes anyway. `state` and `stalled` are among them, so the trigger
/// that keeps `task_counts` is asked about every row, and its `WHEN` lets pass only those
/// whose counted values changed.
enum PostgresSetWrites {
    private static let columns = TaskRepository.MutableColumn.allCases

    /// `UPDATE tasks … FROM unnest(ids, column 1, column 2, …)`.
    static let updateSQL: String = {
        let names = columns.map(\.rawValue)
        return "UPDATE tasks SET " + names.map { "\($0) = u.\($0)" }.joined(separator: ", ")
            + " FROM unnest(?::text[], " + columns.map { "?::\(arrayType($0.kind))" }.joined(separator: ", ")
            + ") AS u(id, " + names.joined(separator: ", ") + ") WHERE tasks.id = u.id COLLATE \"C\""
    }()

    /// `INSERT INTO history … SELECT … FROM unnest(…)`: the latest sample of a task's second
    /// replaces an earlier one.
    static let insertHistorySQL = """
        INSERT INTO history (task_id, bucket, t, completed, total, fraction)
        SELECT * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::float8[])
        ON CONFLICT (task_id, bucket) DO UPDATE
        SET t = excluded.t, completed = excluded.completed, total = excluded.total, fraction = excluded.fraction
        """

    private static func arrayType(_ kind: TaskRepository.ColumnKind) -> String {
        switch kind {
        case .text: "text[]"
        case .integer: "bigint[]"
        case .real: "float8[]"
        }
    }

    static func write(_ changes: [(task: TaskRecord, previous: TaskRecord)], samples: [History.Sample],
                      in database: Database) throws(DatabaseError) {
        let changed = changes.filter { TaskRepository.differs($0.task, $0.previous) }
        if !changed.isEmpty {
            var arrays = [ArrayLiteral](repeating: ArrayLiteral(), count: columns.count + 1)
            for (task, _) in changed {
                arrays[0].append(.text(task.id))
                for (index, column) in columns.enumerated() { arrays[index + 1].append(column.value(task)) }
            }
            try database.run(updateSQL, arrays.map { .text($0.finish()) })
        }
        guard !samples.isEmpty else { return }
        // One row per task and second: a statement may not change a row twice.
        var latest: [String: Int] = [:]
        var unique: [History.Sample] = []
        for sample in samples {
            let key = sample.taskID + "\u{0}" + String(sample.bucket)
            if let index = latest[key] { unique[index] = sample } else {
                latest[key] = unique.count
                unique.append(sample)
            }
        }
        var arrays = [ArrayLiteral](repeating: ArrayLiteral(), count: 6)
        for sample in unique {
            arrays[0].append(.text(sample.taskID))
            arrays[1].append(.integer(sample.bucket))
            arrays[2].append(.integer(sample.point.t))
            arrays[3].append(.integer(sample.point.completed))
            arrays[4].append(sample.point.total.map { .integer($0) } ?? .null)
            arrays[5].append(sample.point.fraction.map { .real($0) } ?? .null)
        }
        try database.run(insertHistorySQL, arrays.map { .text($0.finish()) })
    }
}

/// A one-dimensional PostgreSQL array as its text literal: `{1,NULL,"a \"b\""}`.
struct ArrayLiteral {
    private var text = "{"
    private var isEmpty = true

    /// Adds an element (text quoted, with `"` and `\` escaped; NULL bare).
    mutating func append(_ value: SQLValue) {
        if !isEmpty { text.append(",") }
        isEmpty = false
        switch value {
        case .null: text += "NULL"
        case .integer(let number): text += String(number)
        case .real(let number): text += PostgresConnection.text(of: number)
        case .text(let string):
            text.append("\"")
            for character in string.unicodeScalars {
                if character == "\"" || character == "\\" { text.append("\\") }
                text.unicodeScalars.append(character)
            }
            text.append("\"")
        }
    }

    /// The literal.
    func finish() -> String { text + "}" }
}
