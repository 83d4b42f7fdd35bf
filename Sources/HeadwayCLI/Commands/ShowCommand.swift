import HeadwayCore

/// `headway show ID`: every field of a task, its children with their weights, and its
/// recent progress as a sparkline.
public struct ShowCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Show every field of a task, its children and its progress curve",
        discussion: "With --json: the task object as the server sends it.")
    static let id = Argument<String>("id", help: "The task's id")
    public static let arguments = [id.definition]

    /// The most children listed; more are counted, and `headway tasks --parent` lists them.
    static let childLimit: Int64 = 100
    /// The most history points drawn in the sparkline.
    static let sparklineWidth = 40

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let id = values[Self.id]
        let reply = try context.api.get(TaskAPI.taskPath(id))
        if context.options.json {
            context.print(reply.text)
            return
        }
        guard let task = reply.json else { throw CLIError.unexpectedReply("the server's task is not JSON") }
        for line in TaskDetails.fieldLines(task) { context.print(line) }

        let children = try context.api.listPage(TaskListQuery(parentID: id, pageSize: Self.childLimit))
        if children.tasks.isEmpty {
            context.print("children: none")
        } else {
            context.print("children: \(Formatting.count(children.totalSize))")
            for line in TaskDetails.childLines(children.tasks.compactMap(TaskView.init(json:))) { context.print(line) }
            if children.remaining > 0 {
                context.print("  \(Formatting.count(children.remaining)) more; headway tasks --parent \(DisplayWidth.sanitize(id)) --all lists them")
            }
        }

        let history = try context.api.get(TaskAPI.taskPath(id, "history") + "?max_points=\(Self.sparklineWidth)")
        let curve = history.json.map { Sparkline.render(history: $0, maxWidth: Self.sparklineWidth) } ?? ""
        let count = history.json.map(TaskDetails.pointCount) ?? 0
        context.print(curve.isEmpty ? "history: no points" : "history: \(curve)  (\(count) point\(count == 1 ? "" : "s"))")
    }
}
