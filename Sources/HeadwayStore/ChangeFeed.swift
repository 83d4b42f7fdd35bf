import HeadwayCore

/// The stored side of the event stream: the change sequence, tombstones, and the queries
/// that let a subscriber start (snapshot) or resume (changes after an id).
public enum ChangeFeed {
    /// Where the sequence stands.
    public struct Position: Equatable, Sendable {
        /// The number this database's sequence started from.
        public var first: Int64
        /// The latest committed change (`first` while nothing has changed).
        public var last: Int64
        /// The highest change that may have been forgotten (a task or tombstone pruned): ids
        /// below it can no longer be resumed; a client at it has seen every forgotten change.
        public var prunedThrough: Int64

        /// Whether a subscriber that saw everything up to `id` can resume from here.
        public func canResume(from id: Int64) -> Bool { id >= prunedThrough && id <= last }
    }

    /// The current position (read it in the same transaction as the data it describes).
    public static func position(in database: Database) throws(DatabaseError) -> Position {
        try database.dialect.changeFeedPosition(in: database)
    }

    /// Records that `task` was deleted, as change `changeNumber`.
    public static func recordDeletion(_ task: TaskRecord, changeNumber: Int64, at now: EpochMilliseconds,
                                      in database: Database) throws(DatabaseError) {
        try database.run("INSERT INTO tombstones (change_seq, id, parent_id, created_at, deleted_at) VALUES (?, ?, ?, ?, ?)",
                         [.integer(changeNumber), .text(task.id), task.parentID.map { .text($0) } ?? .null,
                          .integer(task.createdAt), .integer(now)])
    }

    /// Deletes at most `limit` tombstones older than `cutoff`; returns how many and the
    /// highest change number among them.
    public static func pruneTombstones(deletedBefore cutoff: EpochMilliseconds, limit: Int,
                                       in database: Database) throws(DatabaseError) -> (count: Int, through: Int64) {
        let numbers = try database.rows(
            "SELECT change_seq FROM tombstones WHERE deleted_at < ? ORDER BY change_seq LIMIT ?",
            [.integer(cutoff), .integer(Int64(limit))]) { $0.int(0) }
        guard let through = numbers.last else { return (0, 0) }
        try database.run("DELETE FROM tombstones WHERE change_seq <= ? AND deleted_at < ?", [.integer(through), .integer(cutoff)])
        return (numbers.count, through)
    }

    /// Records that changes up to `changeNumber` may have been forgotten: resuming from an
    /// id below it gets a snapshot.
    public static func forget(through changeNumber: Int64, in database: Database) throws(DatabaseError) {
        try database.run("UPDATE stream_state SET pruned_through = ?1 WHERE pruned_through < ?1", [.integer(changeNumber)])
    }

    /// Which tasks a reader of the feed follows: every task, or the named tasks and the
    /// children of the named parents (the stream's `task=` and `parent_id=`). The queries
    /// select only those rows, through the primary key and the parent index, so a
    /// filtered catch-up costs what it shows, not what the database holds.
    public struct Selection: Equatable, Sendable {
        /// These tasks.
        public var taskIDs: [String]
        /// And the children of these tasks.
        public var parentIDs: [String]
        /// And the top-level tasks whose latest change is their creation (the stream's
        /// `new_roots`).
        public var newRoots: Bool
        /// Only tasks whose id starts with this (a token's task prefix), whatever else
        /// is named: a range of the primary key.
        public var taskPrefix: String?

        /// Every task.
        public static let all = Selection(taskIDs: [], parentIDs: [])

        public init(taskIDs: [String], parentIDs: [String], newRoots: Bool = false, taskPrefix: String? = nil) {
            self.taskIDs = taskIDs
            self.parentIDs = parentIDs
            self.newRoots = newRoots
            self.taskPrefix = taskPrefix
        }

        /// `sql` followed by this selection as one more condition of its `WHERE` (none for
        /// every task), with `arguments` followed by the selection's own, all bound.
        /// `creations`: whether `sql` reads changes, where the creations of new roots belong
        /// (not deletions, nor a snapshot, which is the named tasks' state, not events).
        func query(_ sql: String, _ arguments: [SQLValue], creations: Bool) -> (sql: String, arguments: [SQLValue]) {
            var conditions: [String] = []
            var selectionArguments: [SQLValue] = []
            var prefixCondition = ""
            if let taskPrefix {
                let range = TaskIDPrefix.range(taskPrefix)
                prefixCondition = " AND id >= ? AND id < ?"
                selectionArguments += [.text(range.lower), .text(range.upper)]
            }
            if !taskIDs.isEmpty {
                conditions.append("id IN (" + Self.placeholders(taskIDs.count) + ")")
                selectionArguments += taskIDs.map { .text($0) }
            }
            if !parentIDs.isEmpty {
                conditions.append("parent_id IN (" + Self.placeholders(parentIDs.count) + ")")
                selectionArguments += parentIDs.map { .text($0) }
            }
            if newRoots && creations {
                conditions.append("(parent_id IS NULL AND change_kind = ?)")
                selectionArguments.append(.text(TaskEventKind.created.rawValue))
            }
            // Nothing named is every task; new roots alone, where they do not belong, none.
            if conditions.isEmpty && newRoots { conditions.append("1 = 0") }
            guard !conditions.isEmpty else { return (sql + prefixCondition, arguments + selectionArguments) }
            return (sql + prefixCondition + " AND (" + conditions.joined(separator: " OR ") + ")", arguments + selectionArguments)
        }

        /// `count` placeholders for a list of values: `?, ?, ?`.
        private static func placeholders(_ count: Int) -> String {
            Array(repeating: "?", count: count).joined(separator: ", ")
        }
    }

    /// Every selected task whose latest change is after `id`, once, in its latest state,
    /// and every deletion of a selected task after `id`, in sequence order.
    public static func changes(after id: Int64, of selection: Selection = .all,
                               in database: Database) throws(DatabaseError) -> [TaskEvent] {
        // Named tasks and the children of named parents are found through `tasks`' id and
        // parent indexes, however many tasks changed since `id`; other selections read the
        // range of changes after it.
        let namesTasks = !selection.newRoots && !(selection.taskIDs.isEmpty && selection.parentIDs.isEmpty)
        let numbers = namesTasks ? TasksByColumn(source: "tasks", column: "change_seq") : database.dialect.changeNumbers
        let tasks = selection.query("SELECT \(TaskRepository.columns) FROM \(numbers.source) WHERE \(numbers.column) > ?",
                                    [.integer(id)], creations: true)
        let changed = try database.rows(tasks.sql + " ORDER BY \(numbers.column)", tasks.arguments, map: TaskRepository.record)
        let tombstones = selection.query(
            "SELECT change_seq, id, parent_id, created_at FROM tombstones WHERE change_seq > ?", [.integer(id)], creations: false)
        let deletions = try database.rows(tombstones.sql + " ORDER BY change_seq", tombstones.arguments) { row in
            TaskEvent.deleted(changeNumber: row.int(0), taskID: row.text(1), parentID: row.optionalText(2), createdAt: row.int(3))
        }
        return (changed.map { TaskEvent($0.changeKind, $0) } + deletions).sorted { $0.changeNumber < $1.changeNumber }
    }

    /// The changes numbered above `id` and at most `through` (every task, its latest state;
    /// every deletion), reading at most `limit` rows of each table, in sequence order;
    /// `tasks` are the rows the task events were made of, as committed; `complete` is the
    /// number up to which they are all there (`through` unless a table had more rows): the
    /// next page starts after it. What another daemon wrote, read by `SharedWriting` a
    /// bounded page at a time.
    public static func changes(after id: Int64, through: Int64, limit: Int, in database: Database) throws(DatabaseError)
        -> (events: [TaskEvent], tasks: [TaskRecord], complete: Int64) {
        let arguments: [SQLValue] = [.integer(id), .integer(through), .integer(Int64(limit))]
        let numbers = database.dialect.changeNumbers
        let changed = try database.rows(
            "SELECT \(TaskRepository.columns) FROM \(numbers.source) WHERE \(numbers.column) > ? AND \(numbers.column) <= ? "
                + "ORDER BY \(numbers.column) LIMIT ?",
            arguments, map: TaskRepository.record)
        let deletions = try database.rows(
            "SELECT change_seq, id, parent_id, created_at FROM tombstones WHERE change_seq > ? AND change_seq <= ? "
                + "ORDER BY change_seq LIMIT ?", arguments) { row in
            TaskEvent.deleted(changeNumber: row.int(0), taskID: row.text(1), parentID: row.optionalText(2), createdAt: row.int(3))
        }
        var complete = through
        if changed.count == limit, let last = changed.last { complete = min(complete, last.changeNumber) }
        if deletions.count == limit, let last = deletions.last { complete = min(complete, last.changeNumber) }
        let tasks = changed.filter { $0.changeNumber <= complete }
        let events = (tasks.map { TaskEvent($0.changeKind, $0) } + deletions.filter { $0.changeNumber <= complete })
            .sorted { $0.changeNumber < $1.changeNumber }
        return (events, tasks, complete)
    }

    /// What a fresh subscriber sees first: the selected tasks that are unfinished or
    /// finished since `finishedSince`, newest first.
    public static func snapshot(finishedSince: EpochMilliseconds, of selection: Selection = .all,
                                in database: Database) throws(DatabaseError) -> [TaskRecord] {
        let unfinished = selection.query("SELECT \(TaskRepository.columns), seq FROM tasks WHERE state IN ('pending', 'running')", [],
                                         creations: false)
        let recent = selection.query("SELECT \(TaskRepository.columns), seq FROM tasks WHERE finished_at >= ?",
                                     [.integer(finishedSince)], creations: false)
        let tasks = try database.rows(unfinished.sql, unfinished.arguments, map: TaskRepository.keyedRecord)
            + database.rows(recent.sql, recent.arguments, map: TaskRepository.keyedRecord)
        return tasks.sorted { $0.key > $1.key }.map(\.task)
    }

    /// A time no later than when change `id` was committed (for resuming with
    /// `min_duration`: tasks still held back then were created after this minus the minimum).
    public static func timeNoLaterThan(change id: Int64, in database: Database) throws(DatabaseError) -> EpochMilliseconds {
        let numbers = database.dialect.changeNumbers
        let task = try database.scalar(
            "SELECT updated_at FROM \(numbers.source) WHERE \(numbers.column) <= ? ORDER BY \(numbers.column) DESC LIMIT 1", [.integer(id)])
        let tombstone = try database.scalar(
            "SELECT deleted_at FROM tombstones WHERE change_seq <= ? ORDER BY change_seq DESC LIMIT 1", [.integer(id)])
        return max(task ?? 0, tombstone ?? 0)
    }

    /// The selected unfinished tasks created at or after `time`.
    public static func unfinished(createdSince time: EpochMilliseconds, of selection: Selection = .all,
                                  in database: Database) throws(DatabaseError) -> [TaskRecord] {
        let query = selection.query(
            "SELECT \(TaskRepository.columns) FROM tasks WHERE state IN ('pending', 'running') AND created_at >= ?",
            [.integer(time)], creations: true)
        return try database.rows(query.sql, query.arguments, map: TaskRepository.record)
    }
}
