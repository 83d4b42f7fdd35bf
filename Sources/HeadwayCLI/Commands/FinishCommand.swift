import ArgumentParsing
import HeadwayCore

/// `headway finish ID --outcome …`: ends a task.
public struct FinishCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "finish", abstract: "Finish a task with its outcome",
        discussion: "Exits 3 when the task had been asked to cancel.",
        examples: ["headway finish \"$ID\" --outcome failed --message \"disk full\""])
    static let outcomes = ["succeeded", "failed", "canceled"]
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    static let outcome = Option<String>("outcome", valueName: "outcome", help: "succeeded, failed or canceled", required: true)
    static let message = Option<String>("message", valueName: "text", help: "A last word for people (why it failed)")
    public static let arguments = [id.definition, outcome.definition, message.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let outcome = values[Self.outcome], !Self.outcomes.contains(outcome) {
            throw UsageError("--outcome must be succeeded, failed or canceled, not '\(outcome)'"
                             + Suggestion.didYouMean(outcome, among: Self.outcomes))
        }
    }

    public func run(_ context: CommandContext) throws {
        var body: JSONObject = ["outcome": .string(values[Self.outcome] ?? "")]
        if let message = values[Self.message] { body["message"] = .string(message) }
        let id = values[Self.id]
        let reply = try context.api.withTaskID(id) { id throws(CLIError) in
            try context.api.post(TaskAPI.taskPath(id, "finish"), body)
        }
        try context.finishRunnerCommand(reply, taskID: id)
    }
}
