/// `headway delete ID`: removes a task and its descendants for good.
public struct DeleteCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a task and its descendants",
        discussion: "Asks for confirmation on a terminal; elsewhere it needs --yes.",
        examples: ["headway delete 3f2a9c1e --yes"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    static let yes = Flag("yes", help: "Delete without asking")
    public static let arguments = [id.definition, yes.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        // Resolved before asking: the question names the task that will go.
        let id = try context.api.resolveID(values[Self.id])
        if !values[Self.yes] {
            guard context.isInteractive else {
                throw CLIError.usage(UsageError("delete needs --yes when not run from a terminal",
                                                commandPath: "headway delete"))
            }
            guard context.confirm("Delete task \(DisplayWidth.sanitize(id)) and all its descendants?") else {
                throw CLIError.notConfirmed("task \(id) not deleted")
            }
        }
        _ = try context.api.delete(TaskAPI.taskPath(id))
        if !context.options.json { context.print("deleted \(DisplayWidth.sanitize(id))") }
    }
}
