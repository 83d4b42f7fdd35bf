import Foundation

/// A task as headwayd stores it (the `Task` schema of `openapi.yaml`).
public struct HeadwayTask: Sendable, Equatable, Decodable {
    /// Where a task is in its life.
    public enum State: String, Sendable, Codable {
        case pending, running, succeeded, failed, canceled

        /// Whether the task has finished (succeeded, failed or canceled).
        public var isFinished: Bool { self != .pending && self != .running }
    }

    /// A parent's direct children, counted by state.
    public struct ChildCounts: Sendable, Equatable, Decodable {
        /// All direct children, the five states summed.
        public var total: Int64
        public var pending: Int64
        /// Stalled children included.
        public var running: Int64
        /// The running children flagged stalled (counted in `running` too).
        public var stalled: Int64
        public var succeeded: Int64
        public var failed: Int64
        public var canceled: Int64
    }

    /// The task's id, the runner's or made up by the server.
    public var id: String
    /// What the task is ("Nightly backup of db-3").
    public var name: String
    /// What is happening now ("Copying photos").
    public var label: String?
    /// The parent task; nil for a root (and for a parent outside the token's task prefix).
    public var parentID: String?
    /// This child's share of its parent.
    public var weight: Double
    public var state: State
    /// Units done so far.
    public var completed: Int64
    /// Nil while the task is indeterminate.
    public var total: Int64?
    /// What a unit is (`files`, `bytes`).
    public var unit: String?
    /// From 0 to 1; nil while indeterminate.
    public var fraction: Double?
    /// Units per second, smoothed by the server; nil when it cannot be known honestly.
    public var rate: Double?
    /// Seconds left at `rate`, as of the last report; nil whenever `rate` is.
    public var etaSeconds: Double?
    /// Whether the server flagged the running task stalled: no signal, or no progress, for too long.
    public var stalled: Bool
    /// `silent` or `no_progress` while stalled.
    public var stallReason: String?
    /// When the current stall began; nil while not stalled.
    public var stalledSince: Date?
    /// How long the task may go without a signal before it is flagged stalled.
    public var stallTimeoutSeconds: Double
    /// How long `completed` may stay still before the task is flagged stalled; nil for no limit.
    public var progressTimeoutSeconds: Double?
    /// Someone asked to cancel the task: its runner should stop and finish it `canceled`.
    public var cancelRequested: Bool
    /// The highest `seq` the server has applied.
    public var seq: Int64?
    /// When the task was registered.
    public var createdAt: Date
    /// When the task last changed.
    public var updatedAt: Date
    /// The last registration, progress or heartbeat of the task or of any descendant.
    public var lastSignalAt: Date?
    /// When `completed` last grew.
    public var lastProgressAt: Date?
    /// When the task finished; nil while it has not.
    public var finishedAt: Date?
    /// The outcome's detail (an error text).
    public var message: String?
    /// The last line of the task's output tail.
    public var lastOutput: String?
    /// A parent's children by state; nil for a task without children.
    public var children: ChildCounts?
    /// `failed` or `stalled` when a descendant needs a look; nil otherwise.
    public var attention: String?
    /// How long a run is expected to take, counted from its start; nil without the rule.
    public var expectedSeconds: Double?
    /// When it must have finished; nil without the rule.
    public var deadline: Date?
    /// The shortest run that counts as a real one; nil without the rule.
    public var minSeconds: Double?
    /// Past `expectedSeconds` or `deadline` unfinished (kept once it finishes late).
    public var overdue: Bool
    /// The moment it became due, when `overdue`.
    public var overdueSince: Date?
    /// Succeeded sooner than `minSeconds`.
    public var tooQuick: Bool

    enum CodingKeys: String, CodingKey {
        case id, name, label, weight, state, completed, total, unit, fraction, rate, stalled, seq, message, children, attention
        case deadline, overdue
        case expectedSeconds = "expected_seconds", minSeconds = "min_seconds", overdueSince = "overdue_since"
        case tooQuick = "too_quick"
        case parentID = "parent_id", etaSeconds = "eta_seconds", stallReason = "stall_reason", stalledSince = "stalled_since"
        case stallTimeoutSeconds = "stall_timeout_seconds", progressTimeoutSeconds = "progress_timeout_seconds"
        case cancelRequested = "cancel_requested", createdAt = "created_at", updatedAt = "updated_at"
        case lastSignalAt = "last_signal_at", lastProgressAt = "last_progress_at", finishedAt = "finished_at"
        case lastOutput = "last_output"
    }
}

/// How a task ends.
public enum TaskOutcome: String, Sendable, Codable {
    case succeeded, failed, canceled
}

/// What registering a task says about it (`POST /v1/tasks`). Registering is idempotent: the
/// same `id` with the same fields again is answered with the task as it is.
public struct TaskRegistration: Sendable, Equatable, Encodable {
    /// The runner's id for the task (1–128 of `A-Z a-z 0-9 . _ ~ : -`); nil lets the server make one up.
    public var id: String?
    /// What the task is ("Nightly backup of db-3"); not blank, at most 200 characters.
    public var name: String
    /// What is happening now; at most 500 characters.
    public var label: String?
    /// The parent task: it must exist and be unfinished.
    public var parentID: String?
    /// This child's share of its parent: among its siblings, or, under a parent with a
    /// `total`, how many units of it the child stands for.
    public var weight: Double?
    /// `.pending` for queued work (running at its first signal); running when nil.
    public var state: HeadwayTask.State?
    /// Units done already.
    public var completed: Int64?
    /// Nil for an indeterminate task.
    public var total: Int64?
    /// What a unit is (`files`, `bytes`).
    public var unit: String?
    /// Flag the task stalled after this long without a signal (the server's default when nil, 30 s).
    public var stallTimeoutSeconds: Double?
    /// Flag the task stalled when `completed` stays still this long (off when nil).
    public var progressTimeoutSeconds: Double?
    /// How long a run is expected to take from its start: past it unfinished, the task is
    /// flagged overdue.
    public var expectedSeconds: Double?
    /// When it must have finished: past it unfinished, the task is flagged overdue.
    public var deadline: Date?
    /// A success sooner than this after its start is flagged too quick.
    public var minSeconds: Double?

    /// A registration; only `name` is required.
    public init(id: String? = nil, name: String, label: String? = nil, parentID: String? = nil, weight: Double? = nil,
                state: HeadwayTask.State? = nil, completed: Int64? = nil, total: Int64? = nil, unit: String? = nil,
                stallTimeoutSeconds: Double? = nil, progressTimeoutSeconds: Double? = nil,
                expectedSeconds: Double? = nil, deadline: Date? = nil, minSeconds: Double? = nil) {
        self.id = id
        self.name = name
        self.label = label
        self.parentID = parentID
        self.weight = weight
        self.state = state
        self.completed = completed
        self.total = total
        self.unit = unit
        self.stallTimeoutSeconds = stallTimeoutSeconds
        self.progressTimeoutSeconds = progressTimeoutSeconds
        self.expectedSeconds = expectedSeconds
        self.deadline = deadline
        self.minSeconds = minSeconds
    }

    enum CodingKeys: String, CodingKey {
        case id, name, label, weight, state, completed, total, unit, deadline
        case parentID = "parent_id", stallTimeoutSeconds = "stall_timeout_seconds"
        case progressTimeoutSeconds = "progress_timeout_seconds"
        case expectedSeconds = "expected_seconds", minSeconds = "min_seconds"
    }
}

/// One progress report of a task (`POST /v1/tasks/{id}/progress`, or an item of
/// `POST /v1/progress`). Fields left nil are not changed.
public struct TaskUpdate: Sendable, Equatable, Encodable {
    /// The new absolute count; never below the task's. Not together with `increment`.
    public var completed: Int64?
    /// Added to the task's count.
    public var increment: Int64?
    /// A new total; never below `completed`.
    public var total: Int64?
    /// What a unit is.
    public var unit: String?
    /// What is happening now.
    public var label: String?
    /// The runner's number for this report: the server applies each number once, so a
    /// report sent again after a lost reply is not counted twice.
    public var seq: Int64?
    /// Lines the job printed since the last report (at most 100).
    public var output: [String]?

    /// An update; `completed` and `increment` are never both given.
    public init(completed: Int64? = nil, increment: Int64? = nil, total: Int64? = nil, unit: String? = nil,
                label: String? = nil, seq: Int64? = nil, output: [String]? = nil) {
        self.completed = completed
        self.increment = increment
        self.total = total
        self.unit = unit
        self.label = label
        self.seq = seq
        self.output = output
    }
}

/// What the server did with one item of a batch (`POST /v1/progress`): the task as it is
/// now, or the problem that refused the item alone.
public struct TaskUpdateResult: Sendable, Equatable {
    /// The item's task id, as sent.
    public var taskID: String
    /// The task after the update; nil when the item was refused.
    public var task: HeadwayTask?
    /// True when the item's `seq` had been applied already (acknowledged, not applied again).
    public var unchanged: Bool
    /// Why the item was refused; nil when it was applied.
    public var problem: HeadwayProblem?
}

/// Which tasks a listing returns (`GET /v1/tasks`), newest first.
public struct TaskFilter: Sendable, Equatable {
    /// Only tasks in these states (any state when empty).
    public var states: [HeadwayTask.State]
    /// Only stalled (true) or only not stalled (false) tasks; nil for both.
    public var stalled: Bool?
    /// Only the children of this task.
    public var parentID: String?
    /// Only tasks without a parent.
    public var rootsOnly: Bool
    /// Only tasks whose id starts with this.
    public var idPrefix: String?
    /// Tasks whose id or name holds this text, whatever its case.
    public var search: String?

    /// A filter; the defaults select every task.
    public init(states: [HeadwayTask.State] = [], stalled: Bool? = nil, parentID: String? = nil, rootsOnly: Bool = false,
                idPrefix: String? = nil, search: String? = nil) {
        self.states = states
        self.stalled = stalled
        self.parentID = parentID
        self.rootsOnly = rootsOnly
        self.idPrefix = idPrefix
        self.search = search
    }

    /// The query items, named as `openapi.yaml` names them.
    var queryItems: [(String, String)] {
        var items: [(String, String)] = states.map { ("state", $0.rawValue) }
        if let stalled { items.append(("stalled", stalled ? "true" : "false")) }
        if let parentID { items.append(("parent_id", parentID)) }
        if rootsOnly { items.append(("root", "true")) }
        if let idPrefix { items.append(("id_prefix", idPrefix)) }
        if let search { items.append(("q", search)) }
        return items
    }
}

/// One page of a listing.
public struct TaskListPage: Sendable, Equatable, Decodable {
    /// The page's tasks, newest first.
    public var tasks: [HeadwayTask]
    /// Pass to `HeadwayClient.tasks(_:pageSize:pageToken:)` for the next page; nil on the last.
    public var nextPageToken: String?
    /// How many tasks match the filter in all.
    public var totalSize: Int64

    enum CodingKeys: String, CodingKey {
        case tasks
        case nextPageToken = "next_page_token", totalSize = "total_size"
    }
}

/// JSON as headwayd writes and reads it: snake_case names spelled out in each type's
/// `CodingKeys`, RFC 3339 times with or without fractions of a second.
enum WireJSON {
    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = try? Date(text, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: true)) {
                return date
            }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an RFC 3339 time: \(text)"))
        }
        return decoder
    }

    static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date))
        }
        // The types encoded here hold strings, numbers, times and arrays only: encoding cannot fail.
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func decode<T: Decodable>(_ type: T.Type, from body: [UInt8], what: String) throws(HeadwayError) -> T {
        do {
            return try decoder().decode(type, from: Data(body))
        } catch {
            throw .invalidReply("the server's reply is not \(what): \(error)")
        }
    }
}
