import HeadwayCore

/// `headway show ID`: every field of a task, its children with their weights, and its
/// recent progress as a sparkline.
public struct ShowCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Show a task: its fields, children, output tail and progress curve",
        discussion: "Times are local, with their age (3 min ago). With --json: the task object as the\nserver sends it.",
        examples: ["headway show backup-db-3", "headway show 3f2a9c1e --json"])
    static let id = Argument<String>("id", help: "The task's id (or the start of a generated one)")
    public static let arguments = [id.definition]

    /// The most children listed; more are counted, and `headway tasks --parent` lists them.
    static let childLimit: Int64 = 100
    /// The most history points drawn in the sparkline.
    static let sparklineWidth = 40

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let (id, reply) = try context.api.withTaskID(values[Self.id]) { id throws(CLIError) in
            (id, try context.api.get(TaskAPI.taskPath(id)))
        }
        if context.options.json {
            context.print(reply.text)
            return
        }
        guard let task = reply.json else { throw CLIError.unexpectedReply("the server's task is not JSON") }
        for line in TaskDetails.fieldLines(task, now: SystemClock().now()) { context.print(line) }

        let children = try context.api.listPage(TaskListQuery(parentID: id, pageSize: Self.childLimit))
        if !children.tasks.isEmpty {
            context.print("")
            context.print("Children (\(Formatting.count(children.totalSize))):")
            for line in TaskDetails.childLines(children.tasks.compactMap(TaskView.init(json:))) { context.print(line) }
            if children.remaining > 0 {
                context.print("  \(Formatting.count(children.remaining)) more; headway tasks --parent \(DisplayWidth.sanitize(id)) --all lists them")
            }
        }

        let output = try outputTail(context, id: id, task: task)
        context.print("")
        context.print(output.isEmpty ? "Output: none" : "Output (last \(output.count) line\(output.count == 1 ? "" : "s")):")
        for line in output { context.print(line) }

        let history = try context.api.get(TaskAPI.taskPath(id, "history") + "?max_points=\(Self.sparklineWidth)")
        let curve = history.json.map { Sparkline.render(history: $0, maxWidth: Self.sparklineWidth) } ?? ""
        let count = history.json.map(TaskDetails.pointCount) ?? 0
        context.print("")
        context.print(curve.isEmpty ? "History: no points" : "History: \(curve)  (\(count) point\(count == 1 ? "" : "s"))")
    }

    /// The task's output tail (`GET /v1/tasks/{id}/output`); from a server without that
    /// route, the task's `last_output`, else nothing.
    func outputTail(_ context: CommandContext, id: String, task: JSONValue) throws(CLIError) -> [String] {
        do {
            let reply = try context.api.get(TaskAPI.taskPath(id, "output"))
            return reply.json.map { TaskDetails.outputLines($0) } ?? []
        } catch {
            switch error {
            case .refused(_, _, "not_found"), .refused(_, _, "route_not_found"), .unexpectedReply: break
            default: throw error
            }
            if case .object(let fields) = task, case .string(let line)? = fields["last_output"] {
                return ["  " + DisplayWidth.sanitize(line)]
            }
            return []
        }
    }
}
