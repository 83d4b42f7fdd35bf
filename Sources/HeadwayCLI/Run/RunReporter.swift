import Foundation
import HeadwayCore
import Lifecycle

/// Reports a wrapped command to the server from its own thread, so that a slow or absent
/// server never holds up the command's output: registers the task (retrying with backoff
/// while the server is unreachable), then sends progress when a new reading arrives and
/// heartbeats on new output (at most one report a second) and every few seconds of
/// silence. The command's output lines ride along (`output`, at most the last
/// `OutputLines.kept` since the previous report: the server keeps no more), and the rest
/// go with the finish. A reply with `cancel_requested` calls `onCancel` once.
final class RunReporter: Sendable {
    /// The shortest time between two reports, and the longest without one.
    static let minimumSpacing: TimeInterval = 1
    static let heartbeatInterval: TimeInterval = 3
    /// The longest wait between two tries while the server is unreachable.
    static let maximumBackoff: TimeInterval = 30

    private let api: TaskAPI
    /// The API with shorter timeouts for the last reports, sent after the command ended:
    /// a slow server delays the exit by seconds, not by minutes.
    private let finalAPI: TaskAPI
    private let registration: JSONObject
    private let onCancel: @Sendable () -> Void

    /// What the command's thread hands the reporting thread.
    private struct News {
        var label: String?
        var reading: ProgressReading?
        var hasNews = false
        var readingSent = true
        var stopping = false
        /// Output lines not yet sent, the latest `OutputLines.kept`.
        var output: [String] = []
        /// Set once the server refused a report for its `output` (a server without the
        /// output tail): from then on no lines are sent.
        var outputRefused = false

        /// The output lines to send, as JSON, emptied; nil when there are none.
        mutating func takeOutput() -> JSONValue? {
            guard !output.isEmpty, !outputRefused else { return nil }
            defer { output = [] }
            return .array(output.map { .string($0) })
        }
    }

    /// Where the reports stand: the reporting thread's alone until it ends, then
    /// (`handedBack`) the caller of `finish`'s.
    private struct Session: Sendable {
        var taskID: String?
        var lastReport = Date.distantPast
        var backoff: TimeInterval = 0
        var unreachableSince: Date?
        var disabled = false
        var cancelSeen = false
    }

    /// Shared by the command's thread (new output, the finish) and the reporting thread.
    private let news = Locked(News())
    /// Rung when there is news, or at the finish: the reporting thread sleeps on it.
    private let doorbell = Doorbell()
    /// The reporting thread's session, handed back to `finish` as the thread ends.
    private let handedBack = Locked<Session?>(nil)
    private let finished = DispatchSemaphore(value: 0)

    init(api: TaskAPI, finalAPI: TaskAPI, registration: JSONObject, onCancel: @escaping @Sendable () -> Void) {
        self.api = api
        self.finalAPI = finalAPI
        self.registration = registration
        self.onCancel = onCancel
    }

    /// Starts the reporting thread.
    func start() {
        let thread = Thread { [self] in
            var session = Session()
            loop(&session)
            handedBack.withLock { $0 = session }
            finished.signal()
        }
        thread.start()
    }

    /// Notes the command's output lines, for the task's output tail.
    func observe(output lines: [String]) {
        guard !lines.isEmpty else { return }
        let rung = news.withLock { news in
            guard !news.outputRefused else { return false }
            news.output.append(contentsOf: lines)
            if news.output.count > OutputLines.kept { news.output.removeFirst(news.output.count - OutputLines.kept) }
            news.hasNews = true
            return true
        }
        if rung { doorbell.ring() }
    }

    /// Notes a new output line (as a label, nil when blank) and the reading it showed.
    func observe(label newLabel: String?, reading newReading: ProgressReading?) {
        news.withLock { news in
            if let newLabel { news.label = newLabel }
            if let newReading {
                news.reading = newReading
                news.readingSent = false
            }
            news.hasNews = true
        }
        doorbell.ring()
    }

    /// Stops the thread, sends what it had not yet sent, then finishes the task with
    /// `outcome` and `message`, through `finalAPI`. Returns without a report when the
    /// server stays away (one failed try ends it) or refused the registration; a task
    /// that exists is always finished, whatever was refused on the way.
    func finish(outcome: String, message: String?) {
        news.withLock { $0.stopping = true }
        doorbell.ring()
        finished.wait()
        var session = handedBack.withLock { $0 } ?? Session()
        if session.taskID == nil {
            guard !session.disabled, register(&session, through: finalAPI) else { return }
        }
        guard let taskID = session.taskID else { return }
        let unsent = news.withLock { !$0.readingSent || $0.hasNews }
        if unsent && !session.disabled {
            guard report(&session, through: finalAPI) || session.unreachableSince == nil else { return }
        }
        var body: JSONObject = ["outcome": .string(outcome)]
        if let message { body["message"] = .string(message) }
        let lines = news.withLock { $0.takeOutput() }
        if let lines { body["output"] = lines }
        do {
            _ = try finalAPI.post(TaskAPI.taskPath(taskID, "finish"), body)
        } catch {
            if lines != nil && Self.refusesOutput(error) {
                body["output"] = nil
                if (try? finalAPI.post(TaskAPI.taskPath(taskID, "finish"), body)) != nil { return }
            }
            warn("cannot finish task \(taskID): \(error.message)")
        }
    }

    private func loop(_ session: inout Session) {
        while true {
            // A refused report disables reporting: the thread ends (no wait for ever).
            while !session.disabled {
                let (stopping, hasNews) = news.withLock { ($0.stopping, $0.hasNews) }
                if stopping { return }
                let due = nextReport(session, hasNews: hasNews)
                if due <= Date() { break }
                doorbell.wait(until: .now() + due.timeIntervalSinceNow)
            }
            if session.disabled || news.withLock({ $0.stopping }) { return }
            if session.taskID == nil { register(&session) } else { report(&session) }
        }
    }

    /// When the next report or retry is due.
    private func nextReport(_ session: Session, hasNews: Bool) -> Date {
        if session.taskID == nil || session.unreachableSince != nil { return session.lastReport.addingTimeInterval(session.backoff) }
        return session.lastReport.addingTimeInterval(hasNews ? Self.minimumSpacing : Self.heartbeatInterval)
    }

    /// Registers the task with the latest label; whether the server took it.
    @discardableResult
    private func register(_ session: inout Session, through api: TaskAPI? = nil) -> Bool {
        let api = api ?? self.api
        var body = registration
        news.withLock { news in
            if let label = news.label { body["label"] = .string(label) }
            news.hasNews = false
        }
        session.lastReport = Date()
        do throws(CLIError) {
            let reply = try api.post("/v1/tasks", body)
            guard let id = reply.string("id") else {
                throw .unexpectedReply("the server's reply to the registration holds no task id")
            }
            session.taskID = id
            reachable(&session)
            if reply.cancelRequested { cancel(&session) }
            if news.withLock({ !$0.readingSent }) { return report(&session, through: api) }
            return true
        } catch {
            failed(error, &session)
            return false
        }
    }

    /// Sends progress when there is an unsent reading, else a heartbeat; both with the
    /// label. Whether the server took it.
    @discardableResult
    private func report(_ session: inout Session, through api: TaskAPI? = nil) -> Bool {
        let api = api ?? self.api
        guard let taskID = session.taskID else { return false }
        let (body, pending, lines) = news.withLock { news -> (JSONObject, ProgressReading?, JSONValue?) in
            var body: JSONObject = [:]
            if let label = news.label { body["label"] = .string(label) }
            let pending = news.readingSent ? nil : news.reading
            if let pending {
                body["completed"] = .integer(pending.completed)
                body["total"] = .integer(pending.total)
                if pending.isPercent { body["unit"] = .string("%") }
            }
            let lines = news.takeOutput()
            if let lines { body["output"] = lines }
            news.hasNews = false
            news.readingSent = true
            return (body, pending, lines)
        }
        session.lastReport = Date()
        do {
            let reply = try api.post(TaskAPI.taskPath(taskID, pending == nil ? "heartbeat" : "progress"), body)
            reachable(&session)
            if reply.cancelRequested { cancel(&session) }
            return true
        } catch {
            if lines != nil && Self.refusesOutput(error) {
                // A server without the output tail: the same report again, without lines.
                news.withLock { news in
                    news.outputRefused = true
                    news.output = []
                    if pending != nil && news.reading == pending { news.readingSent = false }
                }
                return report(&session, through: api)
            }
            // A reading the server refused as such (422: past its limits) is dropped; a
            // report that did not get through is sent again, and so are its lines.
            news.withLock { news in
                if pending != nil && !Self.refusesTheReading(error) && news.reading == pending { news.readingSent = false }
                if case .array(let sent)? = lines, !Self.refusesTheReading(error) {
                    news.output = Array((sent.compactMap { if case .string(let line) = $0 { line } else { nil } } + news.output)
                        .suffix(OutputLines.kept))
                }
            }
            failed(error, &session)
            return false
        }
    }

    /// Whether `error` refuses a report for its `output` member: a 400 naming the field
    /// (a server from before the output tail, which knows no such field).
    static func refusesOutput(_ error: CLIError) -> Bool {
        if case .refused(_, let detail, "invalid_request") = error { return detail.contains("output") }
        return false
    }

    /// Whether `error` refuses what a report said rather than the task or the access.
    static func refusesTheReading(_ error: CLIError) -> Bool {
        if case .refused(_, _, let code) = error { return !["not_found", "token_missing", "token_invalid",
            "token_expired", "token_revoked", "insufficient_scope", "prefix_not_allowed"].contains(code) }
        return false
    }

    private func cancel(_ session: inout Session) {
        guard !session.cancelSeen else { return }
        session.cancelSeen = true
        onCancel()
    }

    /// After a reply: says so once when the server was away.
    private func reachable(_ session: inout Session) {
        if session.unreachableSince != nil { warn("the server answers again; reporting resumed") }
        session.unreachableSince = nil
        session.backoff = 0
    }

    /// After an error: a server unreachable or unavailable (429, 5xx) is retried with
    /// backoff (one warning); a refused reading is dropped (one warning each); any other
    /// refusal — of the registration, the task, the access — stops reporting. The
    /// command goes on whatever happens.
    private func failed(_ error: CLIError, _ session: inout Session) {
        switch error {
        case .unreachable, .unavailable:
            if session.unreachableSince == nil {
                warn("\(error.message); the command goes on, reports resume when the server answers")
                session.unreachableSince = Date()
            }
            session.backoff = min(max(session.backoff * 2, 1), Self.maximumBackoff)
        case _ where session.taskID != nil && Self.refusesTheReading(error):
            warn("\(error.message); that report is dropped")
        default:
            warn("\(error.message); no more reports for this command")
            session.disabled = true
        }
    }

    private func warn(_ text: String) {
        StandardStreams.error("headway: \(text)\n")
    }
}
