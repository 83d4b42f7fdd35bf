/// The life-cycle state of a task.
public enum TaskState: String, Sendable, CaseIterable {
    case pending, running, succeeded, failed, canceled

    /// Whether the task has ended (it then accepts no more progress).
    public var isFinished: Bool {
        switch self {
        case .pending, .running: false
        case .succeeded, .failed, .canceled: true
        }
    }
}

/// How a task is shown: a progress bar or an activity indicator.
public enum TaskMode: String, Sendable, CaseIterable {
    case quantified, indeterminate
}

/// Why a task is flagged as stalled.
public enum StallReason: String, Sendable, CaseIterable {
    /// No signal arrived for `stall_timeout_seconds`.
    case silent
    /// Signals arrive but `completed` has not grown for `progress_timeout_seconds`.
    case noProgress = "no_progress"
}

/// Why a parent needs a look: a descendant failed, or a running descendant is stalled.
public enum Attention: String, Sendable, CaseIterable {
    case failed, stalled
}

/// How many direct children a parent has in each state; `stalled` counts the running ones
/// flagged stalled (so it is part of `running`, not beside it). Children that retention
/// forgot still count as they finished; deleted ones no longer count. Also used, with
/// negative numbers, for a change of these counts (`ChildrenChange`).
public struct ChildrenCounts: Equatable, Sendable {
    public var pending = 0
    public var running = 0
    public var stalled = 0
    public var succeeded = 0
    public var failed = 0
    public var canceled = 0

    public init(pending: Int = 0, running: Int = 0, stalled: Int = 0, succeeded: Int = 0, failed: Int = 0,
                canceled: Int = 0) {
        (self.pending, self.running, self.stalled) = (pending, running, stalled)
        (self.succeeded, self.failed, self.canceled) = (succeeded, failed, canceled)
    }

    /// Every child counted (`stalled` is inside `running`).
    public var total: Int { pending + running + succeeded + failed + canceled }
    /// The children not finished yet: what `--max-children` bounds.
    public var unfinished: Int { pending + running }
    public var isZero: Bool { self == ChildrenCounts() }

    /// Counts `delta` more children in `state` (and among the stalled when `stalled`).
    public mutating func add(_ state: TaskState, stalled isStalled: Bool, _ delta: Int) {
        switch state {
        case .pending: pending += delta
        case .running: running += delta
        case .succeeded: succeeded += delta
        case .failed: failed += delta
        case .canceled: canceled += delta
        }
        if isStalled { stalled += delta }
    }

    public static func += (lhs: inout ChildrenCounts, rhs: ChildrenCounts) {
        lhs.pending += rhs.pending
        lhs.running += rhs.running
        lhs.stalled += rhs.stalled
        lhs.succeeded += rhs.succeeded
        lhs.failed += rhs.failed
        lhs.canceled += rhs.canceled
    }

    /// The counts as the API shows them.
    public var json: String {
        var object = JSONObjectWriter(capacity: 112)
        object.integer("total", Int64(total))
        object.integer("pending", Int64(pending))
        object.integer("running", Int64(running))
        object.integer("stalled", Int64(stalled))
        object.integer("succeeded", Int64(succeeded))
        object.integer("failed", Int64(failed))
        object.integer("canceled", Int64(canceled))
        return object.finish()
    }
}

/// What a change of a child does to its parent's roll-up: the children's total weight and
/// weighted shares move by `weight` and `done`, the counts by state by `counts`, and the
/// numbers of children with a failure or a stall at or below them by `failing` and
/// `stalling`. Changes of several children of one parent add up (`+=`), so a batch rolls
/// each parent up once.
public struct ChildrenChange: Equatable, Sendable {
    public var weight = 0.0
    public var done = 0.0
    /// The move of weight × fraction summed over the unfinished children only.
    public var unfinishedDone = 0.0
    public var counts = ChildrenCounts()
    public var failing = 0
    public var stalling = 0

    public init() {}

    /// The change from `before` to `after`, two versions of one child: nil `before` for a
    /// child added, nil `after` for one deleted.
    public init(from before: TaskRecord?, to after: TaskRecord?) {
        if let before { subtract(before) }
        if let after { add(after) }
    }

    private mutating func add(_ child: TaskRecord, _ sign: Int = 1) {
        weight += Double(sign) * child.weight
        done += Double(sign) * child.weight * child.shareOfParent
        if !child.state.isFinished { unfinishedDone += Double(sign) * child.weight * (child.fraction ?? 0) }
        counts.add(child.state, stalled: child.isStalledAndRunning, sign)
        if child.isFailingForParent { failing += sign }
        if child.isStallingForParent { stalling += sign }
    }

    private mutating func subtract(_ child: TaskRecord) { add(child, -1) }

    /// Whether the children's weights or shares move (the parent's fraction with them).
    public var movesProgress: Bool { weight != 0 || done != 0 || unfinishedDone != 0 }
    /// Whether nothing at all changes.
    public var isEmpty: Bool { !movesProgress && counts.isZero && failing == 0 && stalling == 0 }

    public static func += (lhs: inout ChildrenChange, rhs: ChildrenChange) {
        lhs.weight += rhs.weight
        lhs.done += rhs.done
        lhs.unfinishedDone += rhs.unfinishedDone
        lhs.counts += rhs.counts
        lhs.failing += rhs.failing
        lhs.stalling += rhs.stalling
    }
}

/// Bounds on every input, in one place.
public enum Limits {
    public static let idLength = 128
    public static let nameLength = 200
    public static let labelLength = 500
    public static let unitLength = 64
    public static let messageLength = 4000
    public static let metadataBytes = 4096
    /// The largest count or sequence number, 2^53 − 1, so every JSON reader keeps it exact.
    public static let maxCount: Int64 = 9_007_199_254_740_991
    /// Timeouts are between one second and thirty days.
    public static let timeoutSeconds: ClosedRange<Double> = 1...2_592_000
    /// `expected_seconds` and `min_seconds` are between one second and a year.
    public static let runTimeSeconds: ClosedRange<Double> = 1...31_536_000
    /// A `deadline` is after its registration and at most a year (366 days) ahead of it.
    public static let deadlineHorizonMilliseconds: Int64 = 366 * 86_400_000
    /// A child's weight in its parent.
    public static let weight: ClosedRange<Double> = 0.000001...1_000_000
}

/// Bounds on the task tree and on what is stored, set by the daemon's flags
/// (`--max-depth`, `--max-children`, `--max-tasks`): no client can make one change walk,
/// or the database hold, more than they allow.
public struct TreeLimits: Sendable, Equatable {
    /// The deepest a task may be (a root is depth 1).
    public var maximumDepth = 32
    /// The most unfinished (pending or running) children one parent may have at once:
    /// finished ones do not count, and retention forgets them, so a parent that lives
    /// forever (a service starting jobs) never fills up.
    public var maximumChildren = 10_000
    /// The most tasks stored at once (finished ones count until retention forgets them).
    public var maximumTasks: Int64 = 10_000_000

    public init(maximumDepth: Int = 32, maximumChildren: Int = 10_000, maximumTasks: Int64 = 10_000_000) {
        self.maximumDepth = maximumDepth
        self.maximumChildren = maximumChildren
        self.maximumTasks = maximumTasks
    }
}

/// One task as stored: what the runner said and what the server derived.
///
/// A value, kept copy-on-write in one box: a task is copied many times between the cache,
/// the rules, its event and its reply, and changed once, so a copy costs a reference,
/// not its ~500 bytes and a retain of each of its strings.
@dynamicMemberLookup
public struct TaskRecord: Equatable, Sendable {
    /// The stored fields, read and changed as the task's own (`task.name`, `task.completed += 1`)
    /// through `subscript(dynamicMember:)`.
    public struct Fields: Equatable, Sendable {
        public var id: String
        public var name: String
        public var label: String?
        public var parentID: String?
        public var weight: Double
        public var state: TaskState
        public var completed: Int64
        public var total: Int64?
        public var unit: String?
        public var stalled: Bool
        public var stallReason: StallReason?
        public var stalledSince: EpochMilliseconds?
        public var stallTimeoutMilliseconds: Int64
        public var progressTimeoutMilliseconds: Int64?
        public var cancelRequested: Bool
        /// The highest runner `seq` applied so far, if the runner sends them (not a change number).
        public var lastRunnerSeq: Int64?
        public var createdAt: EpochMilliseconds
        public var updatedAt: EpochMilliseconds
        /// The last signal: the task's own create, progress or heartbeat, or one of a
        /// descendant's (a roll-up carries it up).
        public var lastSignalAt: EpochMilliseconds
        /// When `completed` last grew.
        public var lastProgressAt: EpochMilliseconds?
        public var finishedAt: EpochMilliseconds?
        public var message: String?
        /// The metadata object as canonical JSON text.
        public var metadata: String?
        /// The canonical registration body, compared when the same id is registered again.
        public var definition: String
        /// The last line of the task's output tail (`OutputTail`), nil before any.
        public var lastOutput: String?
        /// How many output lines the task ever sent (the next line's number in its tail's ring).
        public var outputLines: Int64 = 0
        /// When the task became running (nil while pending).
        public var startedAt: EpochMilliseconds?
        /// The next time the stall flag may change without a signal (see `StallRule`); as
        /// stored, it may be a little earlier (`StallRule.deadlineToStore`).
        public var stallDeadline: EpochMilliseconds?
        /// The rate estimator's state.
        public var rate: RateEstimator = RateEstimator()
        /// How long the task is expected to run from its start (`expected_seconds`), if set.
        public var expectedMilliseconds: Int64?
        /// When the task should have finished (`deadline`), if set.
        public var deadline: EpochMilliseconds?
        /// The shortest believable successful run (`min_seconds`), if set.
        public var minMilliseconds: Int64?
        /// Whether the task ran past its due moment unfinished (`RunTimeRule`); kept once finished.
        public var overdue = false
        /// The due moment it ran past, while `overdue`.
        public var overdueSince: EpochMilliseconds?
        /// When the sweeper must look at the task (`RunTimeRule.sweepAt`): its due moment while
        /// it is unfinished and not flagged yet, else nil. What the overdue index holds.
        public var overdueAt: EpochMilliseconds?
        /// Whether the task succeeded sooner than `minMilliseconds` after its start.
        public var tooQuick = false
        /// For a parent: the sum of its children's weights, and of weight × child fraction.
        public var childrenWeight: Double = 0.0
        public var childrenDone: Double = 0.0
        /// For a parent: the sum of weight × fraction of its unfinished (pending or running)
        /// children (0 for an indeterminate one): what a parent with its own total adds to its
        /// `completed` (see `fraction`).
        public var unfinishedChildrenDone: Double = 0.0
        /// How deep the task is in its tree: 1 for a root, its parent's depth + 1 for a child.
        public var depth: Int = 1
        /// How many children the task has (stored ones: a deleted or forgotten child no longer counts).
        public var childCount: Int = 0
        /// How many direct children are in each state (forgotten ones as they finished).
        public var children = ChildrenCounts()
        /// How many direct children failed or have a failed descendant (forgotten ones
        /// included): `attention` is `failed` while there is one.
        public var failingChildren: Int = 0
        /// How many direct children are running and stalled or have a running stalled
        /// descendant: `attention` is `stalled` while there is one (and none failing).
        public var stallingChildren: Int = 0
        /// History samples stored for this task, and the second of the latest.
        public var historyPoints: Int = 0
        public var historyBucket: Int64?
        /// The number of the task's latest change in the global change sequence (0 until stored).
        public var changeNumber: Int64 = 0
        /// What that change was (replayed as the event name when a subscriber resumes).
        public var changeKind: TaskEventKind = .created
    }

    /// The fields, shared by copies until one of them changes.
    @usableFromInline
    final class Box: @unchecked Sendable {  // copy-on-write: changed only through `ownBox()`, when no other value shares it
        @usableFromInline var fields: Fields
        @usableFromInline init(_ fields: Fields) { self.fields = fields }
    }

    @usableFromInline var box: Box

    /// The box, this value's alone (copied first when shared), to change.
    @inlinable
    mutating func ownBox() -> Box {
        if !isKnownUniquelyReferenced(&box) { box = Box(box.fields) }
        return box
    }

    /// Every field of `Fields`, as if stored in the value itself: a read shares the box, a
    /// change copies it first when another value shares it.
    @inlinable
    public subscript<Value>(dynamicMember field: WritableKeyPath<Fields, Value>) -> Value {
        get { box.fields[keyPath: field] }
        set { ownBox().fields[keyPath: field] = newValue }
    }

    public static func == (lhs: TaskRecord, rhs: TaskRecord) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    public init(id: String, name: String, label: String? = nil, parentID: String? = nil, weight: Double = 1,
                state: TaskState = .running, completed: Int64 = 0, total: Int64? = nil, unit: String? = nil,
                stalled: Bool = false, stallReason: StallReason? = nil, stalledSince: EpochMilliseconds? = nil,
                stallTimeoutMilliseconds: Int64 = 30_000, progressTimeoutMilliseconds: Int64? = nil,
                cancelRequested: Bool = false, lastRunnerSeq: Int64? = nil, createdAt: EpochMilliseconds,
                updatedAt: EpochMilliseconds, lastSignalAt: EpochMilliseconds, lastProgressAt: EpochMilliseconds? = nil,
                finishedAt: EpochMilliseconds? = nil, message: String? = nil, metadata: String? = nil,
                definition: String = "{}") {
        box = Box(Fields(
            id: id, name: name, label: label, parentID: parentID, weight: weight, state: state,
            completed: completed, total: total, unit: unit, stalled: stalled, stallReason: stallReason,
            stalledSince: stalledSince, stallTimeoutMilliseconds: stallTimeoutMilliseconds,
            progressTimeoutMilliseconds: progressTimeoutMilliseconds, cancelRequested: cancelRequested,
            lastRunnerSeq: lastRunnerSeq, createdAt: createdAt, updatedAt: updatedAt,
            lastSignalAt: lastSignalAt, lastProgressAt: lastProgressAt, finishedAt: finishedAt,
            message: message, metadata: metadata, definition: definition, lastOutput: nil))
    }

    /// Whether the task has children (its progress is theirs, weighted).
    public var hasChildren: Bool { self.childrenWeight > 0 }

    /// Whether the task is a parent as the API shows it (`children` is not null): it has
    /// children counted, or a roll-up of children.
    public var isParent: Bool { hasChildren || self.children.total > 0 }

    /// `failed` when a descendant failed, else `stalled` when a running descendant is
    /// stalled, else nil.
    public var attention: Attention? {
        if self.failingChildren > 0 { return .failed }
        if self.stallingChildren > 0 { return .stalled }
        return nil
    }

    /// Whether the task itself is stalled (only a running task can be).
    var isStalledAndRunning: Bool { self.stalled && self.state == .running }
    /// Whether the task gives its parent a failure: it failed, or a descendant did.
    var isFailingForParent: Bool { self.state == .failed || self.failingChildren > 0 }
    /// Whether the task gives its parent a stall: it is stalled, or a running descendant is.
    var isStallingForParent: Bool { isStalledAndRunning || self.stallingChildren > 0 }

    /// `quantified` when the total is known or the task has children, else `indeterminate`.
    public var mode: TaskMode { self.total == nil && !hasChildren ? .indeterminate : .quantified }

    /// 0…1, or nil while indeterminate. With children, a parent that declares its own
    /// `total` (above 0) counts them as units of it, as Foundation's `Progress` counts a
    /// child's pending units: (`completed` + weight × fraction of each unfinished child) /
    /// `total`, so a child's work shows while it runs and counts once the runner adds it
    /// to `completed`; children still to come count as the units not done yet. A parent
    /// without a total: the weighted mean of its children's shares (see
    /// `shareOfParent`). Either way at most 1, 1 once the parent succeeded, but never 1
    /// while a descendant failed (then at most `belowOne`, which every percent floors to
    /// 99). Without children: completed / total; an empty task (total 0) is complete only
    /// once it has succeeded.
    public var fraction: Double? {
        if hasChildren {
            let rolledUp: Double
            if let total = self.total, total > 0 {
                rolledUp = min(1, max(0, (Double(self.completed) + self.unfinishedChildrenDone) / Double(total)))
            } else {
                rolledUp = min(1, max(0, self.childrenDone / self.childrenWeight))
            }
            if self.failingChildren > 0 { return min(rolledUp, Self.belowOne) }
            return self.state == .succeeded ? 1 : rolledUp
        }
        guard let total = self.total else { return nil }
        if total == 0 { return self.state == .succeeded ? 1 : 0 }
        return Double(self.completed) / Double(total)
    }

    /// The most a parent with a failed descendant shows: below 1 by more than JSON readers
    /// that parse numbers loosely round away (Foundation reads 0.9999999999999999 as 1).
    public static let belowOne = 0.999_999

    /// What this task contributes to its parent's fraction, before weighting: 1 once
    /// succeeded, else its fraction (0 while indeterminate) — for a failed or canceled
    /// task the fraction it had when it finished, which no longer moves.
    public var shareOfParent: Double { self.state == .succeeded ? 1 : fraction ?? 0 }

    /// The measure the rate estimator follows: the fraction for a parent, else `completed`.
    public var progressValue: Double { hasChildren ? fraction ?? 0 : Double(self.completed) }

    /// Rate (units per second; for a parent, fraction per second) and seconds left, as of
    /// the last report; nil whenever they cannot be known honestly: indeterminate, too
    /// few samples, no movement, stalled, finished, or (for a parent) a descendant failed
    /// or stalled (`attention`).
    public var estimate: (rate: Double, etaSeconds: Double)? {
        guard !self.state.isFinished, !self.stalled, attention == nil, mode == .quantified, let rate = self.rate.rate, rate > 0
        else { return nil }
        let remaining: Double
        if hasChildren {
            remaining = 1 - (fraction ?? 0)
        } else if let total = self.total {
            remaining = Double(total - self.completed)
        } else {
            return nil
        }
        return (rate, max(0, remaining / rate))
    }

    /// The task as the API shows it, every documented field present.
    public var json: String {
        var object = JSONObjectWriter(capacity: 1024)
        object.string("id", self.id)
        object.string("name", self.name)
        object.string("label", self.label)
        object.string("parent_id", self.parentID)
        object.number("weight", self.weight)
        object.string("state", self.state.rawValue)
        object.string("mode", mode.rawValue)
        object.integer("completed", self.completed)
        object.integer("total", self.total)
        object.string("unit", self.unit)
        object.number("fraction", fraction)
        let estimate = self.estimate
        object.number("rate", estimate?.rate)
        object.number("eta_seconds", estimate.map { ($0.etaSeconds * 10).rounded() / 10 })
        object.raw("children", isParent ? self.children.json : nil)
        object.string("attention", attention?.rawValue)
        object.bool("stalled", self.stalled)
        object.string("stall_reason", self.stallReason?.rawValue)
        object.timestamp("stalled_since", self.stalledSince)
        object.number("stall_timeout_seconds", Double(self.stallTimeoutMilliseconds) / 1000)
        object.number("progress_timeout_seconds", self.progressTimeoutMilliseconds.map { Double($0) / 1000 })
        object.number("expected_seconds", self.expectedMilliseconds.map { Double($0) / 1000 })
        object.timestamp("deadline", self.deadline)
        object.number("min_seconds", self.minMilliseconds.map { Double($0) / 1000 })
        object.bool("overdue", self.overdue)
        object.timestamp("overdue_since", self.overdueSince)
        object.bool("too_quick", self.tooQuick)
        object.bool("cancel_requested", self.cancelRequested)
        object.integer("seq", self.lastRunnerSeq)
        object.timestamp("created_at", self.createdAt)
        object.timestamp("updated_at", self.updatedAt)
        object.timestamp("last_signal_at", self.lastSignalAt)
        object.timestamp("last_progress_at", self.lastProgressAt)
        object.timestamp("finished_at", self.finishedAt)
        object.string("message", self.message)
        object.string("last_output", self.lastOutput)
        object.raw("metadata", self.metadata)
        return object.finish()
    }
}

/// The pattern every task id follows: 1–128 of `[A-Za-z0-9._~:-]`.
public enum TaskID {
    /// Whether `id` is `.` or `..`: valid characters, but no id a new task may take.
    public static func isDotSegment(_ id: String) -> Bool { id == "." || id == ".." }

    /// Whether `id` is a valid task id.
    public static func isValid(_ id: String) -> Bool {
        id.withUTF8Bytes { bytes in
            guard !bytes.isEmpty, bytes.count <= Limits.idLength else { return false }
            return bytes.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                     UInt8(ascii: "~"), UInt8(ascii: ":"), UInt8(ascii: "-"):
                    true
                default:
                    false
                }
            }
        }
    }
}

extension String {
    /// Runs `body` on the string's UTF-8 bytes: in place for a native string (what is
    /// parsed or received), else on a copy. A loop over the bytes costs a fraction of one
    /// over `utf8`, which steps String's index at each byte.
    func withUTF8Bytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        if let result = utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(utf8).withUnsafeBufferPointer(body)
    }
}
