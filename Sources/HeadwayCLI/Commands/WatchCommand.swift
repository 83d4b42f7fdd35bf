import Foundation
import HeadwayClient
import Lifecycle
import HeadwayCore

/// `headway watch [ID…]`: a live view of tasks over the event stream (`GET /v1/events`).
public struct WatchCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "watch", abstract: "Follow tasks live as they change",
        discussion: """
        On a terminal the table redraws in place (at most every 100 ms), failed and stalled
        tasks first, then the unfinished; the tasks that do not fit are counted by state.
        Otherwise one line per change. Tasks younger than --min-duration are not shown. --json prints
        one event per line: {"id", "event", "data"}. A dropped or silent connection is
        resumed where it stopped. With --until-done every named task (and --parent) must
        exist, and with --parent it waits for at least one child; the exit status is 0
        when all watched tasks succeeded, 4 when one failed, 5 when one was canceled and
        none failed, 1 when a named task is deleted first.
        """,
        usage: "[<id> ...] [--parent <id>] [--min-duration <seconds>] [--until-done] [--idle-timeout <seconds>]",
        examples: ["headway watch", "headway watch --parent release-42 --until-done"])
    static let ids = VariadicArgument<String>("id", help: "Only these tasks (default: all)")
    static let parent = Option<String>("parent", valueName: "id", help: "Only the children of this task (and the named tasks)")
    static let minDuration = Option<Double>("min-duration", valueName: "seconds",
                                            help: "Hide tasks until they are this old (default 2; 0 with ids or --until-done)")
    static let untilDone = Flag("until-done", help: "Exit when every watched task has finished")
    static let idleTimeout = Option<Int64>("idle-timeout", valueName: "seconds",
                                         help: "Reconnect after this long without data (default 60)")
    public static let arguments = [ids.definition, parent.definition, minDuration.definition, untilDone.definition,
                                   idleTimeout.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let seconds = values[Self.minDuration], !(0...86_400).contains(seconds) {
            throw UsageError("--min-duration must be between 0 and 86400")
        }
        if let seconds = values[Self.idleTimeout], !(1...3_600).contains(seconds) {
            throw UsageError("--idle-timeout must be between 1 and 3600")
        }
    }

    /// How young a task is hidden when no task is named and --until-done is not given,
    /// as the page does: short tasks never flash by.
    static let defaultMinDuration = 2.0

    public func run(_ context: CommandContext) throws {
        // Shortened ids are resolved; one no task has yet is watched for as it is.
        var ids: [String] = []
        for text in values[Self.ids] { ids.append(try context.api.resolveIfShortened(text, lenient: true)) }
        let parentID = try values[Self.parent].map { text throws(CLIError) in try context.api.resolveIfShortened(text) }
        var query: [String] = ids.map { "task=" + Self.escape($0) }
        if let parentID { query.append("parent_id=" + Self.escape(parentID)) }
        let untilDone = values[Self.untilDone]
        // Named tasks and --until-done see every task: one that finished within the
        // hold-back would never be sent, and the wait would never end.
        let minDuration = values[Self.minDuration] ?? (ids.isEmpty && !untilDone ? Self.defaultMinDuration : 0)
        if minDuration > 0 { query.append("min_duration=" + String(format: "%.3f", minDuration)) }
        // The snapshot holds only tasks finished in the last minute: a named task that
        // finished earlier is read now, and one that does not exist is an error now
        // rather than a wait that never ends.
        var finishedBefore: [TaskView] = []
        if untilDone {
            for id in Set(ids).sorted() {
                let reply = try context.api.get(TaskAPI.taskPath(id))
                if let task = reply.json.flatMap(TaskView.init(json:)), task.state.isFinished { finishedBefore.append(task) }
            }
            // So with a parent: it must exist, and its children finished long ago count.
            if let parent = parentID {
                _ = try context.api.get(TaskAPI.taskPath(parent))
                let finished = try context.api.listAll(TaskListQuery(states: ["succeeded", "failed", "canceled"],
                                                                      parentID: parent, pageSize: 500))
                finishedBefore += finished.tasks.compactMap(TaskView.init(json:))
            }
        }
        let environment = ProcessInfo.processInfo.environment
        let isTTY = isatty(STDOUT_FILENO) == 1
        let mode: WatchSession.Mode = context.options.json ? .json : isTTY
            ? .terminal(color: Style.useColor(isTTY: true, environment: environment)) : .plain
        let session = WatchSession(
            client: HeadwayClient(baseURL: context.options.serverURL, token: context.options.token, totalTimeoutSeconds: 0,
                                  idleTimeoutSeconds: Int(values[Self.idleTimeout] ?? 60)),
            path: "/v1/events" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")),
            state: WatchState(awaited: Set(ids), finishedBefore: finishedBefore), mode: mode, untilDone: untilDone,
            environment: environment)
        let status = try session.run()
        if status != 0 { throw CommandExit(status: status) }
    }

    /// `text` escaped for a query value.
    static func escape(_ text: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#;")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// One `headway watch`: connects, reads events as they arrive, shows them, and reconnects
/// with `Last-Event-ID` (bounded backoff) when the connection drops. Events are handled on
/// the thread that reads the stream; on a terminal a second thread draws frames, at most
/// one every 100 ms. Both go through `screen`.
final class WatchSession: Sendable {
    enum Mode: Equatable, Sendable {
        case terminal(color: Bool)
        case plain
        case json

        var isTerminal: Bool {
            if case .terminal = self { return true }
            return false
        }
    }

    private let client: HeadwayClient
    private let path: String
    private let mode: Mode
    private let untilDone: Bool
    private let environment: [String: String]

    /// The events applied, the stream's parser, and what was printed or drawn.
    private struct Screen {
        var state: WatchState
        var parser = SSEParser()
        /// Each task as its last plain line showed it.
        var printed: [String: TaskView] = [:]
        var reconnecting = false
        var dirty = true
        var drawnLines = 0
        var drawnColumns = 0
        var lastDraw: EpochMilliseconds = 0
        var stopped = false
    }

    /// Shared by the thread that reads the stream and, on a terminal, the drawing thread.
    private let screen: Locked<Screen>

    /// The shortest and longest waits before reconnecting.
    static let firstDelay = 0.25, maximumDelay = 4.0

    init(client: HeadwayClient, path: String, state: WatchState, mode: Mode, untilDone: Bool, environment: [String: String]) {
        self.client = client
        self.path = path
        screen = Locked(Screen(state: state))
        self.mode = mode
        self.untilDone = untilDone
        self.environment = environment
    }

    /// Watches until `--until-done` is satisfied (returns its exit status) or forever.
    /// Throws `unreachable` when the first connection fails, `refused` when the server
    /// refuses the request, `watchedTaskDeleted` when a task `--until-done` waits for is
    /// deleted.
    func run() throws(CLIError) -> Int32 {
        if case .terminal = mode { startDrawing() }
        defer { stopDrawing() }
        var delay = Self.firstDelay
        var connectedOnce = false
        while true {
            let receiver = StreamReceiver(session: self)
            let lastID = screen.withLock { $0.parser.lastEventID }
            switch Result(catching: { () throws(TransportError) in
                try client.stream(path, lastEventID: lastID, receiver: BodyReceiver(receiver.receive))
            }) {
            case .success(let (status, contentType)):
                // Once watching, a server that is busy or restarting (503, 502, 504, 429)
                // is waited for, as a dropped connection is.
                let transient = [429, 502, 503, 504].contains(status) && connectedOnce
                if !(200..<300).contains(status) && !transient {
                    throw TaskAPI.refusal(status: status, contentType: contentType, body: receiver.raw)
                }
            case .failure(let error):
                let (overflowed, maximumEventBytes) = screen.withLock { ($0.parser.overflowed, $0.parser.maximumEventBytes) }
                if overflowed {
                    throw .unexpectedReply("an event of the stream is larger than \(maximumEventBytes >> 20) MiB")
                }
                if let deleted = deletedAwaited() { throw .watchedTaskDeleted(taskID: deleted) }
                if let status = finishedStatus() { return status }
                if !connectedOnce && !receiver.receivedEvents {
                    throw .unreachable(server: client.displayURL, reason: error.message)
                }
            }
            if let deleted = deletedAwaited() { throw .watchedTaskDeleted(taskID: deleted) }
            if let status = finishedStatus() { return status }
            if receiver.receivedEvents {
                connectedOnce = true
                delay = Self.firstDelay
            }
            setReconnecting()
            usleep(useconds_t(delay * 1_000_000))
            delay = min(delay * 2, Self.maximumDelay)
        }
    }

    /// Parses a chunk of the stream and shows its events; false stops the transfer once
    /// `--until-done` is satisfied.
    func receive(_ bytes: UnsafeRawBufferPointer) -> (events: Bool, more: Bool) {
        screen.withLock { screen in
            // The stream's first bytes (its `retry:` line) show the connection is back,
            // even when the resumed stream has no event to send.
            if screen.reconnecting && !bytes.isEmpty {
                screen.reconnecting = false
                screen.dirty = true
                if !mode.isTerminal { StandardStreams.error("headway: reconnected\n") }
            }
            let events = screen.parser.feed(bytes)
            for event in events {
                let changed = screen.state.apply(event)
                switch mode {
                case .json:
                    // Re-encoded from the parsed data: one line of JSON whatever the server sent.
                    guard let data = JSONValue.parse(Array(event.data.utf8)) else { continue }
                    var line: JSONObject = ["event": .string(event.name), "data": data]
                    if !event.lastEventID.isEmpty { line["id"] = .string(event.lastEventID) }
                    write(JSONValue.object(line).canonicalText + "\n")
                case .plain:
                    let now = Self.now()
                    // A task sent again as it was (a resume that replays a task the
                    // hold-back released after the last event id seen) is no change.
                    for task in changed where screen.printed[task.id] != task {
                        screen.printed[task.id] = task
                        let table = TaskTable(tasks: [task], now: now, frames: screen.state.frames, header: false)
                        write(table.render(width: .max).joined(separator: "\n") + "\n")
                    }
                case .terminal:
                    screen.dirty = true
                }
            }
            let done = untilDone && (screen.state.finishedStatus != nil || !screen.state.deletedAwaited.isEmpty)
            return (!events.isEmpty, !done && !screen.parser.overflowed)
        }
    }

    private func finishedStatus() -> Int32? {
        guard untilDone else { return nil }
        return screen.withLock { $0.state.finishedStatus }
    }

    private func deletedAwaited() -> String? {
        guard untilDone else { return nil }
        return screen.withLock { $0.state.deletedAwaited.first }
    }

    private func setReconnecting() {
        screen.withLock { screen in
            guard !screen.reconnecting else { return }
            screen.reconnecting = true
            switch mode {
            case .terminal: screen.dirty = true
            case .plain, .json: StandardStreams.error("headway: reconnecting…\n")
            }
        }
    }

    // MARK: Drawing on a terminal

    private func startDrawing() {
        let thread = Thread { [self] in
            while screen.withLock({ !$0.stopped }) {
                usleep(100_000)
                screen.withLock { screen in if screen.dirty || Self.now() - screen.lastDraw >= 1000 { draw(&screen) } }
            }
        }
        thread.start()
    }

    private func stopDrawing() {
        screen.withLock { screen in
            screen.stopped = true
            if case .terminal = mode { draw(&screen) }
        }
    }

    /// Redraws the frame in place: up over the previous frame, each line cleared to its
    /// end, then everything below cleared. The frame fits the terminal: no line wider than
    /// it (a wrapped line would throw the count off) and fewer lines than its rows (the
    /// cursor cannot go up past the top). After the width changed, the old frame may have
    /// wrapped: the screen is cleared instead. Called with `screen`'s lock held.
    private func draw(_ screen: inout Screen) {
        guard case .terminal(let color) = mode else { return }
        let now = Self.now()
        let columns = TerminalSize.columns(environment: environment)
        let rows = TerminalSize.rows(environment: environment)
        // One row stays for the cursor, one for the header, one for "reconnecting…".
        var taskRows = rows - 2 - (screen.reconnecting ? 1 : 0)
        if screen.state.ordered.count > taskRows { taskRows -= 1 }   // and one for "… more"
        let (shown, hidden) = WatchState.fit(screen.state.ordered, rows: taskRows)
        var lines = TaskTable(tasks: shown, now: now, frames: screen.state.frames).render(width: columns, color: color)
        if !hidden.isEmpty {
            lines.append(Style.dim.apply(DisplayWidth.truncate(WatchState.hiddenLine(hidden), to: columns), enabled: color))
        }
        if screen.reconnecting { lines.append(Style.yellow.apply(DisplayWidth.truncate("reconnecting…", to: columns), enabled: color)) }
        // A window of a few rows: the first lines that fit, the cursor's row kept free.
        lines = Array(lines.prefix(max(1, rows - 1)))
        var out: String
        if screen.drawnColumns != 0 && screen.drawnColumns != columns {
            out = "\u{1B}[H\u{1B}[J"
        } else {
            out = screen.drawnLines > 0 ? "\r\u{1B}[\(screen.drawnLines)A" : ""
        }
        for line in lines { out += line + "\u{1B}[K\n" }
        out += "\u{1B}[J"
        write(out)
        screen.drawnLines = lines.count
        screen.drawnColumns = columns
        screen.dirty = false
        screen.lastDraw = now
    }

    private func write(_ text: String) {
        StandardStreams.output(text)
    }

    static func now() -> EpochMilliseconds { EpochMilliseconds(Date().timeIntervalSince1970 * 1000) }
}

/// Hands the stream's chunks to the session; keeps the start of a body that is not an
/// event stream (a problem document) for the error.
final class StreamReceiver {
    private let session: WatchSession
    private(set) var receivedEvents = false
    private(set) var raw: [UInt8] = []

    init(session: WatchSession) { self.session = session }

    func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
        if !receivedEvents && raw.count < 65_536 { raw.append(contentsOf: chunk) }
        let (events, more) = session.receive(chunk)
        if events { receivedEvents = true }
        return more
    }
}
