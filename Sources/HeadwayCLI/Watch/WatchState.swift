import HeadwayClient
import HeadwayCore

/// What `headway watch` knows, built from the event stream alone: the tasks in the order
/// they first appeared, their spinner frame counters, and whether every watched task has
/// finished. Pure: no I/O, no clock.
public struct WatchState: Sendable {
    /// The tasks by id, and their order of first appearance.
    public private(set) var tasks: [String: TaskView] = [:]
    public private(set) var order: [String] = []
    /// Spinner frame counters: one step each time that task signals (created, updated,
    /// recovered), so an indeterminate glyph moves only while its task is alive.
    public private(set) var frames: [String: Int] = [:]
    /// The ids named on the command line: `--until-done` waits for each of them.
    public let awaited: Set<String>
    /// Named tasks that had finished before the watch began, as read then: a snapshot
    /// holds only tasks finished in the last minute, so these are kept beside it.
    public private(set) var finishedBefore: [String: TaskView] = [:]
    /// Named tasks deleted while watched: `--until-done` can never see them finish.
    public private(set) var deletedAwaited: [String] = []

    public init(awaited: Set<String> = [], finishedBefore: [TaskView] = []) {
        self.awaited = awaited
        for task in finishedBefore where task.state.isFinished {
            self.finishedBefore[task.id] = task
            _ = upsert(task, signal: false)
        }
    }

    /// Applies one event; returns the tasks it changed (for plain output), in order.
    @discardableResult
    package mutating func apply(_ event: SSEParser.Event) -> [TaskView] {
        guard let json = JSONValue.parse(Array(event.data.utf8)) else { return [] }
        if event.name == "snapshot" {
            guard case .object(let object) = json, case .array(let items)? = object["tasks"] else { return [] }
            // A snapshot replaces what was known: it is the whole matching set now.
            tasks = [:]
            order = []
            var changed = items.compactMap(TaskView.init(json:)).map { upsert($0, signal: false) }
            for (id, task) in finishedBefore.sorted(by: { $0.key < $1.key }) where tasks[id] == nil {
                changed.append(upsert(task, signal: false))
            }
            return changed
        }
        if event.name == "task.deleted" {
            guard case .object(let object) = json, case .string(let id)? = object["id"] else { return [] }
            tasks[id] = nil
            finishedBefore[id] = nil
            order.removeAll { $0 == id }
            if awaited.contains(id) && !deletedAwaited.contains(id) { deletedAwaited.append(id) }
            return []
        }
        guard let task = TaskView(json: json) else { return [] }
        let signal = ["task.created", "task.updated", "task.recovered"].contains(event.name)
        return [upsert(task, signal: signal)]
    }

    private mutating func upsert(_ task: TaskView, signal: Bool) -> TaskView {
        if tasks[task.id] == nil { order.append(task.id) }
        tasks[task.id] = task
        if signal { frames[task.id, default: 0] += 1 }
        return task
    }

    /// The tasks in order.
    public var ordered: [TaskView] { order.compactMap { tasks[$0] } }

    /// How a finished watch ends: nil while a watched task is unfinished (or none was seen,
    /// or a named one has not appeared); else 0 when all succeeded, 4 when one failed,
    /// 5 when one was canceled and none failed.
    public var finishedStatus: Int32? {
        let all = ordered
        guard !all.isEmpty, all.allSatisfy({ $0.state.isFinished }),
              awaited.allSatisfy({ tasks[$0] != nil }) else { return nil }
        if all.contains(where: { $0.state == .failed }) { return 4 }
        if all.contains(where: { $0.state == .canceled }) { return 5 }
        return 0
    }

    /// Where a task stands in the frame: what went wrong first (failed, stalled or overdue,
    /// or a parent with such a descendant), then the unfinished, then the rest.
    static func rank(_ task: TaskView) -> Int {
        if task.state == .failed { return 0 }
        if task.state.isFinished { return 2 }
        return task.stalled || task.overdue || task.attention != nil ? 0 : 1
    }

    /// The tasks to draw in `rows` table lines (at least one): failed and stalled tasks
    /// first, then the unfinished, then the other finished ones, each in order of
    /// appearance; those that do not fit are left out and counted by state.
    public static func fit(_ tasks: [TaskView], rows: Int) -> (shown: [TaskView], hidden: [(state: String, count: Int)]) {
        let rows = max(1, rows)
        let ordered = tasks.indices.sorted { (rank(tasks[$0]), $0) < (rank(tasks[$1]), $1) }.map { tasks[$0] }
        guard ordered.count > rows else { return (ordered, []) }
        var counts: [String: Int] = [:]
        for task in ordered.dropFirst(rows) {
            counts[task.stalled && !task.state.isFinished ? "stalled" : task.state.text, default: 0] += 1
        }
        let order = ["stalled", "failed", "running", "pending", "succeeded", "canceled"]
        let hidden = counts.sorted { (order.firstIndex(of: $0.key) ?? order.count, $0.key) < (order.firstIndex(of: $1.key) ?? order.count, $1.key) }
            .map { (state: $0.key, count: $0.value) }
        return (Array(ordered.prefix(rows)), hidden)
    }

    /// The line that counts what `fit` left out: `… 119 more: 110 running, 9 succeeded`.
    public static func hiddenLine(_ hidden: [(state: String, count: Int)]) -> String {
        let total = hidden.reduce(0) { $0 + $1.count }
        return "… \(Formatting.count(Int64(total))) more: "
            + hidden.map { "\(Formatting.count(Int64($0.count))) \($0.state)" }.joined(separator: ", ")
    }
}
