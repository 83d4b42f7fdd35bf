/// What kind of change an event reports; the raw value is the SSE event name.
public enum TaskEventKind: String, Sendable, CaseIterable {
    case created = "task.created"
    case updated = "task.updated"
    case stalled = "task.stalled"
    case recovered = "task.recovered"
    /// The task ran past its `expected_seconds` or `deadline` unfinished (`RunTimeRule`).
    case overdue = "task.overdue"
    /// The task succeeded sooner than its `min_seconds` (`RunTimeRule`).
    case tooQuick = "task.too_quick"
    case cancelRequested = "task.cancel_requested"
    case finished = "task.finished"
    case deleted = "task.deleted"
}

/// One committed change of one task, numbered in the global change sequence.
public struct TaskEvent: Equatable, Sendable {
    /// The change's number: global and strictly increasing, stored with the task; the
    /// event stream's `id`.
    public var changeNumber: Int64
    public var kind: TaskEventKind
    public var taskID: String
    public var parentID: String?
    /// When the task was created (for `min_duration`).
    public var createdAt: EpochMilliseconds
    /// When the task finished, if it has.
    public var finishedAt: EpochMilliseconds?
    /// The event's data: the whole task as JSON, or `{"id":…}` for a deletion.
    public var data: String

    public init(changeNumber: Int64, kind: TaskEventKind, taskID: String, parentID: String?, createdAt: EpochMilliseconds,
                finishedAt: EpochMilliseconds?, data: String) {
        self.changeNumber = changeNumber
        self.kind = kind
        self.taskID = taskID
        self.parentID = parentID
        self.createdAt = createdAt
        self.finishedAt = finishedAt
        self.data = data
    }

    /// The event for a task as it is after the change numbered `task.changeNumber`.
    public init(_ kind: TaskEventKind, _ task: TaskRecord) {
        self.init(changeNumber: task.changeNumber, kind: kind, taskID: task.id, parentID: task.parentID, createdAt: task.createdAt,
                  finishedAt: task.finishedAt, data: task.json)
    }

    /// The event for a deleted task.
    public static func deleted(changeNumber: Int64, taskID: String, parentID: String?, createdAt: EpochMilliseconds) -> TaskEvent {
        var data = JSONObjectWriter()
        data.string("id", taskID)
        return TaskEvent(changeNumber: changeNumber, kind: .deleted, taskID: taskID, parentID: parentID, createdAt: createdAt,
                         finishedAt: nil, data: data.finish())
    }
}

/// Which tasks a subscriber of the event stream wants, and for how short a life it
/// should not be bothered.
public struct StreamFilter: Equatable, Sendable {
    /// These tasks (with `parentIDs`: these tasks and those children).
    public var taskIDs: Set<String> { didSet { onlyTaskID = taskIDs.count == 1 ? taskIDs.first : nil } }
    /// The one task of `taskIDs` when it names one (what most dashboards' task pages ask):
    /// `matches`, run for every subscriber at every event, then compares two strings
    /// instead of hashing the event's id.
    private var onlyTaskID: String?
    /// Children of these tasks (a dashboard's open parents and its detail task).
    public var parentIDs: Set<String>
    /// And the `task.created` of every new top-level task: how a dashboard that follows
    /// only the tasks it shows hears of a new one for its first page.
    public var newRoots: Bool
    /// Tasks younger than this are held back; those that finish sooner are never sent.
    public var minDurationMilliseconds: Int64
    /// Only tasks whose id starts with this (the task prefix of the subscriber's token),
    /// whatever else is named.
    public var taskPrefix: String?

    public init(taskIDs: Set<String> = [], parentIDs: Set<String> = [], newRoots: Bool = false,
                minDurationMilliseconds: Int64 = 0, taskPrefix: String? = nil) {
        self.taskIDs = taskIDs
        onlyTaskID = taskIDs.count == 1 ? taskIDs.first : nil
        self.parentIDs = parentIDs
        self.newRoots = newRoots
        self.minDurationMilliseconds = minDurationMilliseconds
        self.taskPrefix = taskPrefix
    }

    /// Whether an event of `kind` about a task belongs to the stream: none outside the
    /// task prefix; else every task when nothing is named, else the named tasks, the
    /// children of the named parents and, with `newRoots`, the creation of a top-level task.
    public func matches(taskID: String, parentID: String?, kind: TaskEventKind = .updated) -> Bool {
        if let taskPrefix, !taskID.utf8.starts(with: taskPrefix.utf8) { return false }
        if let onlyTaskID, onlyTaskID == taskID { return true }
        if taskIDs.isEmpty && parentIDs.isEmpty && !newRoots { return true }
        if onlyTaskID == nil && taskIDs.contains(taskID) { return true }
        guard let parentID else { return newRoots && kind == .created }
        return !parentIDs.isEmpty && parentIDs.contains(parentID)
    }

    /// Whether a task that ran from `createdAt` to `finishedAt` lived too short to be shown.
    public func isTooShort(createdAt: EpochMilliseconds, finishedAt: EpochMilliseconds?) -> Bool {
        guard let finishedAt else { return false }
        return finishedAt - createdAt < minDurationMilliseconds
    }

    /// Whether a task created at `createdAt` is still too young to be shown at `now`.
    public func isTooYoung(createdAt: EpochMilliseconds, now: EpochMilliseconds) -> Bool {
        now - createdAt < minDurationMilliseconds
    }
}

/// The `min_duration` rule for one subscriber, as a pure state machine: events of tasks
/// younger than the minimum are held (only the latest per task), released when the task
/// comes of age, and dropped for good when it finishes or is deleted sooner.
public struct HoldBack: Sendable {
    /// What to do with an offered event.
    public enum Decision: Equatable, Sendable {
        case send(TaskEvent)
        case hold
        case drop
    }

    public let filter: StreamFilter
    /// Latest held event per task.
    private var held: [String: TaskEvent] = [:]

    public init(filter: StreamFilter) { self.filter = filter }

    /// Tasks currently held back.
    public var heldTaskIDs: Set<String> { Set(held.keys) }

    /// Whether `taskID` is held back: its later events are offered too, even those the
    /// filter would not send (a new root's update or finish, for a `newRoots` stream), so
    /// that it is released in its latest state, or dropped when it finished too soon.
    public func isHolding(_ taskID: String) -> Bool { !held.isEmpty && held[taskID] != nil }

    /// Decides about one event at `now`.
    public mutating func offer(_ event: TaskEvent, now: EpochMilliseconds) -> Decision {
        guard filter.minDurationMilliseconds > 0 else { return .send(event) }
        let wasHeld = held.removeValue(forKey: event.taskID) != nil
        if event.kind == .deleted { return wasHeld ? .drop : .send(event) }
        if filter.isTooShort(createdAt: event.createdAt, finishedAt: event.finishedAt) { return .drop }
        if wouldHold(event, now: now) {
            held[event.taskID] = event
            return .hold
        }
        return .send(event)
    }

    /// Whether `offer` would hold `event` at `now` (and so keep it, data and all): a caller
    /// whose events' data lies elsewhere (a catch-up shared by several streams) makes an
    /// event with its data only for those.
    public func wouldHold(_ event: TaskEvent, now: EpochMilliseconds) -> Bool {
        filter.minDurationMilliseconds > 0 && event.kind != .deleted && event.finishedAt == nil
            && filter.isTooYoung(createdAt: event.createdAt, now: now)
    }

    /// The held events whose tasks have come of age at `now`, oldest task first; they
    /// are no longer held.
    public mutating func release(now: EpochMilliseconds) -> [TaskEvent] {
        let due = held.values.filter { !filter.isTooYoung(createdAt: $0.createdAt, now: now) }
            .sorted { ($0.createdAt, $0.changeNumber) < ($1.createdAt, $1.changeNumber) }
        for event in due { held[event.taskID] = nil }
        return due
    }

    /// When the next held task comes of age, if any is held.
    public var nextRelease: EpochMilliseconds? {
        held.values.map { $0.createdAt + filter.minDurationMilliseconds }.min()
    }
}

/// When the event broker may start its next fan-out round (a lap, which visits every
/// subscriber), so that fan-out cannot starve ingestion: after a round that took longer
/// than `threshold` while updates poured in (at least `minimumWaiting` events joined it or
/// wait at its end), the next round starts no sooner than
/// `1 + factor` times that length after the last one began, so fan-out takes at most about
/// 1 / (1 + factor) of the time: an eighth by default. A round costs the updates more than
/// its own time (10,000 sockets written in a burst leave the caches and the scheduler to the
/// ingest threads' cost): with a fifth, updates kept 0.72 of their rate while 10,000
/// subscribers of every task received, with an eighth 0.85, and each subscriber still got
/// 13–15 frames a second, every task in them at its latest state (docs/benchmarks.md,
/// figure 6). Otherwise rounds follow at once. Times are monotonic nanoseconds, given by
/// the caller.
public struct FanOutPacing: Equatable, Sendable {
    public var threshold: UInt64
    public var minimumWaiting: Int
    public var factor: UInt64
    private var lastStart: UInt64 = 0
    private var lastLength: UInt64 = 0

    public init(threshold: UInt64 = 5_000_000, minimumWaiting: Int = 64, factor: UInt64 = 7) {
        self.threshold = threshold
        self.minimumWaiting = minimumWaiting
        self.factor = factor
    }

    /// Records a round that began at `start` and ended at `end`.
    public mutating func roundRan(from start: UInt64, to end: UInt64) {
        lastStart = start
        lastLength = end >= start ? end - start : 0
    }

    /// When the pause before the next round ends, if `waiting` events must wait at `now`.
    public func pauseEnd(waiting: Int, now: UInt64) -> UInt64? {
        guard lastLength > threshold, waiting >= minimumWaiting else { return nil }
        let end = lastStart + lastLength * (1 + factor)
        return end > now ? end : nil
    }
}
