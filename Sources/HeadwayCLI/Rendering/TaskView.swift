import HeadwayCore

/// A task as the command line shows it, decoded from the server's task JSON (the `Task`
/// schema of `openapi.yaml`). Decoding is tolerant: a missing or mistyped optional field
/// becomes nil (or its neutral default), so an older or newer server still renders.
/// Texts (`name`, `label`, `unit`, `message`, an unknown state) are sanitized for the
/// terminal (`DisplayWidth.sanitize`): no escape sequences, no line breaks.
public struct TaskView: Equatable, Sendable {
    /// The lifecycle state; `other` keeps a state this client does not know.
    public enum State: Equatable, Sendable {
        case pending, running, succeeded, failed, canceled
        case other(String)

        init(_ text: String) {
            switch text {
            case "pending": self = .pending
            case "running": self = .running
            case "succeeded": self = .succeeded
            case "failed": self = .failed
            case "canceled": self = .canceled
            default: self = .other(text)
            }
        }

        /// The word the server uses (`running`, `succeeded`, …).
        public var text: String {
            switch self {
            case .pending: "pending"
            case .running: "running"
            case .succeeded: "succeeded"
            case .failed: "failed"
            case .canceled: "canceled"
            case .other(let text): text
            }
        }

        /// True for `succeeded`, `failed` and `canceled`.
        public var isFinished: Bool {
            switch self {
            case .succeeded, .failed, .canceled: true
            default: false
            }
        }
    }

    public var id: String
    public var name: String
    public var label: String?
    public var parentID: String?
    public var weight: Double?
    public var state: State
    /// True when `mode` is `quantified` (or, without `mode`, when `total` or `fraction` is known).
    public var isQuantified: Bool
    public var completed: Int64
    public var total: Int64?
    public var unit: String?
    /// 0…1, nil while indeterminate.
    public var fraction: Double?
    /// Smoothed units per second (fraction per second for a parent without a total); nil when unknown.
    public var rate: Double?
    public var etaSeconds: Double?
    public var stalled: Bool
    /// `silent` or `no_progress` as the server says.
    public var stallReason: String?
    public var stalledSince: EpochMilliseconds?
    public var cancelRequested: Bool
    /// Whether the task ran past its due moment unfinished (`overdue`), and since when.
    public var overdue: Bool
    public var overdueSince: EpochMilliseconds?
    /// Whether the task succeeded sooner than its `min_seconds` (`too_quick`).
    public var tooQuick: Bool
    /// Its `min_seconds`, when it has one.
    public var minSeconds: Double?
    public var createdAt: EpochMilliseconds?
    public var updatedAt: EpochMilliseconds?
    public var lastProgressAt: EpochMilliseconds?
    public var finishedAt: EpochMilliseconds?
    /// The last signal of the task or a descendant (`last_signal_at`); nil from a server
    /// that does not send it.
    public var lastSignalAt: EpochMilliseconds?
    public var message: String?
    /// The last line of the task's output tail (`last_output`), when the server sends one.
    public var lastOutput: String?
    /// `failed` or `stalled` for a parent with a descendant in that state (`attention`).
    public var attention: String?
    /// A parent's direct children by state (`children`); nil for a task without children
    /// or from a server that does not count them.
    public var children: ChildCounts?

    /// The counts of a parent's direct children (`children`): `stalled` is part of `running`.
    public struct ChildCounts: Equatable, Sendable {
        public var total: Int64, pending: Int64, running: Int64, stalled: Int64
        public var succeeded: Int64, failed: Int64, canceled: Int64

        /// What a person looks for first: `1 of 3 failed · 1 stalled`, then cancels, else
        /// how many are done (`2 of 3 done`).
        public var summary: String {
            var pieces: [String] = []
            if failed > 0 { pieces.append("\(Formatting.count(failed)) of \(Formatting.count(total)) failed") }
            if stalled > 0 { pieces.append("\(Formatting.count(stalled)) stalled") }
            if canceled > 0 { pieces.append("\(Formatting.count(canceled)) canceled") }
            if pieces.isEmpty { pieces.append("\(Formatting.count(succeeded)) of \(Formatting.count(total)) done") }
            return pieces.joined(separator: " · ")
        }
    }

    /// Decodes a task object; nil when `json` is not an object with a string `id`.
    public init?(json: JSONValue) {
        guard case .object(let fields) = json, case .string(let id)? = fields["id"] else { return nil }
        func string(_ key: String) -> String? {
            if case .string(let value)? = fields[key] { return DisplayWidth.sanitize(value) }
            return nil
        }
        func integer(_ key: String) -> Int64? {
            switch fields[key] {
            case .integer(let value)?: return value
            case .number(let value)? where value.isFinite && value.rounded() == value && abs(value) < 9e15: return Int64(value)
            default: return nil
            }
        }
        func number(_ key: String) -> Double? {
            switch fields[key] {
            case .integer(let value)?: return Double(value)
            case .number(let value)? where value.isFinite: return value
            default: return nil
            }
        }
        func bool(_ key: String) -> Bool {
            if case .bool(let value)? = fields[key] { return value }
            return false
        }
        func time(_ key: String) -> EpochMilliseconds? { string(key).flatMap(Timestamp.parseRFC3339) }

        self.id = DisplayWidth.sanitize(id)
        name = string("name") ?? ""
        label = string("label")
        parentID = string("parent_id")
        weight = number("weight")
        state = State(string("state") ?? "running")
        completed = max(0, integer("completed") ?? 0)
        total = integer("total")
        unit = string("unit")
        fraction = number("fraction").map { min(1, max(0, $0)) }
        switch string("mode") {
        case "quantified"?: isQuantified = true
        case "indeterminate"?: isQuantified = false
        default: isQuantified = total != nil || fraction != nil
        }
        rate = number("rate").flatMap { $0 >= 0 ? $0 : nil }
        etaSeconds = number("eta_seconds").flatMap { $0 >= 0 ? $0 : nil }
        stalled = bool("stalled")
        stallReason = string("stall_reason")
        stalledSince = time("stalled_since")
        cancelRequested = bool("cancel_requested")
        overdue = bool("overdue")
        overdueSince = time("overdue_since")
        tooQuick = bool("too_quick")
        minSeconds = number("min_seconds")
        createdAt = time("created_at")
        updatedAt = time("updated_at")
        lastProgressAt = time("last_progress_at")
        finishedAt = time("finished_at")
        lastSignalAt = time("last_signal_at")
        message = string("message")
        lastOutput = string("last_output")
        attention = string("attention")
        if case .object(let counts)? = fields["children"] {
            func count(_ key: String) -> Int64 {
                if case .integer(let value)? = counts[key], value >= 0 { return value }
                return 0
            }
            let total = count("total")
            children = total > 0 ? ChildCounts(total: total, pending: count("pending"), running: count("running"),
                                                stalled: count("stalled"), succeeded: count("succeeded"),
                                                failed: count("failed"), canceled: count("canceled")) : nil
        }
    }

    /// The fraction to draw: the server's, else `completed / total`, else nil.
    public var displayFraction: Double? {
        if let fraction { return fraction }
        if let total, total > 0 { return min(1, Double(completed) / Double(total)) }
        return nil
    }

    /// The whole percent shown on every surface: floor(fraction × 100), 100 only when the
    /// fraction is exactly 1. Counted in integers when the task has its own total, so that
    /// 29 of 100 is 29% (0.29 × 100 is 28.999… in binary).
    public var percent: Int {
        if let total, total > 0, completed <= total,
           fraction.map({ abs($0 - Double(completed) / Double(total)) < 1e-9 }) ?? true {
            if completed == total { return 100 }
            let (product, overflow) = completed.multipliedReportingOverflow(by: 100)
            return min(99, overflow ? Int(Double(completed) / Double(total) * 100) : Int(product / total))
        }
        return Formatting.percent(displayFraction ?? 0)
    }

    /// Whether the progress is whole: the bar is drawn full only then.
    var isComplete: Bool { percent == 100 }

    /// A task's own total counts `%` (what `headway run` reports for a command that shows
    /// only percents): its count says nothing the percent does not.
    var countsPercent: Bool { unit == "%" && total == 100 }
}
