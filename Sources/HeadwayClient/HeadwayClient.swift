import Foundation
import HeadwayCore

/// A client of headwayd's HTTP API: registers tasks, reports their progress, finishes,
/// cancels, reads and lists them, and follows the event stream.
///
/// ```swift
/// let client = HeadwayClient(url: URL(string: "http://127.0.0.1:8080")!, token: token)
/// _ = try await client.register(TaskRegistration(id: "backup-db-3", name: "Nightly backup", total: 120))
/// let task = try await client.progress("backup-db-3", TaskUpdate(completed: 40, seq: 1))
/// if task.cancelRequested { … }
/// ```
///
/// Every call throws a `HeadwayError`: a refusal carries the server's problem document
/// (`HeadwayError.problem`, its `code` the one to branch on). Each request is sent with
/// libcurl from a thread of its own, so awaiting one never holds a thread of Swift's
/// cooperative pool; canceling the awaiting task stops the request (`HeadwayError.canceled`).
/// The `headway` command sends every request of its own through this client.
public struct HeadwayClient: Sendable {
    let transport: HTTPTransport

    /// A client of the server at `url` (`http://127.0.0.1:8080`, or behind a proxy with a
    /// path), sending `token` as a bearer token. A request waits at most `connectTimeout`
    /// to connect and `requestTimeout` in all.
    public init(url: URL, token: String? = nil, connectTimeout: Duration = .seconds(5), requestTimeout: Duration = .seconds(30)) {
        self.init(baseURL: url.absoluteString, token: token, connectTimeoutSeconds: Self.wholeSeconds(connectTimeout),
                  totalTimeoutSeconds: Self.wholeSeconds(requestTimeout))
    }

    /// A client of the server at `baseURL` as the user typed it (the `headway` command's
    /// `--server`): libcurl reads it, and refuses it in its own words if it must.
    /// `totalTimeoutSeconds` 0 is no limit; `idleTimeoutSeconds` gives up a reply that goes
    /// that long without a byte.
    package init(baseURL: String, token: String?, connectTimeoutSeconds: Int = 5, totalTimeoutSeconds: Int = 30,
                 idleTimeoutSeconds: Int? = nil) {
        transport = HTTPTransport(baseURL: baseURL, token: token, connectTimeoutSeconds: connectTimeoutSeconds,
                                  totalTimeoutSeconds: totalTimeoutSeconds, idleTimeoutSeconds: idleTimeoutSeconds)
    }

    /// The same server, token and connect timeout, with other limits for the whole exchange
    /// (0: none) and for a silent reply.
    package func with(totalTimeoutSeconds: Int, idleTimeoutSeconds: Int?) -> HeadwayClient {
        HeadwayClient(baseURL: transport.baseURL, token: transport.token, connectTimeoutSeconds: transport.connectTimeoutSeconds,
                      totalTimeoutSeconds: totalTimeoutSeconds, idleTimeoutSeconds: idleTimeoutSeconds)
    }

    private static func wholeSeconds(_ duration: Duration) -> Int {
        max(1, Int((Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18).rounded(.up)))
    }

    /// The server's URL as messages show it: without a `user:password@` part.
    package var displayURL: String { transport.displayURL }

    // MARK: Tasks

    /// Registers a task, or answers with it as it is when the same registration comes again.
    public func register(_ registration: TaskRegistration) async throws(HeadwayError) -> HeadwayTask {
        try await call("POST", "/v1/tasks", json: WireJSON.encode(registration))
    }

    /// Reports progress of task `taskID`; the reply is the task as it is now (read its
    /// `cancelRequested`).
    public func progress(_ taskID: String, _ update: TaskUpdate) async throws(HeadwayError) -> HeadwayTask {
        try await call("POST", Self.taskPath(taskID, "progress"), json: WireJSON.encode(update))
    }

    /// Reports several tasks in one request (`POST /v1/progress`, one commit): each item is
    /// applied in order, or refused alone; one result per item, in the order sent.
    public func progress(_ updates: [(taskID: String, update: TaskUpdate)]) async throws(HeadwayError) -> [TaskUpdateResult] {
        let body = WireJSON.encode(Batch(updates: updates.map { BatchItem(taskID: $0.taskID, update: $0.update) }))
        let reply = try await sendOnOwnThread("POST", "/v1/progress", json: body)
        return try Self.batchResults(reply.body, sent: updates.count)
    }

    /// Tells the server task `taskID` is alive without changing its progress.
    public func heartbeat(_ taskID: String, label: String? = nil, seq: Int64? = nil) async throws(HeadwayError) -> HeadwayTask {
        try await call("POST", Self.taskPath(taskID, "heartbeat"), json: WireJSON.encode(Heartbeat(label: label, seq: seq)))
    }

    /// Finishes task `taskID` with `outcome` and an optional `message` (an error's text).
    public func finish(_ taskID: String, outcome: TaskOutcome, message: String? = nil,
                       output: [String]? = nil) async throws(HeadwayError) -> HeadwayTask {
        try await call("POST", Self.taskPath(taskID, "finish"), json: WireJSON.encode(Finish(outcome: outcome, message: message, output: output)))
    }

    /// Asks task `taskID` and its descendants to stop: their runners learn it from
    /// `cancelRequested` in their next reply.
    public func cancel(_ taskID: String) async throws(HeadwayError) -> HeadwayTask {
        try await call("POST", Self.taskPath(taskID, "cancel"), json: WireJSON.encode(Empty()))
    }

    /// Task `taskID` as it is now.
    public func task(_ taskID: String) async throws(HeadwayError) -> HeadwayTask {
        try await call("GET", Self.taskPath(taskID), json: nil)
    }

    /// One page of the tasks `filter` selects, newest first: `pageSize` of them (1–500;
    /// the server's default, 50, when nil), from `pageToken` (the previous page's
    /// `nextPageToken`) on.
    public func tasks(_ filter: TaskFilter = TaskFilter(), pageSize: Int? = nil,
                      pageToken: String? = nil) async throws(HeadwayError) -> TaskListPage {
        var items = filter.queryItems
        if let pageSize { items.append(("page_size", String(pageSize))) }
        if let pageToken { items.append(("page_token", pageToken)) }
        let reply = try await sendOnOwnThread("GET", "/v1/tasks" + Self.query(items), json: nil)
        return try WireJSON.decode(TaskListPage.self, from: reply.body, what: "a TaskList object")
    }

    // MARK: Requests

    /// Sends one request on the calling thread, which it blocks; the reply if it is 2xx.
    /// For the `headway` command, whose commands run on the main thread; async callers use
    /// the typed calls above.
    package func send(_ method: String, _ path: String, json: String? = nil,
                      stop: TransferStop? = nil) throws(HeadwayError) -> HTTPResponse {
        let response: HTTPResponse
        do {
            response = try transport.send(HTTPRequest(method: method, path: path, jsonBody: json), stop: stop)
        } catch {
            if stop?.isSet == true { throw .canceled }
            throw error.replyRefused ? .invalidReply(error.message) : .unreachable(error.message)
        }
        guard (200..<300).contains(response.status) else {
            throw HeadwayError.refusal(status: response.status, contentType: response.contentType, body: response.body)
        }
        return response
    }

    /// Sends a GET whose body streams (`text/event-stream`) to `receiver` as it arrives, on
    /// the calling thread; returns the status and content type once the body has ended,
    /// whatever the status. Throws the transport's own error.
    package func stream(_ path: String, lastEventID: String?, receiver: BodyReceiver,
                        stop: TransferStop? = nil) throws(TransportError) -> (status: Int, contentType: String?) {
        var request = HTTPRequest(method: "GET", path: path)
        request.headers = ["Accept: text/event-stream"]
        if let lastEventID, !lastEventID.isEmpty { request.headers.append("Last-Event-ID: \(lastEventID)") }
        let (status, contentType) = try transport.send(request, receiver: receiver, stop: stop)
        return (status, contentType)
    }

    /// Sends a request from a thread of its own and awaits the reply: libcurl blocks the
    /// thread that sends, which must never be one of the cooperative pool's. Canceling the
    /// awaiting task stops the transfer.
    func sendOnOwnThread(_ method: String, _ path: String, json: String?) async throws(HeadwayError) -> HTTPResponse {
        let stop = TransferStop()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HTTPResponse, HeadwayError>, Never>) in
                let thread = Thread {
                    continuation.resume(returning: Result { () throws(HeadwayError) in
                        try self.send(method, path, json: json, stop: stop)
                    })
                }
                thread.name = "headway-client"
                thread.start()
            }
        } onCancel: {
            stop.set()
        }
        return try result.get()
    }

    /// Sends `json` and decodes the task the reply holds.
    private func call(_ method: String, _ path: String, json: String?) async throws(HeadwayError) -> HeadwayTask {
        let reply = try await sendOnOwnThread(method, path, json: json)
        return try WireJSON.decode(HeadwayTask.self, from: reply.body, what: "a task")
    }

    static func batchResults(_ body: [UInt8], sent: Int) throws(HeadwayError) -> [TaskUpdateResult] {
        guard case .object(let reply)? = JSONValue.parse(body), case .array(let results)? = reply["results"],
              results.count == sent else {
            throw .invalidReply("the server's reply is not one result per update")
        }
        var decoded: [TaskUpdateResult] = []
        for case .object(let result) in results {
            var taskID = "", status = 0
            if case .string(let id)? = result["task_id"] { taskID = id }
            if case .integer(let code)? = result["status"] { status = Int(code) }
            var entry = TaskUpdateResult(taskID: taskID, task: nil, unchanged: result["unchanged"] == .bool(true), problem: nil)
            if let problem = result["problem"] {
                let text = Array(problem.canonicalText.utf8)
                guard case .problem(let decodedProblem) = HeadwayError.refusal(status: status, contentType: "application/problem+json",
                                                                                body: text) else {
                    throw .invalidReply("the server's result for \(taskID) holds no problem document")
                }
                entry.problem = decodedProblem
            } else if let task = result["task"] {
                entry.task = try WireJSON.decode(HeadwayTask.self, from: Array(task.canonicalText.utf8), what: "a task")
            }
            decoded.append(entry)
        }
        guard decoded.count == sent else { throw .invalidReply("the server's reply is not one result per update") }
        return decoded
    }

    /// The path of a task (`/v1/tasks/ID`), its id escaped for a URL path; dots too, so
    /// that the ids `.` and `..` stay ids and are not read as "this" or "up" segments.
    package static func taskPath(_ id: String, _ action: String? = nil) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;?#%.")
        let escaped = id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id
        return "/v1/tasks/" + escaped + (action.map { "/" + $0 } ?? "")
    }

    /// `items` as a query string (`?a=1&b=2`), each value percent-encoded; "" for none.
    static func query(_ items: [(String, String)]) -> String {
        guard !items.isEmpty else { return "" }
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return "?" + items.map { $0.0 + "=" + ($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0.1) }
            .joined(separator: "&")
    }
}

// The bodies of the routes that take more than a typed value of their own.
private struct Empty: Encodable {}

private struct Heartbeat: Encodable {
    var label: String?
    var seq: Int64?
}

private struct Finish: Encodable {
    var outcome: TaskOutcome
    var message: String?
    var output: [String]?
}

private struct Batch: Encodable {
    var updates: [BatchItem]
}

private struct BatchItem: Encodable {
    var taskID: String
    var update: TaskUpdate

    enum CodingKeys: String, CodingKey { case taskID = "task_id" }

    func encode(to encoder: any Encoder) throws {
        try update.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(taskID, forKey: .taskID)
    }
}
