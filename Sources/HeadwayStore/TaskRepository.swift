import HeadwayCore
import Synchronization

/// Which tasks a listing wants.
public struct TaskFilter: Equatable, Sendable {
    /// Any of these states (all states when empty).
    public var states: [TaskState] = []
    /// Only stalled (true) or only not stalled (false) tasks.
    public var stalled: Bool?
    /// Only children of this task.
    public var parentID: String?
    /// Only tasks without a parent.
    public var rootOnly = false
    /// Only tasks whose id starts with this (the task prefix of the caller's token): a
    /// range of ids in every index range read, and a count of the table's rows instead of
    /// the kept counts.
    public var taskPrefix: String?
    /// Only tasks whose id or name holds this text, whatever its case (`q`): read from the
    /// search index (`SQLDialect.searchKeys`: `SQLiteTaskSearch`, `PostgresTaskSearch`).
    public var search: String?
    /// Only tasks flagged overdue (`overdue=true`): read from the overdue tasks' own index,
    /// and counted there, not from the kept counts.
    public var overdueOnly = false

    public init(states: [TaskState] = [], stalled: Bool? = nil, parentID: String? = nil, rootOnly: Bool = false,
                taskPrefix: String? = nil, search: String? = nil, overdueOnly: Bool = false) {
        self.overdueOnly = overdueOnly
        self.states = states
        self.stalled = stalled
        self.parentID = parentID
        self.rootOnly = rootOnly
        self.taskPrefix = taskPrefix
        self.search = search
    }
}

/// A page of tasks, newest first.
public struct TaskPage: Equatable, Sendable {
    public var tasks: [TaskRecord]
    /// The creation key of each task of `tasks`, in the same order.
    public var keys: [Int64]
    /// The creation key of the last task, when more may follow.
    public var nextKey: Int64?
    /// How many tasks match the filter in all.
    public var totalSize: Int64
}

/// SQL for the `tasks` table, mapping rows to `TaskRecord`s. Every function runs on the
/// connection it is given; the caller decides about transactions.
///
/// Three numbers live in a task's row, easily confused: the column `seq` is its *listing
/// key* (the order of insertion, by which lists are paged: `beforeKey`, `nextKey`);
/// `last_seq` is the *runner's seq* last applied (`lastRunnerSeq`, for retries); and
/// `change_seq` is its latest *change number* (`changeNumber`, the event stream's id).
public enum TaskRepository {
    /// The columns of a task, in the order `values(_:)` and `record(_:)` use.
    static let columnNames = [
        "id", "name", "label", "parent_id", "weight", "state", "completed", "total", "unit", "stalled",
        "stall_reason", "stalled_since", "stall_timeout_ms", "progress_timeout_ms", "cancel_requested", "last_seq",
        "created_at", "updated_at", "last_signal_at", "last_progress_at", "finished_at", "message", "metadata",
        "definition", "change_seq", "change_kind", "started_at", "stall_deadline", "rate_units", "rate_seconds",
        "sample_at", "sample_value", "children_weight", "children_done", "history_points", "history_bucket", "is_root", "depth", "child_count",
        "children_pending", "children_running", "children_stalled", "children_succeeded", "children_failed",
        "children_canceled", "failing_children", "stalling_children",
        "last_output", "output_lines", "unfinished_children_done",
        "expected_ms", "deadline", "min_ms", "overdue", "overdue_since", "overdue_at", "too_quick",
    ]
    static let columns = columnNames.joined(separator: ", ")

    // The statements of the hot path, built once (not interpolated and hashed anew per call).
    private static let findSQL = "SELECT \(columns) FROM tasks WHERE id = ?"
    private static let insertSQL = "INSERT INTO tasks (\(columns)) VALUES ("
        + Array(repeating: "?", count: columnNames.count).joined(separator: ", ") + ")"

    /// The task with `id`, if any.
    public static func find(_ id: String, in database: Database) throws(DatabaseError) -> TaskRecord? {
        try database.rows(findSQL, [.text(id)], map: record).first
    }

    /// Inserts a new task.
    public static func insert(_ task: TaskRecord, in database: Database) throws(DatabaseError) {
        try database.run(insertSQL, values(task))
    }

    /// A column a task's life can change (the rest are fixed at registration), named by
    /// its raw value. `state` and `stalled` come last: they are indexed, and naming them in
    /// an UPDATE runs the trigger that keeps `task_counts`, so they are written only when a
    /// counted value changes (`countedValuesDiffer`).
    ///
    /// A switch, not a table of closures: walking an array of closures retains and releases
    /// each one's context per column per update, about 200 reference-count operations an
    /// update on the writer.
    enum MutableColumn: String, CaseIterable {
        case label, completed, total, unit, stallReason = "stall_reason", stalledSince = "stalled_since"
        case cancelRequested = "cancel_requested", lastSeq = "last_seq", updatedAt = "updated_at"
        case lastSignalAt = "last_signal_at", lastProgressAt = "last_progress_at", finishedAt = "finished_at"
        case message, changeSeq = "change_seq", changeKind = "change_kind", startedAt = "started_at"
        case stallDeadline = "stall_deadline", rateUnits = "rate_units", rateSeconds = "rate_seconds"
        case sampleAt = "sample_at", sampleValue = "sample_value", childrenWeight = "children_weight"
        case childrenDone = "children_done", historyPoints = "history_points", historyBucket = "history_bucket"
        case childCount = "child_count", childrenPending = "children_pending", childrenRunning = "children_running"
        case childrenStalled = "children_stalled", childrenSucceeded = "children_succeeded"
        case childrenFailed = "children_failed", childrenCanceled = "children_canceled"
        case failingChildren = "failing_children", stallingChildren = "stalling_children"
        case lastOutput = "last_output", outputLines = "output_lines"
        case unfinishedChildrenDone = "unfinished_children_done", overdue, overdueSince = "overdue_since"
        case overdueAt = "overdue_at", tooQuick = "too_quick", state, stalled

        /// Whether the column's value differs between `task` and `previous`.
        func differs(_ task: TaskRecord, _ previous: TaskRecord) -> Bool {
            switch self {
            case .label: task.label != previous.label
            case .completed: task.completed != previous.completed
            case .total: task.total != previous.total
            case .unit: task.unit != previous.unit
            case .stallReason: task.stallReason != previous.stallReason
            case .stalledSince: task.stalledSince != previous.stalledSince
            case .cancelRequested: task.cancelRequested != previous.cancelRequested
            case .lastSeq: task.lastRunnerSeq != previous.lastRunnerSeq
            case .updatedAt: task.updatedAt != previous.updatedAt
            case .lastSignalAt: task.lastSignalAt != previous.lastSignalAt
            case .lastProgressAt: task.lastProgressAt != previous.lastProgressAt
            case .finishedAt: task.finishedAt != previous.finishedAt
            case .message: task.message != previous.message
            case .changeSeq: task.changeNumber != previous.changeNumber
            case .changeKind: task.changeKind != previous.changeKind
            case .startedAt: task.startedAt != previous.startedAt
            case .stallDeadline: task.stallDeadline != previous.stallDeadline
            case .rateUnits: task.rate.weightedUnits != previous.rate.weightedUnits
            case .rateSeconds: task.rate.weightedSeconds != previous.rate.weightedSeconds
            case .sampleAt: task.rate.sampleAt != previous.rate.sampleAt
            case .sampleValue: task.rate.sampleValue != previous.rate.sampleValue
            case .childrenWeight: task.childrenWeight != previous.childrenWeight
            case .childrenDone: task.childrenDone != previous.childrenDone
            case .unfinishedChildrenDone: task.unfinishedChildrenDone != previous.unfinishedChildrenDone
            case .historyPoints: task.historyPoints != previous.historyPoints
            case .historyBucket: task.historyBucket != previous.historyBucket
            case .childCount: task.childCount != previous.childCount
            case .childrenPending: task.children.pending != previous.children.pending
            case .childrenRunning: task.children.running != previous.children.running
            case .childrenStalled: task.children.stalled != previous.children.stalled
            case .childrenSucceeded: task.children.succeeded != previous.children.succeeded
            case .childrenFailed: task.children.failed != previous.children.failed
            case .childrenCanceled: task.children.canceled != previous.children.canceled
            case .failingChildren: task.failingChildren != previous.failingChildren
            case .stallingChildren: task.stallingChildren != previous.stallingChildren
            case .lastOutput: task.lastOutput != previous.lastOutput
            case .outputLines: task.outputLines != previous.outputLines
            case .overdue: task.overdue != previous.overdue
            case .overdueSince: task.overdueSince != previous.overdueSince
            case .overdueAt: task.overdueAt != previous.overdueAt
            case .tooQuick: task.tooQuick != previous.tooQuick
            case .state: task.state != previous.state
            case .stalled: task.stalled != previous.stalled
            }
        }

        /// What the column holds (every case named: a new column must say, or PostgreSQL's
        /// set writes would send its values as the wrong type).
        var kind: ColumnKind {
            switch self {
            case .label, .unit, .stallReason, .message, .changeKind, .lastOutput, .state: .text
            case .rateUnits, .rateSeconds, .sampleValue, .childrenWeight, .childrenDone, .unfinishedChildrenDone: .real
            case .completed, .total, .stalledSince, .cancelRequested, .lastSeq, .updatedAt, .lastSignalAt, .lastProgressAt,
                 .finishedAt, .changeSeq, .startedAt, .stallDeadline, .sampleAt, .historyPoints, .historyBucket, .childCount,
                 .childrenPending, .childrenRunning, .childrenStalled, .childrenSucceeded, .childrenFailed, .childrenCanceled,
                 .failingChildren, .stallingChildren, .outputLines, .overdue, .overdueSince, .overdueAt, .tooQuick, .stalled:
                .integer
            }
        }

        /// The column's value in `task`.
        func value(_ task: TaskRecord) -> SQLValue {
            switch self {
            case .label: text(task.label)
            case .completed: .integer(task.completed)
            case .total: integer(task.total)
            case .unit: text(task.unit)
            case .stallReason: text(task.stallReason?.rawValue)
            case .stalledSince: integer(task.stalledSince)
            case .cancelRequested: .integer(task.cancelRequested ? 1 : 0)
            case .lastSeq: integer(task.lastRunnerSeq)
            case .updatedAt: .integer(task.updatedAt)
            case .lastSignalAt: .integer(task.lastSignalAt)
            case .lastProgressAt: integer(task.lastProgressAt)
            case .finishedAt: integer(task.finishedAt)
            case .message: text(task.message)
            case .changeSeq: .integer(task.changeNumber)
            case .changeKind: .text(task.changeKind.rawValue)
            case .startedAt: integer(task.startedAt)
            case .stallDeadline: integer(task.stallDeadline)
            case .rateUnits: .real(task.rate.weightedUnits)
            case .rateSeconds: .real(task.rate.weightedSeconds)
            case .sampleAt: integer(task.rate.sampleAt)
            case .sampleValue: .real(task.rate.sampleValue)
            case .childrenWeight: .real(task.childrenWeight)
            case .childrenDone: .real(task.childrenDone)
            case .unfinishedChildrenDone: .real(task.unfinishedChildrenDone)
            case .historyPoints: .integer(Int64(task.historyPoints))
            case .historyBucket: integer(task.historyBucket)
            case .childCount: .integer(Int64(task.childCount))
            case .childrenPending: .integer(Int64(task.children.pending))
            case .childrenRunning: .integer(Int64(task.children.running))
            case .childrenStalled: .integer(Int64(task.children.stalled))
            case .childrenSucceeded: .integer(Int64(task.children.succeeded))
            case .childrenFailed: .integer(Int64(task.children.failed))
            case .childrenCanceled: .integer(Int64(task.children.canceled))
            case .failingChildren: .integer(Int64(task.failingChildren))
            case .stallingChildren: .integer(Int64(task.stallingChildren))
            case .lastOutput: text(task.lastOutput)
            case .outputLines: .integer(task.outputLines)
            case .overdue: .integer(task.overdue ? 1 : 0)
            case .overdueSince: integer(task.overdueSince)
            case .overdueAt: integer(task.overdueAt)
            case .tooQuick: .integer(task.tooQuick ? 1 : 0)
            case .state: .text(task.state.rawValue)
            case .stalled: .integer(task.stalled ? 1 : 0)
            }
        }
    }
    /// The bits of `state` and `stalled` in a set of columns.
    private static let countedColumns: UInt64 = 0b11 << UInt64(MutableColumn.allCases.count - 2)

    /// The UPDATE statement of each set of columns written so far (a bit per column of
    /// `MutableColumn.allCases`), built once: an update writes only the columns that changed, so
    /// SQLite neither binds nor copies the others, and the few sets the operations produce
    /// each get their prepared statement. Past `maximumUpdateStatements` sets (never under
    /// the operations as they are), an update writes every column.
    private static let updateStatements = Mutex<[UInt64: String]>([:])
    private static let maximumUpdateStatements = 256

    /// The UPDATE statement that writes the columns of `columns`.
    private static func updateSQL(_ columns: UInt64) -> String {
        if let sql = updateStatements.withLock({ $0[columns] }) { return sql }
        // Built outside the lock; two threads building the same set store the same text.
        let names = MutableColumn.allCases.enumerated().filter { columns & (1 << UInt64($0.offset)) != 0 }.map(\.element.rawValue)
        let sql = "UPDATE tasks SET " + names.map { "\($0) = ?" }.joined(separator: ", ") + " WHERE id = ?"
        updateStatements.withLock { statements in
            if statements.count < maximumUpdateStatements { statements[columns] = sql }
        }
        return sql
    }

    /// What a column holds (the type of its values, NULL aside).
    enum ColumnKind {
        case text, integer, real
    }

    /// Whether any column a task's life can change differs between `task` and `previous`:
    /// whether `update` writes anything.
    static func differs(_ task: TaskRecord, _ previous: TaskRecord) -> Bool {
        MutableColumn.allCases.contains { $0.differs(task, previous) }
    }

    /// Writes the changes from `previous` to `task` (the same task, `previous` as stored):
    /// only the columns whose values differ.
    public static func update(_ task: TaskRecord, previous: TaskRecord, in database: Database) throws(DatabaseError) {
        var columns: UInt64 = countedValuesDiffer(task, previous) ? countedColumns : 0
        for (index, column) in MutableColumn.allCases.dropLast(2).enumerated() where column.differs(task, previous) {
            columns |= 1 << UInt64(index)
        }
        guard columns != 0 else { return }
        if updateStatements.withLock({ $0[columns] == nil && $0.count >= maximumUpdateStatements }) {
            columns = ~countedColumns & (1 << UInt64(MutableColumn.allCases.count) - 1) | columns & countedColumns
        }
        var arguments: [SQLValue] = []
        arguments.reserveCapacity(columns.nonzeroBitCount + 1)
        for (index, column) in MutableColumn.allCases.enumerated() where columns & (1 << UInt64(index)) != 0 {
            arguments.append(column.value(task))
        }
        arguments.append(.text(task.id))
        try database.run(updateSQL(columns), arguments)
    }

    /// Whether `task` is counted under other values than `previous` in `task_counts`
    /// (state, stall flag and reason, mode; `is_root` never changes).
    static func countedValuesDiffer(_ task: TaskRecord, _ previous: TaskRecord) -> Bool {
        task.state != previous.state || task.stalled != previous.stalled || task.stallReason != previous.stallReason
            || task.mode != previous.mode
    }

    /// Changes the stored count of children of `id` by `delta` (a child forgotten by retention).
    public static func adjustChildCount(of id: String, by delta: Int, in database: Database) throws(DatabaseError) {
        try database.run("UPDATE tasks SET child_count = child_count + ? WHERE id = ?", [.integer(Int64(delta)), .text(id)])
    }

    /// How many tasks are stored: the sum of the counts the triggers keep (a few rows),
    /// not a scan of the table.
    public static func storedCount(in database: Database) throws(DatabaseError) -> Int64 {
        try database.scalar("SELECT coalesce(sum(n), 0) FROM task_counts") ?? 0
    }

    /// Tasks whose stall deadline has passed at `now`, earliest first (an index range).
    public static func dueForStallCheck(at now: EpochMilliseconds, limit: Int,
                                        in database: Database) throws(DatabaseError) -> [TaskRecord] {
        let deadlines = database.dialect.stallDeadlines
        return try database.rows(
            "SELECT \(columns) FROM \(deadlines.source) WHERE \(deadlines.column) <= ? ORDER BY \(deadlines.column) LIMIT ?",
            [.integer(now), .integer(Int64(limit))], map: record)
    }

    /// Unfinished tasks not flagged overdue whose due moment has passed at `now`, earliest
    /// first (an index range: `RunTimeRule.sweepAt`).
    public static func dueForOverdueCheck(at now: EpochMilliseconds, limit: Int,
                                          in database: Database) throws(DatabaseError) -> [TaskRecord] {
        try database.rows("SELECT \(columns) FROM tasks WHERE overdue_at <= ? ORDER BY overdue_at LIMIT ?",
                          [.integer(now), .integer(Int64(limit))], map: record)
    }

    /// How many unfinished tasks are flagged overdue now (a range of the overdue tasks' index).
    public static func overdueUnfinishedCount(in database: Database) throws(DatabaseError) -> Int64 {
        try database.scalar("SELECT count(*) FROM tasks WHERE overdue = 1 AND state IN ('pending', 'running')") ?? 0
    }

    /// Tasks that finished before `cutoff` and have no stored children, whatever their
    /// parent's state: the leaves retention may forget now, oldest first (a parent keeps
    /// what they contributed, `TaskStore.prune`).
    public static func prunable(finishedBefore cutoff: EpochMilliseconds, limit: Int,
                                in database: Database) throws(DatabaseError) -> [TaskRecord] {
        try database.rows("""
            SELECT \(columns) FROM tasks AS t
            WHERE t.finished_at < ?1
              AND NOT EXISTS (SELECT 1 FROM tasks AS c WHERE c.parent_id = t.id)
            ORDER BY t.finished_at LIMIT ?2
            """, [.integer(cutoff), .integer(Int64(limit))], map: record)
    }

    /// At most `limit` children of `parentID` with a listing key above `afterKey`, in
    /// creation order, each with its listing key: one range of `tasks_by_parent`, so a
    /// subtree is walked a bounded page at a time.
    public static func children(of parentID: String, afterKey: Int64, limit: Int,
                                in database: Database) throws(DatabaseError) -> [(task: TaskRecord, key: Int64)] {
        try database.rows("SELECT \(columns), seq FROM tasks WHERE parent_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                          [.text(parentID), .integer(afterKey), .integer(Int64(limit))], map: keyedRecord)
    }

    /// The id of a descendant of `rootID` whose id does not start with `prefix`, or nil.
    /// Goes down `tasks_by_parent` from `rootID` through the tasks of the prefix only, and
    /// stops at the first task outside it: the cost of a subtree that holds none is one
    /// index range (and a row lookup for each id) per task of the subtree.
    public static func descendantOutside(prefix: String, below rootID: String,
                                         in database: Database) throws(DatabaseError) -> String? {
        let range = TaskIDPrefix.range(prefix)
        return try database.rows("""
            WITH RECURSIVE below(id) AS (
                SELECT id FROM tasks WHERE parent_id = ?1
                UNION ALL
                SELECT child.id FROM below JOIN tasks AS child ON child.parent_id = below.id
                WHERE below.id >= ?2 AND below.id < ?3
            )
            SELECT id FROM below WHERE id < ?2 OR id >= ?3 LIMIT 1
            """, [.text(rootID), .text(range.lower), .text(range.upper)]) { $0.text(0) }.first
    }

    /// At most `limit` tasks whose parent is not stored: what a subtree delete interrupted
    /// between its steps (a crash) left behind. One scan of the table, with a primary-key
    /// lookup per child task.
    public static func orphans(limit: Int, in database: Database) throws(DatabaseError) -> [String] {
        try database.rows("""
            SELECT id FROM tasks AS child WHERE parent_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM tasks AS parent WHERE parent.id = child.parent_id) LIMIT ?
            """, [.integer(Int64(limit))]) { $0.text(0) }
    }

    /// Deletes one task.
    public static func delete(_ id: String, in database: Database) throws(DatabaseError) {
        try database.run("DELETE FROM tasks WHERE id = ?", [.text(id)])
    }

    /// One page of tasks matching `filter`, newest first, strictly older than `beforeKey`.
    ///
    /// Keyset paging whose cost does not grow with the table: the keys come from one index
    /// range per combination of filter values (state × root or not × stalled or not, read
    /// from `tasks_listing` without touching the table; or the children of one parent from
    /// `tasks_by_parent`), each limited to a page, merged, and only the page's rows are
    /// read. `totalSize` comes from the counts the triggers keep.
    public static func page(_ filter: TaskFilter, size: Int, beforeKey: Int64?,
                            in database: Database) throws(DatabaseError) -> TaskPage {
        if let search = filter.search {
            let keys = try database.dialect.searchKeys(search, filter: filter, limit: size + 1, beforeKey: beforeKey, in: database)
            // A first page that holds every match has counted them: the search for one
            // task by its name costs one query of the index, not two.
            let totalSize = beforeKey == nil && keys.count <= size
                ? Int64(keys.count) : try database.dialect.searchCount(search, filter: filter, in: database)
            return try page(keys: keys, size: size, totalSize: totalSize, in: database)
        }
        var keys: [Int64] = []
        for (conditions, arguments) in keyRanges(filter) {
            var conditions = conditions, arguments = arguments
            if let beforeKey {
                conditions.append("seq < ?")
                arguments.append(.integer(beforeKey))
            }
            keys += try database.rows("SELECT seq FROM tasks" + whereText(conditions) + " ORDER BY seq DESC LIMIT ?",
                                      arguments + [.integer(Int64(size) + 1)]) { $0.int(0) }
        }
        keys.sort(by: >)
        return try page(keys: keys, size: size, totalSize: count(filter, in: database), in: database)
    }

    /// The page of the first `size` of `keys` (newest first): their rows, and the key to
    /// continue from when `keys` holds more.
    private static func page(keys: [Int64], size: Int, totalSize: Int64,
                             in database: Database) throws(DatabaseError) -> TaskPage {
        let pageKeys = Array(keys.prefix(size))
        let tasks = pageKeys.isEmpty ? [] : try database.rows(
            "SELECT \(columns) FROM tasks WHERE seq IN (\(pageKeys.map { _ in "?" }.joined(separator: ", "))) ORDER BY seq DESC",
            pageKeys.map { .integer($0) }, map: record)
        return TaskPage(tasks: tasks, keys: pageKeys, nextKey: keys.count > size ? pageKeys.last : nil, totalSize: totalSize)
    }

    /// The index ranges that together hold exactly the tasks matching `filter`.
    private static func keyRanges(_ filter: TaskFilter) -> [([String], [SQLValue])] {
        if filter.parentID != nil || filter.overdueOnly { return [whereClause(filter)] }
        var ranges: [([String], [SQLValue])] = []
        let prefix = prefixClause(filter)
        for state in filter.states.isEmpty ? TaskState.allCases : filter.states {
            for isRoot in filter.rootOnly ? [true] : [true, false] {
                for stalled in filter.stalled.map({ [$0] }) ?? [false, true] {
                    ranges.append((["state = ?", "is_root = ?", "stalled = ?"] + prefix.0,
                                   [.text(state.rawValue), .integer(isRoot ? 1 : 0), .integer(stalled ? 1 : 0)] + prefix.1))
                }
            }
        }
        return ranges
    }

    /// How many tasks match `filter`.
    public static func count(_ filter: TaskFilter, in database: Database) throws(DatabaseError) -> Int64 {
        if let search = filter.search { return try database.dialect.searchCount(search, filter: filter, in: database) }
        // Under one parent, count its children (an index range), and the overdue tasks in
        // their own index; otherwise the filter names only columns that task_counts also has.
        let (conditions, arguments) = whereClause(filter)
        let source = filter.parentID != nil || filter.taskPrefix != nil || filter.overdueOnly
            ? "count(*) FROM tasks" : "coalesce(sum(n), 0) FROM task_counts"
        return try database.scalar("SELECT " + source + whereText(conditions), arguments) ?? 0
    }

    private static func whereText(_ conditions: [String]) -> String {
        conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
    }

    /// The conditions of `filter` but its search, on the columns of `tasks` (named
    /// `table.column` when `table` is given).
    static func whereClause(_ filter: TaskFilter, table: String? = nil) -> ([String], [SQLValue]) {
        let column = { (name: String) in table.map { "\($0).\(name)" } ?? name }
        var conditions: [String] = []
        var arguments: [SQLValue] = []
        if !filter.states.isEmpty {
            conditions.append(column("state") + " IN (" + filter.states.map { _ in "?" }.joined(separator: ", ") + ")")
            arguments += filter.states.map { .text($0.rawValue) }
        }
        if let stalled = filter.stalled {
            conditions.append(column("stalled") + " = ?")
            arguments.append(.integer(stalled ? 1 : 0))
        }
        if let parentID = filter.parentID {
            conditions.append(column("parent_id") + " = ?")
            arguments.append(.text(parentID))
        }
        if filter.rootOnly { conditions.append(column("is_root") + " = 1") }
        if filter.overdueOnly { conditions.append(column("overdue") + " = 1") }
        let prefix = prefixClause(filter, table: table)
        return (conditions + prefix.0, arguments + prefix.1)
    }

    /// The condition keeping the ids of `filter.taskPrefix` (none without one).
    private static func prefixClause(_ filter: TaskFilter, table: String? = nil) -> ([String], [SQLValue]) {
        guard let taskPrefix = filter.taskPrefix else { return ([], []) }
        let range = TaskIDPrefix.range(taskPrefix)
        let id = table.map { "\($0).id" } ?? "id"
        return (["\(id) >= ?", "\(id) < ?"], [.text(range.lower), .text(range.upper)])
    }

    /// How many tasks there are in each state, and how many of them are stalled: from the
    /// counts the triggers keep (a few rows); with `taskPrefix`, a count of that prefix's
    /// range of the id index (its cost grows with the prefix's tasks, not with the table).
    public static func summary(taskPrefix: String?, rootOnly: Bool,
                               in database: Database) throws(DatabaseError) -> TaskSummary {
        var conditions: [String] = rootOnly ? ["is_root = 1"] : []
        var arguments: [SQLValue] = []
        let source: String
        if let taskPrefix {
            let range = TaskIDPrefix.range(taskPrefix)
            conditions += ["id >= ?", "id < ?"]
            arguments += [.text(range.lower), .text(range.upper)]
            source = "SELECT state, stalled, count(*) FROM tasks"
        } else {
            source = "SELECT state, stalled, coalesce(sum(n), 0) FROM task_counts"
        }
        var summary = TaskSummary()
        let rows = try database.rows(source + whereText(conditions) + " GROUP BY state, stalled", arguments) {
            (state: TaskState(rawValue: $0.text(0)), stalled: $0.int(1) != 0, count: $0.int(2))
        }
        for row in rows {
            guard let state = row.state else { continue }
            summary.byState[state, default: 0] += row.count
            if row.stalled { summary.stalled += row.count }
        }
        return summary
    }

    private static func values(_ task: TaskRecord) -> [SQLValue] {
        [
            .text(task.id), .text(task.name), text(task.label), text(task.parentID), .real(task.weight),
            .text(task.state.rawValue), .integer(task.completed), integer(task.total), text(task.unit),
            .integer(task.stalled ? 1 : 0), text(task.stallReason?.rawValue), integer(task.stalledSince),
            .integer(task.stallTimeoutMilliseconds), integer(task.progressTimeoutMilliseconds),
            .integer(task.cancelRequested ? 1 : 0), integer(task.lastRunnerSeq), .integer(task.createdAt),
            .integer(task.updatedAt), .integer(task.lastSignalAt), integer(task.lastProgressAt),
            integer(task.finishedAt), text(task.message), text(task.metadata), .text(task.definition),
            .integer(task.changeNumber), .text(task.changeKind.rawValue), integer(task.startedAt), integer(task.stallDeadline),
            .real(task.rate.weightedUnits), .real(task.rate.weightedSeconds), integer(task.rate.sampleAt),
            .real(task.rate.sampleValue), .real(task.childrenWeight), .real(task.childrenDone),
            .integer(Int64(task.historyPoints)), integer(task.historyBucket), .integer(task.parentID == nil ? 1 : 0),
            .integer(Int64(task.depth)), .integer(Int64(task.childCount)),
            .integer(Int64(task.children.pending)), .integer(Int64(task.children.running)),
            .integer(Int64(task.children.stalled)), .integer(Int64(task.children.succeeded)),
            .integer(Int64(task.children.failed)), .integer(Int64(task.children.canceled)),
            .integer(Int64(task.failingChildren)), .integer(Int64(task.stallingChildren)), text(task.lastOutput),
            .integer(task.outputLines), .real(task.unfinishedChildrenDone),
            integer(task.expectedMilliseconds), integer(task.deadline), integer(task.minMilliseconds),
            .integer(task.overdue ? 1 : 0), integer(task.overdueSince), integer(task.overdueAt),
            .integer(task.tooQuick ? 1 : 0),
        ]
    }

    static func record(_ row: any ResultRow) -> TaskRecord {
        var task = TaskRecord(
            id: row.text(0), name: row.text(1), label: row.optionalText(2), parentID: row.optionalText(3),
            weight: row.double(4), state: TaskState(rawValue: row.text(5)) ?? .running, completed: row.int(6),
            total: row.optionalInt(7), unit: row.optionalText(8), stalled: row.int(9) != 0,
            stallReason: row.optionalText(10).flatMap(StallReason.init(rawValue:)), stalledSince: row.optionalInt(11),
            stallTimeoutMilliseconds: row.int(12), progressTimeoutMilliseconds: row.optionalInt(13),
            cancelRequested: row.int(14) != 0, lastRunnerSeq: row.optionalInt(15), createdAt: row.int(16),
            updatedAt: row.int(17), lastSignalAt: row.int(18), lastProgressAt: row.optionalInt(19),
            finishedAt: row.optionalInt(20), message: row.optionalText(21), metadata: row.optionalText(22),
            definition: row.text(23))
        task.changeNumber = row.int(24)
        task.changeKind = TaskEventKind(rawValue: row.text(25)) ?? .updated
        task.startedAt = row.optionalInt(26)
        task.stallDeadline = row.optionalInt(27)
        task.rate = RateEstimator(weightedUnits: row.double(28), weightedSeconds: row.double(29),
                                  sampleAt: row.optionalInt(30), sampleValue: row.double(31))
        task.childrenWeight = row.double(32)
        task.childrenDone = row.double(33)
        task.historyPoints = Int(row.int(34))
        task.historyBucket = row.optionalInt(35)
        task.depth = Int(row.int(37))
        task.childCount = Int(row.int(38))
        task.children = ChildrenCounts(pending: Int(row.int(39)), running: Int(row.int(40)), stalled: Int(row.int(41)),
                                       succeeded: Int(row.int(42)), failed: Int(row.int(43)), canceled: Int(row.int(44)))
        task.failingChildren = Int(row.int(45))
        task.stallingChildren = Int(row.int(46))
        task.lastOutput = row.optionalText(47)
        task.outputLines = row.int(48)
        task.unfinishedChildrenDone = row.double(49)
        task.expectedMilliseconds = row.optionalInt(50)
        task.deadline = row.optionalInt(51)
        task.minMilliseconds = row.optionalInt(52)
        task.overdue = row.int(53) != 0
        task.overdueSince = row.optionalInt(54)
        task.overdueAt = row.optionalInt(55)
        task.tooQuick = row.int(56) != 0
        return task
    }

    /// A task read with its listing key, selected as one more column after `columns`.
    static func keyedRecord(_ row: any ResultRow) -> (task: TaskRecord, key: Int64) {
        (record(row), row.int(Int32(columnNames.count)))
    }

    private static func text(_ value: String?) -> SQLValue { value.map { .text($0) } ?? .null }
    private static func integer(_ value: Int64?) -> SQLValue { value.map { .integer($0) } ?? .null }
}

/// How many tasks there are in each state (`running` counts the stalled too), and how
/// many are stalled: `GET /v1/tasks/summary`.
public struct TaskSummary: Equatable, Sendable {
    public var byState: [TaskState: Int64] = [:]
    public var stalled: Int64 = 0

    public init() {}

    /// `{"pending":…,"running":…,"stalled":…,"succeeded":…,"failed":…,"canceled":…}`.
    public var json: String {
        var object = JSONObjectWriter()
        object.integer("pending", byState[.pending] ?? 0)
        object.integer("running", byState[.running] ?? 0)
        object.integer("stalled", stalled)
        object.integer("succeeded", byState[.succeeded] ?? 0)
        object.integer("failed", byState[.failed] ?? 0)
        object.integer("canceled", byState[.canceled] ?? 0)
        return object.finish()
    }
}
