import HeadwayCore

/// `headway start NAME`: registers a task and prints its id alone.
public struct StartCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "start", abstract: "Register a task and print its id",
        discussion: "Prints the task's id and nothing else, for ID=$(headway start …). Registering\nthe same --id again with the same options is safe.",
        examples: ["ID=$(headway start \"Nightly backup of db-3\" --total 1200 --unit files)", "headway start \"Queued export\" --pending --label \"Waiting for a worker\" --metadata '{\"host\":\"db-3\"}'"])
    static let name = Argument<String>("name", help: "What the task does, for people")
    static let id = Option<String>("id", valueName: "id", help: "The task's id (default: chosen by the server)")
    static let label = Option<String>("label", valueName: "text", help: "What is happening now")
    static let total = Option<Int64>("total", valueName: "n", help: "The amount of work: makes the task quantified")
    static let completed = Option<Int64>("completed", valueName: "n", help: "How much is already done (default 0)")
    static let unit = Option<String>("unit", valueName: "unit", help: "What --total counts (files, bytes…)")
    static let parent = Option<String>("parent", valueName: "id", help: "Register it as a child of this task")
    static let weight = Option<Double>("weight", valueName: "w", help: "Its share of the parent's progress (default 1)")
    static let pending = Flag("pending", help: "Queued work: pending until its first progress or heartbeat")
    static let stallTimeout = Option<Double>("stall-timeout", valueName: "seconds",
                                             help: "Flag it stalled after this long without a signal")
    static let progressTimeout = Option<Double>("progress-timeout", valueName: "seconds",
                                                help: "Flag it stalled when its count has not grown for this long")
    static let expected = Option<Double>("expected", valueName: "seconds",
                                         help: "Flag it overdue when it runs longer than this from its start")
    static let deadline = Option<String>("deadline", valueName: "time",
                                         help: "Flag it overdue when unfinished at this RFC 3339 time")
    static let minimum = Option<Double>("min", valueName: "seconds",
                                        help: "Flag a success sooner than this after its start as too quick")
    static let metadata = Option<String>("metadata", valueName: "json",
                                         help: "A JSON object kept with the task (at most 4 KiB)")
    public static let arguments = [name.definition, id.definition, label.definition, total.definition,
                                   completed.definition, unit.definition, parent.definition, weight.definition,
                                   pending.definition, stallTimeout.definition, progressTimeout.definition,
                                   expected.definition, deadline.definition, minimum.definition, metadata.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if values[Self.unit] != nil && values[Self.total] == nil { throw UsageError("--unit needs --total") }
        if let text = values[Self.deadline], Timestamp.parseRFC3339(text) == nil {
            throw UsageError("--deadline must be an RFC 3339 time such as 2026-12-05T09:30:00Z, not '\(text)'")
        }
        if let text = values[Self.metadata] {
            guard case .object? = JSONValue.parse(Array(text.utf8)) else {
                throw UsageError("--metadata must be a JSON object, not '\(text)'")
            }
        }
    }

    public func run(_ context: CommandContext) throws {
        var body: JSONObject = ["name": .string(values[Self.name])]
        if let id = values[Self.id] { body["id"] = .string(id) }
        if let label = values[Self.label] { body["label"] = .string(label) }
        if let total = values[Self.total] { body["total"] = .integer(total) }
        if let completed = values[Self.completed] { body["completed"] = .integer(completed) }
        if let unit = values[Self.unit] { body["unit"] = .string(unit) }
        if let parent = values[Self.parent] { body["parent_id"] = .string(try context.api.resolveIfShortened(parent)) }
        if let weight = values[Self.weight] { body["weight"] = .number(weight) }
        if values[Self.pending] { body["state"] = .string("pending") }
        if let timeout = values[Self.stallTimeout] { body["stall_timeout_seconds"] = .number(timeout) }
        if let timeout = values[Self.progressTimeout] { body["progress_timeout_seconds"] = .number(timeout) }
        if let seconds = values[Self.expected] { body["expected_seconds"] = .number(seconds) }
        if let deadline = values[Self.deadline] { body["deadline"] = .string(deadline) }
        if let seconds = values[Self.minimum] { body["min_seconds"] = .number(seconds) }
        if let text = values[Self.metadata], let metadata = JSONValue.parse(Array(text.utf8)) { body["metadata"] = metadata }
        let reply = try context.api.post("/v1/tasks", body)
        guard let id = reply.string("id") else {
            throw CLIError.unexpectedReply("the server's reply to the registration holds no task id")
        }
        context.print(context.options.json ? reply.text : DisplayWidth.sanitize(id))
    }
}
