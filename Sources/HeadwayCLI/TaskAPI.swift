import Foundation
import HeadwayClient
import HeadwayCore

/// The REST API of headwayd as the commands use it: sends through `HeadwayClient` (the
/// one client of the API) and turns replies into JSON values, and its errors into
/// `CLIError`s.
public struct TaskAPI: Sendable {
    let client: HeadwayClient

    public init(client: HeadwayClient) { self.client = client }

    /// The reply to a successful request: its body text, every control character in it
    /// escaped (`JSONText.escapingControls`), and its parsed JSON (nil for an empty body,
    /// as a 204's).
    public struct Reply: Sendable {
        public let text: String
        public let json: JSONValue?
    }

    /// POSTs `body` (a JSON object) to `path`.
    public func post(_ path: String, _ body: JSONObject = [:]) throws(CLIError) -> Reply {
        try send("POST", path, json: JSONValue.object(body).canonicalText)
    }

    /// DELETEs `path`.
    public func delete(_ path: String) throws(CLIError) -> Reply {
        try send("DELETE", path)
    }

    /// GETs `path`.
    public func get(_ path: String) throws(CLIError) -> Reply {
        try send("GET", path)
    }

    /// The path of a task (`/v1/tasks/ID`), its id escaped for a URL path (`HeadwayClient.taskPath`).
    public static func taskPath(_ id: String, _ action: String? = nil) -> String {
        HeadwayClient.taskPath(id, action)
    }

    func send(_ method: String, _ path: String, json: String? = nil) throws(CLIError) -> Reply {
        let response: HTTPResponse
        do {
            response = try client.send(method, path, json: json)
        } catch {
            throw Self.cliError(error, server: client.displayURL)
        }
        // Printed as it came with --json: no control character of it may reach the terminal.
        let text = JSONText.escapingControls(String(decoding: response.body, as: UTF8.self))
        return Reply(text: text, json: JSONValue.parse(response.body))
    }

    /// The code of an `.unavailable` reply that had no problem document (a proxy's 502
    /// or 504, say: the server behind it may have done what was asked).
    static let noProblemCode = "unavailable"

    /// The error a non-2xx reply stands for: its problem document when it has one.
    static func refusal(status: Int, contentType: String?, body: [UInt8]) -> CLIError {
        cliError(HeadwayError.refusal(status: status, contentType: contentType, body: body), server: "")
    }

    /// How the command reports `error` of the client talking to `server`: a refusal is
    /// `unavailable` when the server cannot serve now (429, 5xx: exit 69, as when it cannot
    /// be reached), else `refused` (exit 1).
    static func cliError(_ error: HeadwayError, server: String) -> CLIError {
        switch error {
        case .problem(let problem):
            if problem.status == 429 || problem.status >= 500 {
                return .unavailable(status: problem.status, title: problem.title, detail: problem.detail, code: problem.code.rawValue)
            }
            return .refused(title: problem.title, detail: problem.detail, code: problem.code.rawValue)
        case .status(let status) where status == 429 || status >= 500:
            return .unavailable(status: status, title: "HTTP \(status)", detail: "the server cannot answer now", code: noProblemCode)
        case .status(let status):
            return .unexpectedReply("the server answered HTTP \(status) without a problem document")
        case .unreachable(let reason):
            return .unreachable(server: server, reason: reason)
        case .invalidReply(let reason):
            return .unexpectedReply(reason)
        case .canceled:
            return .unreachable(server: server, reason: "the request was stopped")
        }
    }
}

extension TaskAPI.Reply {
    /// Whether the reply's task says that someone asked to cancel it.
    public var cancelRequested: Bool {
        if case .object(let task)? = json, case .bool(true)? = task["cancel_requested"] { return true }
        return false
    }

    /// A string member of the reply's object.
    public func string(_ name: String) -> String? {
        if case .object(let object)? = json, case .string(let value)? = object[name] { return value }
        return nil
    }
}
