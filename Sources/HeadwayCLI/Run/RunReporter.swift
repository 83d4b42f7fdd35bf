import Foundation
import HeadwayCore

/// Reports a wrapped command to the server from its own thread, so that a slow or absent
/// server never holds up the command's output: registers the task (retrying with backoff
/// while the server is unreachable), then sends progress when a new reading arrives and
/// heartbeats on new output (at most one report a second) and every few seconds of
/// silence. The command's output lines ride along (`output`, at most the last
/// `OutputLines.kept` since the previous report: the server keeps no more), and the rest
/// go with the finish. A reply with `cancel_requested` calls `onCancel` once.
final class RunReporter: @unchecked Sendable {
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
    private let condition = NSCondition()
    private let finished = DispatchSemaphore(value: 0)

    // Guarded by `condition`.
    private var label: String?
    private var reading: ProgressReading?
    private var hasNews = false
    private var readingSent = true
    private var stopping = false
    /// Output lines not yet sent, the latest `OutputLines.kept`.
    private var output: [String] = []
    /// Set once the server refused a report for its `output` (a server from before the
    /// output tail): lines are no longer sent.
    private var outputRefused = false
    // Owned by the reporting thread until it ends, then by the caller of `finish`.
    private var taskID: String?
    private var lastReport = Date.distantPast
    private var backoff: TimeInterval = 0
    private var unreachableSince: Date?
    private var disabled = false
    private var cancelSeen = false

    init(api: TaskAPI, finalAPI: TaskAPI, registration: JSONObject, onCancel: @escaping @Sendable () -> Void) {
        self.api = api
        self.finalAPI = finalAPI
        self.registration = registration
        self.onCancel = onCancel
    }

    /// Starts the reporting thread.
    func start() {
        let thread = Thread { [self] in
            loop()
            finished.signal()
        }
        thread.start()
    }

    /// Notes the command's output lines, for the task's output tail.
    func observe(output lines: [String]) {
        guard !lines.isEmpty else { return }
        condition.lock()
        if !outputRefused {
            output.append(contentsOf: lines)
            if output.count > OutputLines.kept { output.removeFirst(output.count - OutputLines.kept) }
            hasNews = true
            condition.signal()
        }
        condition.unlock()
    }

    /// Notes a new output line (as a label, nil when blank) and the reading it showed.
    func observe(label newLabel: String?, reading newReading: ProgressReading?) {
        condition.lock()
        if let newLabel { label = newLabel }
        if let newReading {
            reading = newReading
            readingSent = false
        }
        hasNews = true
        condition.signal()
        condition.unlock()
    }

    /// Stops the thread, sends what it had not yet sent, then finishes the task with
    /// `outcome` and `message`, through `finalAPI`. Returns without a report when the
    /// server stays away (one failed try ends it) or refused the registration; a task
    /// that exists is always finished, whatever was refused on the way.
    func finish(outcome: String, message: String?) {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
        finished.wait()
        if taskID == nil {
            guard !disabled, register(through: finalAPI) else { return }
        }
        guard let taskID else { return }
        condition.lock()
        let unsent = !readingSent || hasNews
        condition.unlock()
        if unsent && !disabled {
            guard report(through: finalAPI) || unreachableSince == nil else { return }
        }
        var body: JSONObject = ["outcome": .string(outcome)]
        if let message { body["message"] = .string(message) }
        condition.lock()
        let lines = takeOutput()
        condition.unlock()
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

    private func loop() {
        while true {
            condition.lock()
            // A refused report disables reporting: the thread ends (no wait for ever).
            while !stopping && !disabled {
                let due = nextReport()
                if due <= Date() { break }
                _ = condition.wait(until: due)
            }
            let stop = stopping
            condition.unlock()
            if stop || disabled { return }
            if taskID == nil { register() } else { report() }
        }
    }

    /// When the next report or retry is due (called with the lock held).
    private func nextReport() -> Date {
        if taskID == nil || unreachableSince != nil { return lastReport.addingTimeInterval(backoff) }
        return lastReport.addingTimeInterval(hasNews ? Self.minimumSpacing : Self.heartbeatInterval)
    }

    /// Registers the task with the latest label; whether the server took it.
    @discardableResult
    private func register(through api: TaskAPI? = nil) -> Bool {
        let api = api ?? self.api
        condition.lock()
        var body = registration
        if let label { body["label"] = .string(label) }
        hasNews = false
        condition.unlock()
        lastReport = Date()
        do throws(CLIError) {
            let reply = try api.post("/v1/tasks", body)
            guard let id = reply.string("id") else {
                throw .unexpectedReply("the server's reply to the registration holds no task id")
            }
            taskID = id
            reachable()
            if reply.cancelRequested { cancel() }
            condition.lock()
            let unsent = !readingSent
            condition.unlock()
            if unsent { return report(through: api) }
            return true
        } catch {
            failed(error)
            return false
        }
    }

    /// Sends progress when there is an unsent reading, else a heartbeat; both with the
    /// label. Whether the server took it.
    @discardableResult
    private func report(through api: TaskAPI? = nil) -> Bool {
        let api = api ?? self.api
        guard let taskID else { return false }
        condition.lock()
        var body: JSONObject = [:]
        if let label { body["label"] = .string(label) }
        let pending = readingSent ? nil : reading
        if let pending {
            body["completed"] = .integer(pending.completed)
            body["total"] = .integer(pending.total)
            if pending.isPercent { body["unit"] = .string("%") }
        }
        let lines = takeOutput()
        if let lines { body["output"] = lines }
        hasNews = false
        readingSent = true
        condition.unlock()
        lastReport = Date()
        do {
            let reply = try api.post(TaskAPI.taskPath(taskID, pending == nil ? "heartbeat" : "progress"), body)
            reachable()
            if reply.cancelRequested { cancel() }
            return true
        } catch {
            if lines != nil && Self.refusesOutput(error) {
                // A server without the output tail: the same report again, without lines.
                condition.lock()
                outputRefused = true
                output = []
                if pending != nil && reading == pending { readingSent = false }
                condition.unlock()
                return report(through: api)
            }
            // A reading the server refused as such (422: past its limits) is dropped; a
            // report that did not get through is sent again, and so are its lines.
            condition.lock()
            if pending != nil && !Self.refusesTheReading(error) && reading == pending { readingSent = false }
            if case .array(let sent)? = lines, !Self.refusesTheReading(error) {
                output = Array((sent.compactMap { if case .string(let line) = $0 { line } else { nil } } + output)
                    .suffix(OutputLines.kept))
            }
            condition.unlock()
            failed(error)
            return false
        }
    }

    /// The output lines to send, as JSON, emptied; nil when there are none (called with
    /// the lock held).
    private func takeOutput() -> JSONValue? {
        guard !output.isEmpty, !outputRefused else { return nil }
        defer { output = [] }
        return .array(output.map { .string($0) })
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

    private func cancel() {
        guard !cancelSeen else { return }
        cancelSeen = true
        onCancel()
    }

    /// After a reply: says so once when the server was away.
    private func reachable() {
        if unreachableSince != nil { warn("the server answers again; reporting resumed") }
        unreachableSince = nil
        backoff = 0
    }

    /// After an error: a server unreachable or unavailable (429, 5xx) is retried with
    /// backoff (one warning); a refused reading is dropped (one warning each); any other
    /// refusal — of the registration, the task, the access — stops reporting. The
    /// command goes on whatever happens.
    private func failed(_ error: CLIError) {
        switch error {
        case .unreachable, .unavailable:
            if unreachableSince == nil {
                warn("\(error.message); the command goes on, reports resume when the server answers")
                unreachableSince = Date()
            }
            backoff = min(max(backoff * 2, 1), Self.maximumBackoff)
        case _ where taskID != nil && Self.refusesTheReading(error):
            warn("\(error.message); that report is dropped")
        default:
            warn("\(error.message); no more reports for this command")
            disabled = true
        }
    }

    private func warn(_ text: String) {
        StandardStreams.error("headway: \(text)\n")
    }
}
