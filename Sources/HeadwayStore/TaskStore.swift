import Foundation
import HeadwayCore

/// The number of the latest change, owned by the writer thread: each change takes the
/// next number. Loaded from the database at start, so the sequence survives restarts.
public final class ChangeSequence: @unchecked Sendable {
    /// The latest number handed out.
    public fileprivate(set) var last: Int64

    public init(last: Int64) { self.last = last }

    /// Loads the position of `database`.
    public convenience init(database: Database) throws(SQLiteError) {
        self.init(last: try ChangeFeed.position(in: database).last)
    }

    fileprivate func next() -> Int64 {
        last += 1
        return last
    }
}

/// The task operations, each run by the writer inside one savepoint: read the task, apply
/// the pure rules of `TaskRules`, write the result with its change number, and return the
/// events to publish once committed. A rule violation throws a `Problem` before anything
/// is written, and the numbers it took are given back.
public struct TaskStore: Sendable {
    /// The stall timeout given to tasks registered without one.
    public var defaultStallTimeoutSeconds: Double
    /// The change sequence (used on the writer thread only).
    public let sequence: ChangeSequence

    public init(sequence: ChangeSequence, defaultStallTimeoutSeconds: Double = 30) {
        self.sequence = sequence
        self.defaultStallTimeoutSeconds = defaultStallTimeoutSeconds
    }

    /// What a registration did.
    public struct Registered: Sendable, Equatable {
        public var task: TaskRecord
        /// True when the task was created, false when the same registration was repeated.
        public var created: Bool
        public var events: [TaskEvent]
    }

    /// What an update did, and the events to publish.
    public struct Changed: Sendable, Equatable {
        public var outcome: TaskRules.Outcome
        public var events: [TaskEvent]
    }

    /// What a deletion did.
    public struct Deleted: Sendable, Equatable {
        public var count: Int
        public var events: [TaskEvent]
    }

    /// Registers a task, or answers a repeated identical registration with the task as it is.
    public func register(_ registration: Registration, now: EpochMilliseconds,
                         in database: Database) throws -> Registered {
        try numbered {
            let id = registration.id ?? UUID().uuidString.lowercased()
            if let existing = try TaskRepository.find(id, in: database) {
                return Registered(task: try TaskRules.reregister(registration, existing: existing), created: false, events: [])
            }
            if let parentID = registration.parentID, parentID != id {
                guard let parent = try TaskRepository.find(parentID, in: database) else { throw Problem.parentNotFound(parentID) }
                if parent.state.isFinished { throw Problem.parentFinished(parentID) }
            }
            var task = try TaskRules.register(registration, id: id, now: now,
                                              defaultStallTimeoutSeconds: defaultStallTimeoutSeconds)
            task.changeSeq = sequence.next()
            task.changeKind = .created
            try TaskRepository.insert(task, in: database)
            return Registered(task: task, created: true, events: [TaskEvent(.created, task)])
        }
    }

    /// Applies a progress report.
    public func progress(_ id: String, _ update: ProgressUpdate, now: EpochMilliseconds,
                         in database: Database) throws -> Changed {
        try numbered {
            let outcome = try modify(id, .updated, in: database) { task throws(Problem) in
                try TaskRules.progress(update, to: task, now: now)
            }
            return Changed(outcome: outcome, events: events(outcome, .updated))
        }
    }

    /// Applies a heartbeat.
    public func heartbeat(_ id: String, _ heartbeat: Heartbeat, now: EpochMilliseconds,
                          in database: Database) throws -> Changed {
        try numbered {
            let outcome = try modify(id, .updated, in: database) { task throws(Problem) in
                try TaskRules.heartbeat(heartbeat, to: task, now: now)
            }
            return Changed(outcome: outcome, events: events(outcome, .updated))
        }
    }

    /// Finishes a task.
    public func finish(_ id: String, _ finish: Finish, now: EpochMilliseconds,
                       in database: Database) throws -> Changed {
        try numbered {
            let outcome = try modify(id, .finished, in: database) { task throws(Problem) in
                try TaskRules.finish(finish, task: task, now: now)
            }
            return Changed(outcome: outcome, events: events(outcome, .finished))
        }
    }

    /// Requests cancellation of a task and of its unfinished descendants.
    public func cancel(_ id: String, now: EpochMilliseconds, in database: Database) throws -> Changed {
        try numbered {
            let outcome = try modify(id, .cancelRequested, in: database) { task throws(Problem) in
                try TaskRules.requestCancel(task, now: now)
            }
            var all = events(outcome, .cancelRequested)
            for descendant in try TaskRepository.unfinishedDescendants(of: id, in: database) {
                let cascaded = try modify(descendant, .cancelRequested, in: database) { task throws(Problem) in
                    try TaskRules.requestCancel(task, now: now)
                }
                all += events(cascaded, .cancelRequested)
            }
            return Changed(outcome: outcome, events: all)
        }
    }

    /// Deletes a task and its descendants, leaving a tombstone for each.
    public func delete(_ id: String, now: EpochMilliseconds, in database: Database) throws -> Deleted {
        try numbered {
            let tree = try TaskRepository.tree(id, in: database)
            guard !tree.isEmpty else { throw Problem.notFound(id) }
            var events: [TaskEvent] = []
            for task in tree.reversed() {
                let seq = sequence.next()
                try TaskRepository.delete(task.id, in: database)
                try ChangeFeed.recordDeletion(task, seq: seq, at: now, in: database)
                events.append(.deleted(seq: seq, taskID: task.id, parentID: task.parentID, createdAt: task.createdAt))
            }
            return Deleted(count: tree.count, events: events)
        }
    }

    /// Runs one operation; if it throws, the numbers it took are given back (its savepoint
    /// is rolled back by the writer, so they were never stored).
    private func numbered<Value>(_ operation: () throws -> Value) throws -> Value {
        let mark = sequence.last
        do {
            return try operation()
        } catch {
            sequence.last = mark
            throw error
        }
    }

    private func events(_ outcome: TaskRules.Outcome, _ kind: TaskEventKind) -> [TaskEvent] {
        guard case .applied(let task) = outcome else { return [] }
        return [TaskEvent(kind, task)]
    }

    private func modify(_ id: String, _ kind: TaskEventKind, in database: Database,
                        _ rule: (TaskRecord) throws(Problem) -> TaskRules.Outcome) throws -> TaskRules.Outcome {
        guard let task = try TaskRepository.find(id, in: database) else { throw Problem.notFound(id) }
        guard case .applied(var next) = try rule(task) else { return .unchanged(task) }
        next.changeSeq = sequence.next()
        next.changeKind = kind
        try TaskRepository.update(next, previous: task, in: database)
        return .applied(next)
    }
}

/// A connection for queries, shared under a lock. WAL lets it read while the writer commits.
public final class DatabaseReader: @unchecked Sendable {
    private let database: Database
    private let lock = NSLock()

    /// Opens a connection to an existing database, for reading only.
    public init(path: String) throws(SQLiteError) {
        database = try Database(path: path)
        try database.execute("PRAGMA query_only = 1")
    }

    /// Closes the connection; later reads throw.
    public func close() { lock.withLock { database.close() } }

    /// Runs `body` with the connection, one caller at a time.
    public func read<Value>(_ body: (Database) throws -> Value) rethrows -> Value {
        try lock.withLock { try body(database) }
    }

    /// Runs `body` in one read transaction, so everything it reads is one snapshot.
    public func snapshot<Value>(_ body: (Database) throws -> Value) throws -> Value {
        try read { database in
            try database.execute("BEGIN")
            defer { try? database.execute("COMMIT") }
            return try body(database)
        }
    }
}
