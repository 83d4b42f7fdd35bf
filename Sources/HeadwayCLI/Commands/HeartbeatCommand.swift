import HeadwayCore

/// `headway heartbeat ID`: says a task is alive without reporting progress.
public struct HeartbeatCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "heartbeat", abstract: "Tell the server a task is still alive",
        discussion: "Exits 3 when someone asked to cancel the task.",
        examples: ["headway heartbeat \"$ID\" --label \"Waiting for the lock\""])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    static let label = Option<String>("label", valueName: "text", help: "What is happening now")
    public static let arguments = [id.definition, label.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        var body: JSONObject = [:]
        if let label = values[Self.label] { body["label"] = .string(label) }
        let id = values[Self.id]
        let reply = try context.api.withTaskID(id) { id throws(CLIError) in
            try context.api.post(TaskAPI.taskPath(id, "heartbeat"), body)
        }
        try context.finishRunnerCommand(reply, taskID: id)
    }
}
