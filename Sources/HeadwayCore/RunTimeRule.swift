/// The run-time rules of a task, as pure functions of its stored times and `now`: a task is
/// *overdue* once it is still unfinished at its due moment (its start plus
/// `expected_seconds`, or its `deadline`, whichever comes first), and *too quick* when it
/// succeeds sooner than `min_seconds` after its start.
///
/// `expected_seconds` counts from the task's first start (`started_at`), not from its
/// registration: a task registered `pending` waits in a queue, and the queue's time is not
/// its run's (a job that waited an hour for a worker and then ran its usual ten minutes did
/// nothing late). "Done by then, whatever the queue" is what `deadline` says; a pending
/// task can be overdue only by its deadline.
///
/// Unlike a stall, the due moment gets no grace after the daemon restarts: both rules are
/// facts of the wall clock, not of the runner's signals. The moment is computed from the
/// stored times (never an in-memory timer) and stored in the sweeper's index
/// (`overdueAt`), so a task whose due moment passed while the daemon was down is flagged at
/// the first sweep after the start, and none is flagged before its moment; its
/// `overdue_since` is the due moment itself either way.
///
/// The flag stays once the task finishes: a task that ran late and then succeeded still
/// says it was late (its row, its detail, `overdue=true` listings).
public enum RunTimeRule {
    /// When the task falls due: the earlier of its deadline and its start plus its expected
    /// run time; nil when neither applies (no rule, or only `expected_seconds` and the task
    /// has not started).
    public static func dueAt(_ task: TaskRecord) -> EpochMilliseconds? {
        let byExpected = task.expectedMilliseconds.flatMap { expected in task.startedAt.map { $0 + expected } }
        switch (task.deadline, byExpected) {
        case (let deadline?, let byExpected?): return min(deadline, byExpected)
        case (let only?, nil), (nil, let only?): return only
        case (nil, nil): return nil
        }
    }

    /// What the sweeper's index stores for the task: its due moment while it is unfinished
    /// and not flagged yet; nil when only a change of the task could make it due.
    public static func sweepAt(_ task: TaskRecord) -> EpochMilliseconds? {
        guard !task.state.isFinished, !task.overdue else { return nil }
        return dueAt(task)
    }

    /// Raises the overdue flag at `now` when the task is unfinished and due, with
    /// `overdueSince` its due moment; returns `.overdue` when it did. Keeps `overdueAt`
    /// current either way.
    public static func apply(to task: inout TaskRecord, now: EpochMilliseconds) -> TaskEventKind? {
        defer { task.overdueAt = sweepAt(task) }
        guard let due = sweepAt(task), now >= due else { return nil }
        task.overdue = true
        task.overdueSince = due
        return .overdue
    }

    /// Whether `task`, as its finish leaves it, succeeded too soon: `finishedAt` less than
    /// `min_seconds` after its start. A task that finished without ever reporting a start
    /// (registered pending, finished at once) is measured from its registration, the
    /// longest it can have run: the flag is then raised only when even that was too short.
    public static func isTooQuick(_ task: TaskRecord) -> Bool {
        guard task.state == .succeeded, let minimum = task.minMilliseconds, let finishedAt = task.finishedAt else {
            return false
        }
        return finishedAt - (task.startedAt ?? task.createdAt) < minimum
    }

    /// Refuses a deadline that a new task could not meet or that lies absurdly far ahead:
    /// at or before `now`, or more than `Limits.deadlineHorizonMilliseconds` after it.
    public static func checkDeadline(_ deadline: EpochMilliseconds?, now: EpochMilliseconds) throws(TaskError) {
        guard let deadline else { return }
        if deadline <= now || deadline - now > Limits.deadlineHorizonMilliseconds {
            throw .deadlineOutOfRange(deadline: deadline, now: now)
        }
    }
}
