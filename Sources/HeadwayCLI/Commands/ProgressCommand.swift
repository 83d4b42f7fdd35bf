import HeadwayCore

/// `headway progress ID`: reports how far a quantified task has come.
public struct ProgressCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "progress", abstract: "Report a task's progress",
        discussion: "Give exactly one of --completed and --increment. Exits 3 when someone asked to\ncancel the task: the script should stop and finish it as canceled.",
        usage: "<id> (--completed <n> | --increment <n>) [--total <n>] [--label <text>] [--seq <n>]",
        examples: ["headway progress \"$ID\" --completed 768 --label \"Copying IMG_0420.jpg\"", "headway progress \"$ID\" --increment 1"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    static let completed = Option<Int64>("completed", valueName: "n", help: "How much is done in all")
    static let increment = Option<Int64>("increment", valueName: "n", help: "How much more is done since the last report")
    static let total = Option<Int64>("total", valueName: "n", help: "A new amount of work")
    static let label = Option<String>("label", valueName: "text", help: "What is happening now")
    static let seq = Option<Int64>("seq", valueName: "n", help: "A sequence number: a retry with an old one is not applied twice")
    public static let arguments = [id.definition, completed.definition, increment.definition, total.definition,
                                   label.definition, seq.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        switch (values[Self.completed], values[Self.increment]) {
        case (nil, nil): throw UsageError("progress needs --completed or --increment")
        case (.some, .some): throw UsageError("--completed and --increment cannot be given together")
        default: break
        }
    }

    public func run(_ context: CommandContext) throws {
        var body: JSONObject = [:]
        if let completed = values[Self.completed] { body["completed"] = .integer(completed) }
        if let increment = values[Self.increment] { body["increment"] = .integer(increment) }
        if let total = values[Self.total] { body["total"] = .integer(total) }
        if let label = values[Self.label] { body["label"] = .string(label) }
        if let seq = values[Self.seq] { body["seq"] = .integer(seq) }
        let id = values[Self.id]
        let reply = try context.api.withTaskID(id) { id throws(CLIError) in
            try context.api.post(TaskAPI.taskPath(id, "progress"), body)
        }
        try context.finishRunnerCommand(reply, taskID: id)
    }
}
