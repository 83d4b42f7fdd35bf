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

    public init(awaited: Set<String> = []) { self.awaited = awaited }

    /// Applies one event; returns the tasks it changed (for plain output), in order.
    @discardableResult
    public mutating func apply(_ event: SSEParser.Event) -> [TaskView] {
        guard let json = JSONValue.parse(Array(event.data.utf8)) else { return [] }
        if event.name == "snapshot" {
            guard case .object(let object) = json, case .array(let items)? = object["tasks"] else { return [] }
            // A snapshot replaces what was known: it is the whole matching set now.
            tasks = [:]
            order = []
            return items.compactMap(TaskView.init(json:)).map { upsert($0, signal: false) }
        }
        if event.name == "task.deleted" {
            guard case .object(let object) = json, case .string(let id)? = object["id"] else { return [] }
            tasks[id] = nil
            order.removeAll { $0 == id }
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
}
