import Foundation
import HeadwayCore

/// The task operations, each run by the writer inside one savepoint: read the task, apply
/// the pure rules of `TaskRules`, write the result. A rule violation throws a `Problem`
/// before anything is written.
public struct TaskStore: Sendable {
    /// The stall timeout given to tasks registered without one.
    public var defaultStallTimeoutSeconds: Double

    public init(defaultStallTimeoutSeconds: Double = 30) {
        self.defaultStallTimeoutSeconds = defaultStallTimeoutSeconds
    }

    /// What a registration did.
    public struct Registered: Sendable, Equatable {
        public var task: TaskRecord
        /// True when the task was created, false when the same registration was repeated.
        public var created: Bool
    }

    /// Registers a task, or answers a repeated identical registration with the task as it is.
    public func register(_ registration: Registration, now: EpochMilliseconds,
                         in database: Database) throws -> Registered {
        let id = registration.id ?? UUID().uuidString.lowercased()
        if let existing = try TaskRepository.find(id, in: database) {
            return Registered(task: try TaskRules.reregister(registration, existing: existing), created: false)
        }
        if let parentID = registration.parentID, parentID != id {
            guard let parent = try TaskRepository.find(parentID, in: database) else { throw Problem.parentNotFound(parentID) }
            if parent.state.isFinished { throw Problem.parentFinished(parentID) }
        }
        let task = try TaskRules.register(registration, id: id, now: now,
                                          defaultStallTimeoutSeconds: defaultStallTimeoutSeconds)
        try TaskRepository.insert(task, in: database)
        return Registered(task: task, created: true)
    }

    /// Applies a progress report.
    public func progress(_ id: String, _ update: ProgressUpdate, now: EpochMilliseconds,
                         in database: Database) throws -> TaskRules.Outcome {
        try modify(id, in: database) { task throws(Problem) in try TaskRules.progress(update, to: task, now: now) }
    }

    /// Applies a heartbeat.
    public func heartbeat(_ id: String, _ heartbeat: Heartbeat, now: EpochMilliseconds,
                          in database: Database) throws -> TaskRules.Outcome {
        try modify(id, in: database) { task throws(Problem) in try TaskRules.heartbeat(heartbeat, to: task, now: now) }
    }

    /// Finishes a task.
    public func finish(_ id: String, _ finish: Finish, now: EpochMilliseconds,
                       in database: Database) throws -> TaskRules.Outcome {
        try modify(id, in: database) { task throws(Problem) in try TaskRules.finish(finish, task: task, now: now) }
    }

    /// Requests cancellation of a task and of its unfinished descendants.
    public func cancel(_ id: String, now: EpochMilliseconds, in database: Database) throws -> TaskRules.Outcome {
        let outcome = try modify(id, in: database) { task throws(Problem) in try TaskRules.requestCancel(task, now: now) }
        for descendant in try TaskRepository.unfinishedDescendants(of: id, in: database) {
            _ = try modify(descendant, in: database) { task throws(Problem) in try TaskRules.requestCancel(task, now: now) }
        }
        return outcome
    }

    /// Deletes a task and its descendants; returns how many were deleted.
    public func delete(_ id: String, in database: Database) throws -> Int {
        guard try TaskRepository.find(id, in: database) != nil else { throw Problem.notFound(id) }
        return try TaskRepository.deleteTree(id, in: database)
    }

    private func modify(_ id: String, in database: Database,
                        _ rule: (TaskRecord) throws(Problem) -> TaskRules.Outcome) throws -> TaskRules.Outcome {
        guard let task = try TaskRepository.find(id, in: database) else { throw Problem.notFound(id) }
        let outcome = try rule(task)
        if case .applied(let next) = outcome { try TaskRepository.update(next, previous: task, in: database) }
        return outcome
    }
}

/// A connection for queries, shared under a lock. WAL lets it read while the writer commits.
public final class DatabaseReader: @unchecked Sendable {
    private let database: Database
    private let lock = NSLock()

    /// Opens a read-only connection to an existing database.
    public init(path: String) throws(SQLiteError) {
        database = try Database(path: path, readOnly: true)
    }

    /// Closes the connection; later reads throw.
    public func close() { lock.withLock { database.close() } }

    /// Runs `body` with the connection, one caller at a time.
    public func read<Value>(_ body: (Database) throws -> Value) rethrows -> Value {
        try lock.withLock { try body(database) }
    }
}
