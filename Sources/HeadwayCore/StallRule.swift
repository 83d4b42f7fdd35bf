/// Whether a task is stalled, as a pure function of its stored times and `now`.
///
/// A running task is stalled `silent` when no signal arrived for its stall timeout, and
/// `no_progress` when signals arrive but `completed` has not grown for its progress
/// timeout (when it has one); `silent` wins when both hold. Pending and finished tasks
/// are never stalled. After the daemon starts, every deadline counts from no earlier than
/// the start (`graceStart`): the server's downtime is not the runner's stall.
public enum StallRule {
    /// The stall reason at `now`, or nil when the task is not stalled.
    public static func reason(_ task: TaskRecord, now: EpochMilliseconds, graceStart: EpochMilliseconds) -> StallReason? {
        guard task.state == .running else { return nil }
        if now >= silentDeadline(task, graceStart: graceStart) { return .silent }
        if let deadline = progressDeadline(task, graceStart: graceStart), now >= deadline { return .noProgress }
        return nil
    }

    /// The next moment the stored flag may have to change without any signal arriving:
    /// the earliest deadline not yet reflected in the flag. Nil when only a signal can
    /// change it (not running, or already stalled `silent`).
    public static func nextDeadline(_ task: TaskRecord, graceStart: EpochMilliseconds) -> EpochMilliseconds? {
        guard task.state == .running else { return nil }
        let silent = silentDeadline(task, graceStart: graceStart)
        switch (task.stalled, task.stallReason) {
        case (true, .silent?): return nil
        case (true, _): return silent
        default: return min(silent, progressDeadline(task, graceStart: graceStart) ?? silent)
        }
    }

    /// The deadline to store when `task`'s next deadline (`nextDeadline`) replaces the
    /// stored one: the stored one when it falls due no later and less than a slack earlier
    /// (a tenth of the task's shortest timeout, at most a second). A stored deadline may so
    /// be early, never late: the sweeper, reaching an early one, finds the task not stalled
    /// and stores its exact deadline. A task reporting many times a second thus moves its
    /// entry in the deadline index about once a second, not at every report.
    public static func deadlineToStore(_ task: TaskRecord, stored: EpochMilliseconds?) -> EpochMilliseconds? {
        guard let next = task.stallDeadline, let stored, stored <= next, next - stored < storageSlack(task) else {
            return task.stallDeadline
        }
        return stored
    }

    /// How much earlier than the exact deadline a stored one may stay.
    static func storageSlack(_ task: TaskRecord) -> EpochMilliseconds {
        min(1_000, min(task.stallTimeoutMilliseconds, task.progressTimeoutMilliseconds ?? .max) / 10)
    }

    /// When the task falls silent: its last signal plus the stall timeout.
    static func silentDeadline(_ task: TaskRecord, graceStart: EpochMilliseconds) -> EpochMilliseconds {
        max(task.lastSignalAt, graceStart) + task.stallTimeoutMilliseconds
    }

    /// When the task has made no progress for too long: its last growth (or its start)
    /// plus the progress timeout, if it has one.
    static func progressDeadline(_ task: TaskRecord, graceStart: EpochMilliseconds) -> EpochMilliseconds? {
        guard let timeout = task.progressTimeoutMilliseconds else { return nil }
        let since = task.lastProgressAt ?? task.startedAt ?? task.createdAt
        return max(since, graceStart) + timeout
    }

    /// Applies the rule at `now` to the stored flag; returns the kind of change it is, if
    /// any: `.stalled` (newly stalled), `.recovered`, or `.updated` (another reason).
    /// Pass `raising: false` to only clear or change a flag (signals never raise one;
    /// the sweeper does, at the deadline).
    public static func apply(to task: inout TaskRecord, now: EpochMilliseconds, graceStart: EpochMilliseconds,
                             raising: Bool) -> TaskEventKind? {
        let reason = reason(task, now: now, graceStart: graceStart)
        defer { task.stallDeadline = nextDeadline(task, graceStart: graceStart) }
        switch (task.stalled, reason) {
        case (false, let reason?) where raising:
            task.stalled = true
            task.stallReason = reason
            task.stalledSince = reason == .silent
                ? silentDeadline(task, graceStart: graceStart)
                : progressDeadline(task, graceStart: graceStart) ?? now
            return .stalled
        case (true, nil):
            task.stalled = false
            task.stallReason = nil
            task.stalledSince = nil
            return .recovered
        case (true, let reason?) where reason != task.stallReason:
            task.stallReason = reason
            return .updated
        default:
            return nil
        }
    }
}
