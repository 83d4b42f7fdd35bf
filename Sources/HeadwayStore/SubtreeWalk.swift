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
///
/// A walk within a task prefix (a cancel by a token that has one) reaches only the tasks
/// whose id starts with it: a task of another prefix is passed over with everything below
/// it, even tasks of the prefix (the walk goes through no task the token cannot see).
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
    /// When set, only tasks whose id starts with it are reached (and walked below).
    public let taskPrefix: String?
    /// When the operation was requested: the time of every change it makes.
    public let now: EpochMilliseconds
    /// Tasks whose children are still to be read, in order; those before `next` are done.
    private var parents: [String]
    private var next = 0
    /// The listing key of the last child read of `parents[next]`.
    private var afterKey: Int64 = 0

    /// A walk of the descendants of `rootID` (within `taskPrefix`, when given).
    init(_ operation: Operation, below rootID: String, now: EpochMilliseconds, taskPrefix: String? = nil) {
        self.operation = operation
        self.now = now
        self.taskPrefix = taskPrefix
        parents = [rootID]
    }

    /// Whether every task of the subtree has been reached.
    public var isFinished: Bool { next == parents.count }

    /// The tasks of the subtree among the next at most `limit` rows read, as stored, and
    /// how many rows were read (more than the tasks when some lie outside the walk's task
    /// prefix, so a step stays bounded however many of those there are); the caller
    /// changes the tasks before asking for more. Tasks with children are remembered, to
    /// read theirs later.
    mutating func nextTasks(limit: Int, in database: Database) throws(DatabaseError) -> (tasks: [TaskRecord], read: Int) {
        var tasks: [TaskRecord] = []
        var read = 0
        while read < limit, !isFinished {
            let wanted = limit - read
            let page = try TaskRepository.children(of: parents[next], afterKey: afterKey, limit: wanted, in: database)
            read += page.count
            for (task, _) in page {
                if let taskPrefix, !task.id.utf8.starts(with: taskPrefix.utf8) { continue }
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
        return (tasks, read)
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
    /// `delete`, then `continueWalk` until the walk is finished), each a job of its own
    /// whose events the writer publishes once it has committed: `afterEachCommit` gets
    /// each step then (to count them); `completion` gets the first step after the last one
    /// has committed.
    public func inSteps(on writer: GroupCommitWriter, _ first: @escaping @Sendable (Database) throws -> SubtreeChange,
                        afterEachCommit: @escaping @Sendable (SubtreeChange) -> Void = { _ in },
                        completion: @escaping @Sendable (Result<SubtreeChange, any Error>) -> Void) {
        writer.submitSteps(first, nextStep: { [self] step -> (@Sendable (Database) throws -> SubtreeChange)? in
            guard let walk = step.remaining else { return nil }
            return { database in try continueWalk(walk, in: database) }
        }, afterEachCommit: afterEachCommit, completion: completion)
    }
}
