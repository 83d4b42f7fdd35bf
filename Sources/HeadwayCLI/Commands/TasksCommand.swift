import ArgumentParsing
import Foundation
import HeadwayCore

/// `headway tasks`: the tasks as a table that fits the terminal, newest first.
public struct TasksCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "tasks", abstract: "List tasks as a table, newest first",
        discussion: """
        The table fits the terminal (COLUMNS when not a terminal); colors only on a terminal
        and never with NO_COLOR. Without --all a last line says how many more tasks match.
        With --json: one task object per line.
        """,
        usage: "[--state <state>]… [--stalled] [--overdue] [--parent <id>] [--root] [--page-size <n>] [--all]",
        examples: ["headway tasks --state running --state pending", "headway tasks --parent release-42 --all"])
    static let states = ["pending", "running", "succeeded", "failed", "canceled"]
    static let state = Option<String>("state", valueName: "state",
                                      help: "Only tasks in this state (repeat for several)")
    static let stalled = Flag("stalled", help: "Only stalled tasks")
    static let overdue = Flag("overdue", help: "Only tasks flagged overdue (finished late ones too)")
    static let parent = Option<String>("parent", valueName: "id", help: "Only children of this task")
    static let root = Flag("root", help: "Only tasks without a parent")
    static let pageSize = Option<Int64>("page-size", valueName: "n", help: "Tasks per page, 1 to 500 (default 50)")
    static let all = Flag("all", help: "Follow every page instead of the first")
    public static let arguments = [state.definition, stalled.definition, overdue.definition, parent.definition, root.definition,
                                   pageSize.definition, all.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let bad = values.all(Self.state).first(where: { !Self.states.contains($0) }) {
            throw UsageError("--state must be pending, running, succeeded, failed or canceled, not '\(bad)'"
                             + Suggestion.didYouMean(bad, among: Self.states))
        }
        if let size = values[Self.pageSize], !(1...500).contains(size) {
            throw UsageError("--page-size must be between 1 and 500, not \(size)")
        }
    }

    /// The list API's query for these options, with the parent's id as resolved.
    func query(parentID: String?) -> TaskListQuery {
        TaskListQuery(states: values.all(Self.state), stalled: values[Self.stalled] ? true : nil,
                      parentID: parentID, root: values[Self.root], pageSize: values[Self.pageSize],
                      overdue: values[Self.overdue])
    }

    public func run(_ context: CommandContext) throws {
        let query = query(parentID: try values[Self.parent].map { parent throws(CLIError) in
            try context.api.resolveIfShortened(parent)
        })
        if context.options.json && values[Self.all] {
            // Printed page by page: memory stays that of one page however many there are.
            try context.api.forEachPage(query) { page throws(CLIError) in
                for task in page.tasks { context.print(task.canonicalText) }
            }
            return
        }
        let page = values[Self.all] ? try context.api.listAll(query) : try context.api.listPage(query)
        let more = page.nextPageToken == nil ? nil
            : "\(Formatting.count(page.remaining)) more task\(page.remaining == 1 ? "" : "s"); --all lists them"
        if context.options.json {
            for task in page.tasks { context.print(task.canonicalText) }
            // Not on stdout, where every line is a task.
            if let more { StandardStreams.error("headway: " + more + "\n") }
            return
        }
        let environment = ProcessInfo.processInfo.environment
        let views = page.tasks.compactMap(TaskView.init(json:))
        if views.isEmpty {
            context.print("no tasks")
        } else {
            let table = TaskTable(tasks: views, now: SystemClock().now())
            let lines = table.render(width: TerminalSize.columns(environment: environment),
                                     color: Style.useColor(isTTY: isatty(STDOUT_FILENO) == 1, environment: environment))
            for line in lines { context.print(line) }
        }
        if let more {
            context.print(DisplayWidth.truncate(more, to: TerminalSize.columns(environment: environment)))
        }
    }
}
