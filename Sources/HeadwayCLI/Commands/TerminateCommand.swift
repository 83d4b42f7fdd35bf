/// `headway terminate ID`: ends a task whose runner died or ignores its cancel.
public struct TerminateCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "terminate", abstract: "Finish a task as canceled without its runner",
        discussion: """
        For a runner that died or ignores a cancel: the task and its unfinished descendants
        finish at once as canceled, with the message "terminated" (needs a control token).
        Prefer cancel, which lets the runner stop cleanly.
        """,
        examples: ["headway terminate 3f2a9c1e"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let id = values[Self.id]
        let reply = try context.api.withTaskID(id) { id throws(CLIError) in try context.api.post(TaskAPI.taskPath(id, "terminate")) }
        context.print(context.options.json ? reply.text : "terminated \(DisplayWidth.sanitize(reply.string("id") ?? id))")
    }
}
