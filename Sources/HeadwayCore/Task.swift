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
    /// A child's weight in its parent.
    public static let weight: ClosedRange<Double> = 0.000001...1_000_000
}

/// Bounds on the task tree and on what is stored, set by the daemon's flags
/// (`--max-depth`, `--max-children`, `--max-tasks`): no client can make one change walk,
/// or the database hold, more than they allow.
public struct TreeLimits: Sendable, Equatable {
    /// The deepest a task may be (a root is depth 1).
    public var maximumDepth = 32
    /// The most children one parent may have (deleted and forgotten ones no longer count).
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
public struct TaskRecord: Equatable, Sendable {
    /// The stored fields.
    fileprivate struct Fields: Equatable, Sendable {
        var id: String
        var name: String
        var label: String?
        var parentID: String?
        var weight: Double
        var state: TaskState
        var completed: Int64
        var total: Int64?
        var unit: String?
        var stalled: Bool
        var stallReason: StallReason?
        var stalledSince: EpochMilliseconds?
        var stallTimeoutMilliseconds: Int64
        var progressTimeoutMilliseconds: Int64?
        var cancelRequested: Bool
        var lastRunnerSeq: Int64?
        var createdAt: EpochMilliseconds
        var updatedAt: EpochMilliseconds
        var lastSignalAt: EpochMilliseconds
        var lastProgressAt: EpochMilliseconds?
        var finishedAt: EpochMilliseconds?
        var message: String?
        var metadata: String?
        var definition: String
        var lastOutput: String?
        var startedAt: EpochMilliseconds?
        var stallDeadline: EpochMilliseconds?
        var rate: RateEstimator = RateEstimator()
        var childrenWeight: Double = 0.0
        var childrenDone: Double = 0.0
        var depth: Int = 1
        var childCount: Int = 0
        var historyPoints: Int = 0
        var historyBucket: Int64?
        var changeNumber: Int64 = 0
        var changeKind: TaskEventKind = .created
    }

    /// The fields, shared by copies until one of them changes.
    fileprivate final class Box: @unchecked Sendable {  // changed only through `ownBox()`, when not shared
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    /// The box, this value's alone (copied first when shared), to change.
    private mutating func ownBox() -> Box {
        if !isKnownUniquelyReferenced(&box) { box = Box(box.fields) }
        return box
    }

    public static func == (lhs: TaskRecord, rhs: TaskRecord) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    public var id: String {
        get { box.fields.id }
        set { ownBox().fields.id = newValue }
    }
    public var name: String {
        get { box.fields.name }
        set { ownBox().fields.name = newValue }
    }
    public var label: String? {
        get { box.fields.label }
        set { ownBox().fields.label = newValue }
    }
    public var parentID: String? {
        get { box.fields.parentID }
        set { ownBox().fields.parentID = newValue }
    }
    public var weight: Double {
        get { box.fields.weight }
        set { ownBox().fields.weight = newValue }
    }
    public var state: TaskState {
        get { box.fields.state }
        set { ownBox().fields.state = newValue }
    }
    public var completed: Int64 {
        get { box.fields.completed }
        set { ownBox().fields.completed = newValue }
    }
    public var total: Int64? {
        get { box.fields.total }
        set { ownBox().fields.total = newValue }
    }
    public var unit: String? {
        get { box.fields.unit }
        set { ownBox().fields.unit = newValue }
    }
    public var stalled: Bool {
        get { box.fields.stalled }
        set { ownBox().fields.stalled = newValue }
    }
    public var stallReason: StallReason? {
        get { box.fields.stallReason }
        set { ownBox().fields.stallReason = newValue }
    }
    public var stalledSince: EpochMilliseconds? {
        get { box.fields.stalledSince }
        set { ownBox().fields.stalledSince = newValue }
    }
    public var stallTimeoutMilliseconds: Int64 {
        get { box.fields.stallTimeoutMilliseconds }
        set { ownBox().fields.stallTimeoutMilliseconds = newValue }
    }
    public var progressTimeoutMilliseconds: Int64? {
        get { box.fields.progressTimeoutMilliseconds }
        set { ownBox().fields.progressTimeoutMilliseconds = newValue }
    }
    public var cancelRequested: Bool {
        get { box.fields.cancelRequested }
        set { ownBox().fields.cancelRequested = newValue }
    }
    /// The highest runner `seq` applied so far, if the runner sends them (not a change number).
    public var lastRunnerSeq: Int64? {
        get { box.fields.lastRunnerSeq }
        set { ownBox().fields.lastRunnerSeq = newValue }
    }
    public var createdAt: EpochMilliseconds {
        get { box.fields.createdAt }
        set { ownBox().fields.createdAt = newValue }
    }
    public var updatedAt: EpochMilliseconds {
        get { box.fields.updatedAt }
        set { ownBox().fields.updatedAt = newValue }
    }
    /// The last create, progress or heartbeat.
    public var lastSignalAt: EpochMilliseconds {
        get { box.fields.lastSignalAt }
        set { ownBox().fields.lastSignalAt = newValue }
    }
    /// When `completed` last grew.
    public var lastProgressAt: EpochMilliseconds? {
        get { box.fields.lastProgressAt }
        set { ownBox().fields.lastProgressAt = newValue }
    }
    public var finishedAt: EpochMilliseconds? {
        get { box.fields.finishedAt }
        set { ownBox().fields.finishedAt = newValue }
    }
    public var message: String? {
        get { box.fields.message }
        set { ownBox().fields.message = newValue }
    }
    /// The last line of the task's output tail (`OutputTail`), nil before any.
    public var lastOutput: String? {
        get { box.fields.lastOutput }
        set { ownBox().fields.lastOutput = newValue }
    }
    /// The metadata object as canonical JSON text.
    public var metadata: String? {
        get { box.fields.metadata }
        set { ownBox().fields.metadata = newValue }
    }
    /// The canonical registration body, compared when the same id is registered again.
    public var definition: String {
        get { box.fields.definition }
        set { ownBox().fields.definition = newValue }
    }
    /// When the task became running (nil while pending).
    public var startedAt: EpochMilliseconds? {
        get { box.fields.startedAt }
        set { ownBox().fields.startedAt = newValue }
    }
    /// The next time the stall flag may change without a signal (see `StallRule`); as
    /// stored, it may be a little earlier (`StallRule.deadlineToStore`).
    public var stallDeadline: EpochMilliseconds? {
        get { box.fields.stallDeadline }
        set { ownBox().fields.stallDeadline = newValue }
    }
    /// The rate estimator's state.
    public var rate: RateEstimator {
        get { box.fields.rate }
        set { ownBox().fields.rate = newValue }
    }
    /// For a parent: the sum of its children's weights, and of weight × child fraction.
    public var childrenWeight: Double {
        get { box.fields.childrenWeight }
        set { ownBox().fields.childrenWeight = newValue }
    }
    public var childrenDone: Double {
        get { box.fields.childrenDone }
        set { ownBox().fields.childrenDone = newValue }
    }
    /// How deep the task is in its tree: 1 for a root, its parent's depth + 1 for a child.
    public var depth: Int {
        get { box.fields.depth }
        set { ownBox().fields.depth = newValue }
    }
    /// How many children the task has (stored ones: a deleted or forgotten child no longer counts).
    public var childCount: Int {
        get { box.fields.childCount }
        set { ownBox().fields.childCount = newValue }
    }
    /// History samples stored for this task, and the second of the latest.
    public var historyPoints: Int {
        get { box.fields.historyPoints }
        set { ownBox().fields.historyPoints = newValue }
    }
    public var historyBucket: Int64? {
        get { box.fields.historyBucket }
        set { ownBox().fields.historyBucket = newValue }
    }
    /// The number of the task's latest change in the global change sequence (0 until stored).
    public var changeNumber: Int64 {
        get { box.fields.changeNumber }
        set { ownBox().fields.changeNumber = newValue }
    }
    /// What that change was (replayed as the event name when a subscriber resumes).
    public var changeKind: TaskEventKind {
        get { box.fields.changeKind }
        set { ownBox().fields.changeKind = newValue }
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
    public var hasChildren: Bool { childrenWeight > 0 }

    /// `quantified` when the total is known or the task has children, else `indeterminate`.
    public var mode: TaskMode { total == nil && !hasChildren ? .indeterminate : .quantified }

    /// 0…1, or nil while indeterminate. With children: the weighted mean of theirs (see
    /// `shareOfParent`). Otherwise completed / total; an empty task (total 0) is complete
    /// only once it has succeeded.
    public var fraction: Double? {
        if hasChildren {
            if state == .succeeded { return 1 }
            return min(1, max(0, childrenDone / childrenWeight))
        }
        guard let total else { return nil }
        if total == 0 { return state == .succeeded ? 1 : 0 }
        return Double(completed) / Double(total)
    }

    /// What this task contributes to its parent's fraction, before weighting: 1 once
    /// finished (whatever the outcome), else its fraction (0 while indeterminate).
    public var shareOfParent: Double { state.isFinished ? 1 : fraction ?? 0 }

    /// The measure the rate estimator follows: the fraction for a parent, else `completed`.
    public var progressValue: Double { hasChildren ? fraction ?? 0 : Double(completed) }

    /// Rate (units per second; for a parent, fraction per second) and seconds left, as of
    /// the last report; nil whenever they cannot be known honestly: indeterminate, too
    /// few samples, no movement, stalled, finished.
    public var estimate: (rate: Double, etaSeconds: Double)? {
        guard !state.isFinished, !stalled, mode == .quantified, let rate = rate.rate, rate > 0 else { return nil }
        let remaining: Double
        if hasChildren {
            remaining = 1 - (fraction ?? 0)
        } else if let total {
            remaining = Double(total - completed)
        } else {
            return nil
        }
        return (rate, max(0, remaining / rate))
    }

    /// The task as the API shows it, every documented field present.
    public var json: String {
        var object = JSONObjectWriter(capacity: 1024)
        object.string("id", id)
        object.string("name", name)
        object.string("label", label)
        object.string("parent_id", parentID)
        object.number("weight", weight)
        object.string("state", state.rawValue)
        object.string("mode", mode.rawValue)
        object.integer("completed", completed)
        object.integer("total", total)
        object.string("unit", unit)
        object.number("fraction", fraction)
        let estimate = self.estimate
        object.number("rate", estimate?.rate)
        object.number("eta_seconds", estimate.map { ($0.etaSeconds * 10).rounded() / 10 })
        object.bool("stalled", stalled)
        object.string("stall_reason", stallReason?.rawValue)
        object.timestamp("stalled_since", stalledSince)
        object.number("stall_timeout_seconds", Double(stallTimeoutMilliseconds) / 1000)
        object.number("progress_timeout_seconds", progressTimeoutMilliseconds.map { Double($0) / 1000 })
        object.bool("cancel_requested", cancelRequested)
        object.integer("seq", lastRunnerSeq)
        object.timestamp("created_at", createdAt)
        object.timestamp("updated_at", updatedAt)
        object.timestamp("last_progress_at", lastProgressAt)
        object.timestamp("finished_at", finishedAt)
        object.string("message", message)
        object.string("last_output", lastOutput)
        object.raw("metadata", metadata)
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
