import HeadwayCore

/// Where a cancel or delete of a subtree stands between its steps: it walks the subtree
/// top-down (a task before its children), a bounded page of children at a time, and
/// between steps it holds nothing but the ids of the tasks whose children are still to be
/// read (only tasks that had children when read).
///
/// Top-down keeps a delete exact however the tree changes between steps: a task's children
/// are read only after the task itself is gone, so no child can be registered under it
/// later (`parent_not_found`), and a child registered under a task not reached yet is read
/// with its siblings and deleted too (as if registered before the delete). For a cancel, a
/// child registered under a task whose children were read already is left alone (as if
/// registered after the cancel); one under a task not reached yet is cancelled.
public struct SubtreeWalk: Sendable, Equatable {
    /// What the walk does to each task it reaches.
    public enum Operation: Sendable, Equatable {
        /// Requests cancellation of each unfinished task.
        case cancel
        /// Deletes each task, leaving a tombstone.
        case delete
    }

    /// What the walk does.
    public let operation: Operation
    /// When the operation was requested: the time of every change it makes.
    public let now: EpochMilliseconds
    /// Tasks whose children are still to be read, in order; those before `next` are done.
    private var parents: [String]
    private var next = 0
    /// The listing key of the last child read of `parents[next]`.
    private var afterKey: Int64 = 0

    /// A walk of the descendants of `rootID`.
    init(_ operation: Operation, below rootID: String, now: EpochMilliseconds) {
        self.operation = operation
        self.now = now
        parents = [rootID]
    }

    /// Whether every task of the subtree has been reached.
    public var isFinished: Bool { next == parents.count }

    /// The next at most `limit` tasks of the subtree, as stored; the caller changes them
    /// before asking for more. Tasks with children are remembered, to read theirs later.
    mutating func nextTasks(limit: Int, in database: Database) throws(SQLiteError) -> [TaskRecord] {
        var tasks: [TaskRecord] = []
        while tasks.count < limit, !isFinished {
            let wanted = limit - tasks.count
            let page = try TaskRepository.children(of: parents[next], afterKey: afterKey, limit: wanted, in: database)
            for (task, _) in page {
                tasks.append(task)
                if task.childCount > 0 { parents.append(task.id) }
            }
            if page.count < wanted {
                // This parent's children are all read.
                next += 1
                afterKey = 0
            } else if let last = page.last {
                afterKey = last.key
            }
        }
        // Forget the ids already walked once they are most of what is held.
        if next > 1024 && next * 2 > parents.count {
            parents.removeFirst(next)
            next = 0
        }
        return tasks
    }
}

/// One step of a cancel or delete of a subtree (`TaskStore.cancel`, `TaskStore.delete`,
/// then `TaskStore.continueWalk` while `remaining` is not nil): what it changed, the
/// events to publish once it has committed, and where the walk stands.
public struct SubtreeChange: Sendable, Equatable, BatchSized {
    /// The outcome of the cancel request of the subtree's own task (first step of a
    /// cancel only).
    public var outcome: TaskRules.Outcome?
    /// How many tasks this step changed (cancel) or deleted (delete).
    public var count: Int
    public var events: [TaskEvent]
    /// The rest of the walk, nil when this was its last step.
    public var remaining: SubtreeWalk?

    public var estimatedBytes: Int { events.estimatedBytes }
}

extension TaskStore {
    /// Runs a cancel or delete of a subtree on `writer` in steps (`first` is `cancel` or
    /// `delete`, then `continueWalk` until the walk is finished), each a job of its own:
    /// `afterEachCommit` gets each step once committed (to publish its events);
    /// `completion` gets the first step after the last one has committed.
    public func inSteps(on writer: GroupCommitWriter, _ first: @escaping @Sendable (Database) throws -> SubtreeChange,
                        afterEachCommit: @escaping @Sendable (SubtreeChange) -> Void,
                        completion: @escaping @Sendable (Result<SubtreeChange, any Error>) -> Void) {
        writer.submitSteps(first, nextStep: { [self] step -> (@Sendable (Database) throws -> SubtreeChange)? in
            guard let walk = step.remaining else { return nil }
            return { database in try continueWalk(walk, in: database) }
        }, afterEachCommit: afterEachCommit, completion: completion)
    }
}
