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
    public var createdAt: EpochMilliseconds?
    public var updatedAt: EpochMilliseconds?
    public var lastProgressAt: EpochMilliseconds?
    public var finishedAt: EpochMilliseconds?
    public var message: String?

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
        createdAt = time("created_at")
        updatedAt = time("updated_at")
        lastProgressAt = time("last_progress_at")
        finishedAt = time("finished_at")
        message = string("message")
    }

    /// The fraction to draw: the server's, else `completed / total`, else nil.
    public var displayFraction: Double? {
        if let fraction { return fraction }
        if let total, total > 0 { return min(1, Double(completed) / Double(total)) }
        return nil
    }
}
