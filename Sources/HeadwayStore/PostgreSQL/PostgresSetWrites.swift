import Synchronization
import HeadwayCore

/// A writer batch's held writes on PostgreSQL (`SQLDialect.writeHeldTasks`): one statement
/// per table for the whole batch, whatever its number of tasks, so that a batch sends a
/// fixed number of statements, each parsed, planned and answered once. Each column's
/// values travel as one array parameter (a text literal, `{…}`), which `unnest` turns
/// back into rows: the statements' texts do not depend on the batch's size, so each is
/// prepared once per connection.
///
/// The columns written are those that differ for any task of the batch (`shape`): for the
/// others of those tasks a column is rewritten with its own value, which costs nothing more
/// than the row's new version, which PostgreSQL writes anyway.
///
/// The same statement keeps the tables apart (`task_changes`, `task_deadlines`: migration
/// 0012) for the rows it updates: it reads each row's old change number and stall deadline
/// before updating it, and moves the tables' rows whose value changed, by the set. The
/// trigger that keeps them for any other statement (`tasks_apart_update`) is told to let
/// this one pass by the transaction-local setting `headway.tasks_apart_written`, on only
/// while the statement runs: the trigger's four statements over transition tables, run
/// through PL/pgSQL, cost PostgreSQL about a quarter of its work per update.
enum PostgresSetWrites {
    private static let columns = TaskRepository.MutableColumn.allCases

    /// `UPDATE tasks … FROM unnest(ids, column 1, column 2, …)` of `columns`, and the rows
    /// of the tables apart whose value the update changed, deleted at their old value and
    /// inserted at their new one. All parts of one statement see the rows as they were
    /// before it, so `old` reads the values the update replaces — unless a writer outside
    /// the writers' order (a hand) changed a row after the statement began: the update then
    /// goes on with the row's latest version (`READ COMMITTED`), whose number or deadline
    /// may no longer be the old ones read (in a batch that takes the writers' order last,
    /// the writer holding the order may be that writer: `SharedWriting.lostOrder`). Such a
    /// row is left alone (the `WHERE` is checked
    /// again against its latest version), and the statement fails when it updated fewer
    /// rows than it was given, so the batch runs again with a savepoint per job and per-row
    /// updates, which the trigger follows (`GroupCommitWriter`).
    static func updateSQL(of columns: [TaskRepository.MutableColumn]) -> String {
        let names = columns.map(\.rawValue)
        return setUpdateStart + " tasks.stall_deadline AS old_due, u.*"
            + " FROM unnest(?1::text[], " + columns.indices.map { "?\($0 + 2)::\(arrayType(columns[$0].kind))" }
                .joined(separator: ", ")
            + ") AS u(id, " + names.joined(separator: ", ") + ") JOIN tasks ON tasks.id = u.id COLLATE \"C\"),"
            + " updated AS (UPDATE tasks SET " + names.map { "\($0) = old.\($0)" }.joined(separator: ", ")
            + " FROM old WHERE tasks.seq = old.seq AND tasks.change_seq = old.old_number"
            + " AND tasks.stall_deadline IS NOT DISTINCT FROM old.old_due"
            + " RETURNING tasks.seq, old.old_number, tasks.change_seq AS number, old.old_due, tasks.stall_deadline AS due),"
            + " numbers_gone AS (DELETE FROM task_changes USING updated WHERE task_changes.number = updated.old_number"
            + " AND task_changes.task = updated.seq AND updated.number <> updated.old_number),"
            + " numbers_new AS (INSERT INTO task_changes (number, task) SELECT number, seq FROM updated"
            + " WHERE number <> old_number),"
            + " deadlines_gone AS (DELETE FROM task_deadlines USING updated WHERE task_deadlines.due = updated.old_due"
            + " AND task_deadlines.task = updated.seq AND updated.due IS DISTINCT FROM updated.old_due),"
            + " deadlines_new AS (INSERT INTO task_deadlines (due, task) SELECT due, seq FROM updated"
            + " WHERE due IS NOT NULL AND due IS DISTINCT FROM old_due)"
            + " SELECT 1 / (count(*) = cardinality(?1::text[]))::int AS every_row_updated FROM updated"
    }

    /// How every set update's statement begins (`isSetUpdate`).
    private static let setUpdateStart = "WITH old AS (SELECT tasks.seq, tasks.change_seq AS old_number,"

    /// Whether `sql` is a set update's statement (`updateSQL`): in a batch that takes the
    /// writers' order last, its failed check means that the writer holding the order wrote
    /// one of its rows meanwhile (`SharedWriting.lostOrder`).
    static func isSetUpdate(_ sql: String?) -> Bool { sql?.hasPrefix(setUpdateStart) == true }

    /// A set of columns a batch writes, and its statement (`updateSQL`).
    struct UpdateShape {
        let columns: [TaskRepository.MutableColumn]
        let sql: String
    }

    /// The columns a batch writes: those that differ for at least one of its tasks (`state`
    /// and `stalled` also whenever a value `task_counts` counts by differs: its trigger is
    /// `AFTER UPDATE OF state, stalled`), when that set is one of the first
    /// `updateShapesKept` seen; else all of them. A progress update changes a dozen of the
    /// forty-six, and PostgreSQL parses every element of every array parameter and copies
    /// every column through the statement's joins. Each set is a statement of its own,
    /// prepared once per connection, so their number is bounded.
    static func shape(of changed: [(task: TaskRecord, previous: TaskRecord)]) -> UpdateShape {
        let mask = columnsToWrite(changed)
        return updateShapes.withLock { shapes in
            if let known = shapes[mask] { return known }
            guard shapes.count < updateShapesKept else { return everyColumn }
            let written = columns(in: mask)
            let shape = UpdateShape(columns: written, sql: updateSQL(of: written))
            shapes[mask] = shape
            return shape
        }
    }

    /// The columns that differ for at least one task of `changed`, with `state` and
    /// `stalled` when a counted value differs (see `shape`): bit i for `columns[i]`. One
    /// pass over the tasks (a task's records are large: looked at once each, not once per
    /// column), each column compared only until a task differs in it.
    static func columnsToWrite(_ changed: [(task: TaskRecord, previous: TaskRecord)]) -> UInt64 {
        var mask: UInt64 = 0
        let every: UInt64 = 1 << UInt64(columns.count) - 1
        for (task, previous) in changed {
            if mask & countedBits != countedBits && TaskRepository.countedValuesDiffer(task, previous) { mask |= countedBits }
            for (index, column) in columns.enumerated() where mask & 1 << UInt64(index) == 0 && column.differs(task, previous) {
                mask |= 1 << UInt64(index)
            }
            if mask == every { break }
        }
        return mask
    }

    /// The columns of `mask`'s bits (`columnsToWrite`), in `MutableColumn` order.
    static func columns(in mask: UInt64) -> [TaskRepository.MutableColumn] {
        columns.indices.filter { mask & 1 << UInt64($0) != 0 }.map { columns[$0] }
    }

    /// The bits of `state` and `stalled`, written whenever a value `task_counts` counts by differs.
    private static let countedBits = columns.indices.reduce(UInt64(0)) { mask, index in
        columns[index] == .state || columns[index] == .stalled ? mask | 1 << UInt64(index) : mask
    }

    /// Every column, past `updateShapesKept` sets.
    private static let everyColumn = UpdateShape(columns: columns, sql: updateSQL(of: columns))
    /// The sets of columns written so far (`shape`), by their bits.
    private static let updateShapes = Mutex<[UInt64: UpdateShape]>([:])
    /// At most this many sets of columns get a statement of their own.
    static let updateShapesKept = 64

    /// Lets the set update pass the trigger that keeps the tables apart (see the type's
    /// comment), and lets the planner read the tables only through their keys until the
    /// transaction ends, as the trigger's function does: the statement is prepared once per
    /// connection, maybe while the tables are small, and a plan kept from then would hash
    /// each table whole as it grows. A generic plan is used from the first execution: the
    /// planner would otherwise plan again for every small batch (below about ten tasks, the
    /// rows a generic plan expects of `unnest`), and such a plan costs more than the batch.
    static let passTheTriggerSQL = "SELECT set_config('headway.tasks_apart_written', 'on', true),"
        + " set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),"
        + " set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)"

    /// Stops letting any statement pass the trigger, once the set update is done.
    static let stopPassingTheTriggerSQL = "SELECT set_config('headway.tasks_apart_written', 'off', true)"

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
            let shape = shape(of: changed)
            var arrays = (0...shape.columns.count).map { _ in ArrayLiteral(reservingRoomFor: changed.count) }
            for (task, _) in changed {
                arrays[0].append(.text(task.id))
                for (index, column) in shape.columns.enumerated() { arrays[index + 1].append(column.value(task)) }
            }
            try database.run(passTheTriggerSQL)
            try database.run(shape.sql, arrays.map { .text($0.finish()) })
            try database.run(stopPassingTheTriggerSQL)
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
        var arrays = (0..<6).map { _ in ArrayLiteral(reservingRoomFor: unique.count) }
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

/// A one-dimensional PostgreSQL array as its text literal: `{1,NULL,"a \"b\""}`. Built as
/// UTF-8 bytes, each text copied whole unless it holds a character to escape, and each
/// integer's digits written in place: a batch's set writes put some forty-five values per task
/// into these literals (`PostgresSetWrites`), on the writer thread.
struct ArrayLiteral {
    private var bytes: [UInt8]
    private var isEmpty = true

    /// An empty array, with room for about `elements` elements of a few bytes each.
    init(reservingRoomFor elements: Int = 0) {
        bytes = [Self.openingBrace]
        bytes.reserveCapacity(2 + 16 * elements)
    }

    private static let openingBrace = UInt8(ascii: "{")
    private static let quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\")

    /// Adds an element (text quoted, with `"` and `\` escaped; NULL bare).
    mutating func append(_ value: SQLValue) {
        if !isEmpty { bytes.append(UInt8(ascii: ",")) }
        isEmpty = false
        switch value {
        case .null: bytes.append(contentsOf: Self.null)
        case .integer(let number): appendDecimal(number)
        case .real(let number):
            // A whole number in its digits (`3`, which PostgreSQL reads as the same float8 as
            // `3.0`): most real columns hold whole numbers, and formatting a `Double` as text
            // costs several times as much. -0.0 keeps its sign.
            if let whole = Int64(exactly: number), whole != 0 || number.sign == .plus {
                appendDecimal(whole)
            } else {
                bytes.append(contentsOf: PostgresConnection.text(of: number).utf8)
            }
        case .text(var string): string.withUTF8 { appendQuoted($0) }
        }
    }

    private static let null = Array("NULL".utf8)

    /// `utf8` between quotes. No byte of a multi-byte UTF-8 sequence is a `"` or a `\`, so
    /// escaping bytes escapes the characters.
    private mutating func appendQuoted(_ utf8: UnsafeBufferPointer<UInt8>) {
        bytes.append(Self.quote)
        if utf8.contains(where: { $0 == Self.quote || $0 == Self.backslash }) {
            for byte in utf8 {
                if byte == Self.quote || byte == Self.backslash { bytes.append(Self.backslash) }
                bytes.append(byte)
            }
        } else {
            bytes.append(contentsOf: utf8)
        }
        bytes.append(Self.quote)
    }

    /// `number` in decimal digits, written in place (no `String` made for it).
    private mutating func appendDecimal(_ number: Int64) {
        if number < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = number.magnitude
        // At most 20 digits (`UInt64.max`), written from the last into a buffer on the stack.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var first = digits.count
            repeat {
                first -= 1
                digits[first] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[first...]))
        }
    }

    /// The literal.
    func finish() -> String {
        var literal = bytes
        literal.append(UInt8(ascii: "}"))
        return String(decoding: literal, as: UTF8.self)
    }
}
