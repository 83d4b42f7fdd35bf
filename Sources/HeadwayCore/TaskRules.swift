/// The rules that keep progress accurate, as pure functions of a task, a request and the
/// time. Each either returns the task as it becomes or throws the `TaskError` to answer;
/// a refused request leaves the task as it was.
public enum TaskRules {
    /// What an update did.
    public enum Outcome: Equatable, Sendable {
        /// The change was applied; here is the new task.
        case applied(TaskRecord)
        /// Nothing needed to change (a repeated `seq`, finish or cancel); here is the task as it is.
        case unchanged(TaskRecord)

        /// The task after the update.
        public var task: TaskRecord {
            switch self {
            case .applied(let task), .unchanged(let task): task
            }
        }
    }

    /// The new task a registration creates. The caller has checked the parent.
    public static func register(_ registration: Registration, id: String, now: EpochMilliseconds,
                                defaultStallTimeoutSeconds: Double) throws(TaskError) -> TaskRecord {
        if let total = registration.total, registration.completed > total {
            throw .completedExceedsTotal(completed: registration.completed, total: total)
        }
        if registration.parentID == id {
            throw .ownParent(id)
        }
        try RunTimeRule.checkDeadline(registration.deadline, now: now)
        var task = TaskRecord(
            id: id, name: registration.name, label: registration.label, parentID: registration.parentID,
            weight: registration.weight, state: registration.state, completed: registration.completed,
            total: registration.total, unit: registration.unit,
            stallTimeoutMilliseconds: milliseconds(registration.stallTimeoutSeconds ?? defaultStallTimeoutSeconds),
            progressTimeoutMilliseconds: registration.progressTimeoutSeconds.map(milliseconds),
            createdAt: now, updatedAt: now, lastSignalAt: now,
            lastProgressAt: registration.completed > 0 ? now : nil,
            metadata: registration.metadata, definition: registration.definition)
        if task.state == .running {
            task.startedAt = now
            task.rate.observe(task.progressValue, at: now)
        }
        task.expectedMilliseconds = registration.expectedSeconds.map(milliseconds)
        task.deadline = registration.deadline
        task.minMilliseconds = registration.minSeconds.map(milliseconds)
        task.overdueAt = RunTimeRule.sweepAt(task)
        return task
    }

    /// Refuses a new child of `parent` that would break the tree's limits: a finished parent
    /// takes no children, and the child may be neither too deep nor one unfinished child
    /// too many (finished children do not count).
    public static func checkNewChild(of parent: TaskRecord, limits: TreeLimits) throws(TaskError) {
        if parent.state.isFinished { throw .parentFinished(parent.id) }
        if parent.depth >= limits.maximumDepth {
            throw .treeTooDeep(parentID: parent.id, maximumDepth: limits.maximumDepth)
        }
        if parent.children.unfinished >= limits.maximumChildren {
            throw .tooManyChildren(parentID: parent.id, maximumChildren: limits.maximumChildren)
        }
    }

    /// A registration with an id that exists: the same definition is answered with the task
    /// as it is now; another definition is a conflict.
    public static func reregister(_ registration: Registration, existing: TaskRecord) throws(TaskError) -> TaskRecord {
        guard registration.definition == existing.definition else { throw .registrationConflict(existing.id) }
        return existing
    }

    /// Applies a progress report.
    public static func progress(_ update: ProgressUpdate, to task: TaskRecord,
                                now: EpochMilliseconds) throws(TaskError) -> Outcome {
        if update.completed != nil, update.increment != nil { throw .completedAndIncrement }
        if isDuplicate(update.runnerSeq, task) { return .unchanged(task) }
        if task.state.isFinished { throw .taskFinished(id: task.id, state: task.state) }

        let completed: Int64
        if let absolute = update.completed {
            completed = absolute
        } else {
            completed = task.completed + (update.increment ?? 0)
            if completed > Limits.maxCount { throw .countOutOfRange(completed) }
        }
        if completed < task.completed { throw .progressRegression(id: task.id, completed: task.completed, requested: completed) }
        let total = update.total ?? task.total
        if let total, completed > total {
            if let newTotal = update.total, newTotal < task.completed {
                throw .totalBelowCompleted(total: newTotal, completed: task.completed)
            }
            throw .completedExceedsTotal(completed: completed, total: total)
        }

        var next = signal(task, now: now, runnerSeq: update.runnerSeq, label: update.label, output: update.output)
        if completed > task.completed { next.lastProgressAt = now }
        next.completed = completed
        next.total = total
        if let unit = update.unit { next.unit = unit }
        next.rate.observe(next.progressValue, at: now)
        return .applied(next)
    }

    /// Applies a heartbeat.
    public static func heartbeat(_ heartbeat: Heartbeat, to task: TaskRecord,
                                 now: EpochMilliseconds) throws(TaskError) -> Outcome {
        if isDuplicate(heartbeat.runnerSeq, task) { return .unchanged(task) }
        if task.state.isFinished { throw .taskFinished(id: task.id, state: task.state) }
        var next = signal(task, now: now, runnerSeq: heartbeat.runnerSeq, label: heartbeat.label, output: heartbeat.output)
        next.rate.observe(next.progressValue, at: now)
        return .applied(next)
    }

    /// Finishes a task. Finishing again with the same outcome changes nothing; with
    /// another outcome it is a conflict.
    public static func finish(_ finish: Finish, task: TaskRecord, now: EpochMilliseconds) throws(TaskError) -> Outcome {
        if task.state.isFinished {
            guard task.state == finish.outcome else { throw .outcomeConflict(id: task.id, state: task.state, requested: finish.outcome) }
            return .unchanged(task)
        }
        var next = task
        next.state = finish.outcome
        next.message = finish.message
        if let last = finish.output.last { next.lastOutput = last }
        next.finishedAt = now
        next.updatedAt = now
        next.stalled = false
        next.stallReason = nil
        next.stalledSince = nil
        if finish.outcome == .succeeded, let total = task.total, task.completed < total {
            next.completed = total
            next.lastProgressAt = now
        }
        next.tooQuick = RunTimeRule.isTooQuick(next)
        next.overdueAt = RunTimeRule.sweepAt(next)
        return .applied(next)
    }

    /// Records a request to cancel; the runner sees it in every later reply.
    public static func requestCancel(_ task: TaskRecord, now: EpochMilliseconds) throws(TaskError) -> Outcome {
        if task.state.isFinished { throw .taskFinished(id: task.id, state: task.state) }
        if task.cancelRequested { return .unchanged(task) }
        var next = task
        next.cancelRequested = true
        next.updatedAt = now
        return .applied(next)
    }

    /// A parent's signal that changes nothing else it shows is published (a change number,
    /// an event) when the `last_signal_at` its last event carried is this old, so that a
    /// subscriber's "no signal for" is never more than about two of these behind.
    public static let signalPublishInterval: EpochMilliseconds = 1_000

    /// A parent as a change of one of its children leaves it: the children's weights,
    /// shares, counts by state and failures or stalls below move by `change`. When the
    /// change is the child's activity (`isSignal`), it counts as the parent's own signal
    /// (a pending parent starts). Nil for a finished parent, whose progress no longer moves.
    public static func rollUp(_ parent: TaskRecord, _ change: ChildrenChange, isSignal: Bool = true,
                              now: EpochMilliseconds) -> TaskRecord? {
        guard !parent.state.isFinished else { return nil }
        var next = isSignal ? signal(parent, now: now, runnerSeq: nil, label: nil) : parent
        next.updatedAt = now
        applyCounts(change, to: &next)
        next.childrenWeight += change.weight
        next.childrenDone += change.done
        next.unfinishedChildrenDone += change.unfinishedDone
        if next.childrenWeight < 1e-9 {
            next.childrenWeight = 0
            next.childrenDone = 0
        }
        // Sums of floating-point shares: what is left once every unfinished child has
        // gone is rounding, not work.
        if next.children.unfinished == 0 || next.unfinishedChildrenDone < 1e-12 { next.unfinishedChildrenDone = 0 }
        if (next.fraction ?? 0) > (parent.fraction ?? 0) { next.lastProgressAt = now }
        next.rate.observe(next.progressValue, at: now)
        return next
    }

    /// What a change of one of its descendants does to an ancestor (see `rollUpStep`).
    public enum RollUpStep: Equatable, Sendable {
        /// The ancestor changes as clients see it (its roll-up, its counts of children or
        /// its `attention`, or it starts, or a signal due to be published): a new change,
        /// an event.
        case changed(TaskRecord)
        /// Only what clients do not see at once moves: its signal time (and with it its
        /// stall deadline) within `signalPublishInterval` of the last one published, or
        /// its counts of failing or stalling children without a change of `attention`.
        /// Written, without a change number or an event (unless the signal clears its
        /// stall flag, which shows).
        case quiet(TaskRecord)
        /// Nothing changes here; further up, only what `change` of this ancestor says.
        case unchanged
    }

    /// One step of a roll-up: the ancestor `parent` as `change` of one of its children
    /// leaves it (`isSignal`: the change is the child's activity). While the children's
    /// shares and weights move, the ancestor's roll-up changes (`rollUp`). Otherwise the
    /// change counts as the ancestor's signal, its `updatedAt` and rate estimate kept (the
    /// estimator folds the quiet spell into its next sample), and shows only when the
    /// counts of children or `attention` move, or the signal is due to be published
    /// (`signalPublishInterval`). A finished ancestor takes no signal and keeps its
    /// fraction, but its counts of children and `attention` stay true.
    public static func rollUpStep(_ parent: TaskRecord, _ change: ChildrenChange, isSignal: Bool,
                                  now: EpochMilliseconds) -> RollUpStep {
        if !parent.state.isFinished, change.movesProgress || (isSignal && parent.state == .pending) {
            return rollUp(parent, change, isSignal: isSignal, now: now).map { .changed($0) } ?? .unchanged
        }
        var next = parent
        applyCounts(change, to: &next)
        var isVisible = next.children != parent.children || next.attention != parent.attention
        if isSignal, !parent.state.isFinished, now > parent.lastSignalAt {
            next.lastSignalAt = now
            // The `last_signal_at` last published is the stored one unless a signal came
            // quietly since the last published change (it is then later than `updatedAt`).
            if now - min(parent.lastSignalAt, parent.updatedAt) >= signalPublishInterval { isVisible = true }
        }
        if isVisible {
            next.updatedAt = now
            return .changed(next)
        }
        return next == parent ? .unchanged : .quiet(next)
    }

    /// Applies a change's counts of children (not their weights and shares) to `parent`.
    private static func applyCounts(_ change: ChildrenChange, to parent: inout TaskRecord) {
        if !change.counts.isZero { parent.children += change.counts }
        if change.failing != 0 { parent.failingChildren += change.failing }
        if change.stalling != 0 { parent.stallingChildren += change.stalling }
    }

    /// Whether the runner's `runnerSeq` was already applied (it is not above the last one).
    private static func isDuplicate(_ runnerSeq: Int64?, _ task: TaskRecord) -> Bool {
        guard let runnerSeq, let last = task.lastRunnerSeq else { return false }
        return runnerSeq <= last
    }

    /// The common effect of any signal from the runner (`output`: lines it sent, the last
    /// of which becomes the task's `lastOutput`).
    private static func signal(_ task: TaskRecord, now: EpochMilliseconds, runnerSeq: Int64?, label: String?,
                               output: [String] = []) -> TaskRecord {
        var next = task
        if let last = output.last { next.lastOutput = last }
        if next.state == .pending {
            next.state = .running
            next.startedAt = now
            // `expected_seconds` counts from here (`RunTimeRule`).
            next.overdueAt = RunTimeRule.sweepAt(next)
        }
        if let runnerSeq { next.lastRunnerSeq = runnerSeq }
        if let label { next.label = label }
        next.updatedAt = now
        next.lastSignalAt = now
        return next
    }

    private static func milliseconds(_ seconds: Double) -> Int64 { Int64((seconds * 1000).rounded()) }
}
