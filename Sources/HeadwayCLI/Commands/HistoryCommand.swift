/// `headway history ID`: the stored progress curve of a task, oldest point first.
public struct HistoryCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "history", abstract: "Print a task's progress curve, oldest point first",
        discussion: "One line per point: time, completed/total, fraction. With --json: the History object.",
        examples: ["headway history backup-db-3 --max-points 20"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    static let maxPoints = Option<Int64>("max-points", valueName: "n",
                                         help: "Downsample to at most this many points, 2 to 1000 (default 200)")
    public static let arguments = [id.definition, maxPoints.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let points = values[Self.maxPoints], !(2...1000).contains(points) {
            throw UsageError("--max-points must be between 2 and 1000, not \(points)")
        }
    }

    public func run(_ context: CommandContext) throws {
        let query = values[Self.maxPoints].map { "?max_points=\($0)" } ?? ""
        let reply = try context.api.withTaskID(values[Self.id]) { id throws(CLIError) in
            try context.api.get(TaskAPI.taskPath(id, "history") + query)
        }
        guard case .object(let history)? = reply.json, case .array? = history["points"] else {
            throw CLIError.unexpectedReply("the server's history is not a History object")
        }
        if context.options.json {
            context.print(reply.text)
            return
        }
        let lines = TaskDetails.historyLines(.object(history))
        if lines.isEmpty { context.print("no points") }
        for line in lines { context.print(line) }
    }
}
