/// `headway cancel ID`: asks a task and its descendants to stop.
public struct CancelCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "cancel", abstract: "Ask a task and its descendants to stop",
        discussion: "The runners see the request in their next reply and finish as canceled.",
        examples: ["headway cancel backup-db-3"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let id = values[Self.id]
        let reply = try context.api.withTaskID(id) { id throws(CLIError) in try context.api.post(TaskAPI.taskPath(id, "cancel")) }
        context.print(context.options.json ? reply.text : "cancel requested for \(DisplayWidth.sanitize(reply.string("id") ?? id))")
    }
}
