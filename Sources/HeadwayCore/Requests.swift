/// What a runner sends to register a task (`POST /v1/tasks`).
public struct Registration: Equatable, Sendable {
    public var id: String?
    public var name: String
    public var label: String?
    public var parentID: String?
    public var weight: Double
    public var state: TaskState
    public var completed: Int64
    public var total: Int64?
    public var unit: String?
    public var stallTimeoutSeconds: Double?
    public var progressTimeoutSeconds: Double?
    /// How long the task is expected to run, from its start (`expected_seconds`, `RunTimeRule`).
    public var expectedSeconds: Double?
    /// When the task should have finished (`deadline`), in milliseconds since the epoch.
    public var deadline: EpochMilliseconds?
    /// The shortest run that is believable: a success sooner is flagged (`min_seconds`).
    public var minSeconds: Double?
    /// Canonical JSON text of the metadata object.
    public var metadata: String?

    public init(id: String? = nil, name: String, label: String? = nil, parentID: String? = nil, weight: Double = 1,
                state: TaskState = .running, completed: Int64 = 0, total: Int64? = nil, unit: String? = nil,
                stallTimeoutSeconds: Double? = nil, progressTimeoutSeconds: Double? = nil,
                expectedSeconds: Double? = nil, deadline: EpochMilliseconds? = nil, minSeconds: Double? = nil,
                metadata: String? = nil) {
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
        self.metadata = metadata
    }

    /// Reads a registration body.
    public static func parse(_ body: JSONValue) throws(TaskError) -> Registration {
        var reader = FieldReader(body, allowed: [
            "id", "name", "label", "parent_id", "weight", "state", "completed", "total", "unit",
            "stall_timeout_seconds", "progress_timeout_seconds", "expected_seconds", "deadline", "min_seconds", "metadata",
        ])
        let id = reader.id("id")
        let name = reader.string("name", maxLength: Limits.nameLength, required: true)
        let label = reader.string("label", maxLength: Limits.labelLength)
        let parentID = reader.id("parent_id")
        let weight = reader.number("weight", in: Limits.weight)
        let state = reader.choice("state", of: [TaskState.pending, .running])
        let completed = reader.integer("completed")
        let total = reader.integer("total")
        let unit = reader.string("unit", maxLength: Limits.unitLength)
        let stallTimeout = reader.number("stall_timeout_seconds", in: Limits.timeoutSeconds)
        let progressTimeout = reader.number("progress_timeout_seconds", in: Limits.timeoutSeconds)
        let expected = reader.number("expected_seconds", in: Limits.runTimeSeconds)
        let deadline = reader.timestamp("deadline")
        let minimum = reader.number("min_seconds", in: Limits.runTimeSeconds)
        let metadata = reader.object("metadata", maxBytes: Limits.metadataBytes)
        var errors = reader.errors
        // A run could then never be both long enough and on time.
        if let expected, let minimum, minimum >= expected {
            errors.append(FieldError(field: "min_seconds", message: "must be below expected_seconds"))
        }
        guard errors.isEmpty, let name else { throw .invalidRequest(errors) }
        return Registration(id: id, name: name, label: label, parentID: parentID, weight: weight ?? 1,
                            state: state ?? .running, completed: completed ?? 0, total: total, unit: unit,
                            stallTimeoutSeconds: stallTimeout, progressTimeoutSeconds: progressTimeout,
                            expectedSeconds: expected, deadline: deadline, minSeconds: minimum, metadata: metadata)
    }

    /// The registration without its id, defaults filled in, as canonical JSON: two bodies
    /// that mean the same give the same text.
    public var definition: String {
        var members: JSONObject = [
            "name": .string(name), "weight": .number(weight), "state": .string(state.rawValue),
            "completed": .integer(completed),
        ]
        if let label { members["label"] = .string(label) }
        if let parentID { members["parent_id"] = .string(parentID) }
        if let total { members["total"] = .integer(total) }
        if let unit { members["unit"] = .string(unit) }
        if let stallTimeoutSeconds { members["stall_timeout_seconds"] = .number(stallTimeoutSeconds) }
        if let progressTimeoutSeconds { members["progress_timeout_seconds"] = .number(progressTimeoutSeconds) }
        if let expectedSeconds { members["expected_seconds"] = .number(expectedSeconds) }
        // The instant, not the text: the same moment written with another offset is the same task.
        if let deadline { members["deadline"] = .string(Timestamp.rfc3339(deadline)) }
        if let minSeconds { members["min_seconds"] = .number(minSeconds) }
        if let metadata { members["metadata"] = JSONValue.parse(Array(metadata.utf8)) }
        return JSONValue.object(members).canonicalText
    }
}

/// A progress report (`POST /v1/tasks/{id}/progress`).
public struct ProgressUpdate: Equatable, Sendable {
    public var completed: Int64?
    public var increment: Int64?
    public var total: Int64?
    public var unit: String?
    public var label: String?
    /// The runner's own number for this update (`seq` in the API): an update whose number
    /// is not above the last one applied is a retry, acknowledged and not applied again.
    public var runnerSeq: Int64?
    /// Lines the runner's command printed, appended to the task's output tail (`OutputTail`).
    public var output: [String]

    public init(completed: Int64? = nil, increment: Int64? = nil, total: Int64? = nil, unit: String? = nil,
                label: String? = nil, runnerSeq: Int64? = nil, output: [String] = []) {
        self.completed = completed
        self.increment = increment
        self.total = total
        self.unit = unit
        self.label = label
        self.runnerSeq = runnerSeq
        self.output = output
    }

    /// The members of a progress body.
    static let fields = ["completed", "increment", "total", "unit", "label", "seq", "output"]

    /// Reads a progress body.
    public static func parse(_ body: JSONValue) throws(TaskError) -> ProgressUpdate {
        var reader = FieldReader(body, allowed: fields)
        let update = read(&reader)
        guard reader.errors.isEmpty else { throw .invalidRequest(reader.errors) }
        return update
    }

    /// The update's fields as `reader` finds them (its errors say what was wrong).
    static func read(_ reader: inout FieldReader) -> ProgressUpdate {
        ProgressUpdate(
            completed: reader.integer("completed"), increment: reader.integer("increment"),
            total: reader.integer("total"), unit: reader.string("unit", maxLength: Limits.unitLength),
            label: reader.string("label", maxLength: Limits.labelLength), runnerSeq: reader.integer("seq"),
            output: reader.output())
    }
}

/// One item of a batch of progress reports: the task's id (`task_id`) and the fields of
/// its report.
public struct ProgressItem: Equatable, Sendable {
    public var id: String
    public var update: ProgressUpdate

    public init(id: String, update: ProgressUpdate) {
        self.id = id
        self.update = update
    }

    /// The members an item may have.
    static let fields = ProgressUpdate.fields + ["task_id"]

    /// Reads an item: a JSON object with `task_id` and the members of a progress body.
    public static func parse(_ item: JSONValue) throws(TaskError) -> ProgressItem {
        guard case .object = item else {
            throw .invalidRequest([FieldError(field: "(item)", message: "must be a JSON object, not \(item.typeName)")])
        }
        var reader = FieldReader(item, allowed: Self.fields)
        let id = reader.id("task_id", required: true)
        let update = ProgressUpdate.read(&reader)
        guard reader.errors.isEmpty, let id else { throw .invalidRequest(reader.errors) }
        return ProgressItem(id: id, update: update)
    }
}

/// Many progress reports in one request (`POST /v1/progress`): `{"updates": [item, …]}`.
/// The batch is refused whole only when it is not one (not an object, `updates` missing
/// or not an array, more items than allowed); an item that cannot be read is refused
/// alone, in its place.
public struct ProgressBatch: Sendable {
    /// At most this many items in one request unless configured otherwise
    /// (`--max-batch-items`; 413 `too_many_items` past it).
    public static let defaultMaximumItems = 1_000

    /// One item in the order sent: what it says, or why it cannot be read; with the
    /// `task_id` it names, if that is a string.
    public struct Item: Sendable {
        public var taskID: String?
        public var parsed: Result<ProgressItem, TaskError>
    }

    public var items: [Item]

    public init(items: [Item]) { self.items = items }

    /// Reads a batch body of at most `maximumItems` items.
    public static func parse(_ body: JSONValue, maximumItems: Int = defaultMaximumItems) throws(TaskError) -> ProgressBatch {
        var reader = FieldReader(body, allowed: ["updates"])
        guard case .object = body else { throw .invalidRequest(reader.errors) }
        let updates = reader.array("updates", required: true)
        guard reader.errors.isEmpty, let updates else { throw .invalidRequest(reader.errors) }
        guard updates.count <= maximumItems else { throw .tooManyItems(count: updates.count, maximum: maximumItems) }
        return ProgressBatch(items: updates.map { item in
            var taskID: String?
            if case .object(let members) = item, case .string(let id)? = members["task_id"] { taskID = id }
            return Item(taskID: taskID, parsed: Result { () throws(TaskError) -> ProgressItem in try ProgressItem.parse(item) })
        })
    }
}

/// A sign of life without progress (`POST /v1/tasks/{id}/heartbeat`).
public struct Heartbeat: Equatable, Sendable {
    public var label: String?
    /// The runner's own number for this heartbeat (`seq` in the API; see `ProgressUpdate`).
    public var runnerSeq: Int64?
    /// Lines for the task's output tail (see `ProgressUpdate.output`).
    public var output: [String]

    public init(label: String? = nil, runnerSeq: Int64? = nil, output: [String] = []) {
        self.label = label
        self.runnerSeq = runnerSeq
        self.output = output
    }

    /// Reads a heartbeat body (an empty body is an empty heartbeat).
    public static func parse(_ body: JSONValue) throws(TaskError) -> Heartbeat {
        var reader = FieldReader(body, allowed: ["label", "seq", "output"])
        let heartbeat = Heartbeat(label: reader.string("label", maxLength: Limits.labelLength),
                                  runnerSeq: reader.integer("seq"), output: reader.output())
        guard reader.errors.isEmpty else { throw .invalidRequest(reader.errors) }
        return heartbeat
    }
}

/// The end of a task (`POST /v1/tasks/{id}/finish`).
public struct Finish: Equatable, Sendable {
    public var outcome: TaskState
    public var message: String?
    /// The last lines for the task's output tail (see `ProgressUpdate.output`).
    public var output: [String]

    public init(outcome: TaskState, message: String? = nil, output: [String] = []) {
        self.outcome = outcome
        self.message = message
        self.output = output
    }

    /// Reads a finish body.
    public static func parse(_ body: JSONValue) throws(TaskError) -> Finish {
        var reader = FieldReader(body, allowed: ["outcome", "message", "output"])
        let outcome = reader.choice("outcome", of: [TaskState.succeeded, .failed, .canceled], required: true)
        let message = reader.string("message", maxLength: Limits.messageLength)
        let output = reader.output()
        guard reader.errors.isEmpty, let outcome else { throw .invalidRequest(reader.errors) }
        return Finish(outcome: outcome, message: message, output: output)
    }
}

extension FieldReader {
    /// The `output` member of a progress, heartbeat or finish body (empty when absent).
    mutating func output() -> [String] {
        lines("output", maxCount: OutputTail.maximumLinesPerRequest, maxLength: OutputTail.maximumLineLength) ?? []
    }
}
