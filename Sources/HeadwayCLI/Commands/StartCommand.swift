import HeadwayCore

/// `headway start NAME`: registers a task and prints its id alone.
public struct StartCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "start", abstract: "Register a task and print its id",
        discussion: "Prints the task's id and nothing else, for ID=$(headway start …). Registering\nthe same --id again with the same options is safe.")
    static let name = Argument<String>("name", help: "What the task does, for people")
    static let id = Option<String>("id", valueName: "id", help: "The task's id (default: chosen by the server)")
    static let total = Option<Int64>("total", valueName: "n", help: "The amount of work: makes the task quantified")
    static let unit = Option<String>("unit", valueName: "unit", help: "What --total counts (files, bytes…)")
    static let parent = Option<String>("parent", valueName: "id", help: "Register it as a child of this task")
    static let weight = Option<Double>("weight", valueName: "w", help: "Its share of the parent's progress (default 1)")
    static let stallTimeout = Option<Double>("stall-timeout", valueName: "seconds",
                                             help: "Flag it stalled after this long without a signal")
    public static let arguments = [name.definition, id.definition, total.definition, unit.definition,
                                   parent.definition, weight.definition, stallTimeout.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if values[Self.unit] != nil && values[Self.total] == nil { throw UsageError("--unit needs --total") }
    }

    public func run(_ context: CommandContext) throws {
        var body: JSONObject = ["name": .string(values[Self.name])]
        if let id = values[Self.id] { body["id"] = .string(id) }
        if let total = values[Self.total] { body["total"] = .integer(total) }
        if let unit = values[Self.unit] { body["unit"] = .string(unit) }
        if let parent = values[Self.parent] { body["parent_id"] = .string(parent) }
        if let weight = values[Self.weight] { body["weight"] = .number(weight) }
        if let timeout = values[Self.stallTimeout] { body["stall_timeout_seconds"] = .number(timeout) }
        let reply = try context.api.post("/v1/tasks", body)
        guard let id = reply.string("id") else {
            throw CLIError.unexpectedReply("the server's reply to the registration holds no task id")
        }
        context.print(context.options.json ? reply.text : DisplayWidth.sanitize(id))
    }
}
