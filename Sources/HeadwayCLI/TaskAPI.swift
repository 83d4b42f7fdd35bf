import Foundation
import HeadwayCore

/// The REST API of headwayd as the commands use it: sends through `HTTPClient` and turns
/// replies into JSON values or `CLIError`s (problem documents decoded here, once).
public struct TaskAPI: Sendable {
    let client: HTTPClient

    public init(client: HTTPClient) { self.client = client }

    /// The reply to a successful request: its body text, every control character in it
    /// escaped (`JSONText.escapingControls`), and its parsed JSON (nil for an empty body,
    /// as a 204's).
    public struct Reply: Sendable {
        public let text: String
        public let json: JSONValue?
    }

    /// POSTs `body` (a JSON object) to `path`.
    public func post(_ path: String, _ body: JSONObject = [:]) throws(CLIError) -> Reply {
        try send(HTTPRequest(method: "POST", path: path, jsonBody: JSONValue.object(body).canonicalText))
    }

    /// DELETEs `path`.
    public func delete(_ path: String) throws(CLIError) -> Reply {
        try send(HTTPRequest(method: "DELETE", path: path))
    }

    /// GETs `path`.
    public func get(_ path: String) throws(CLIError) -> Reply {
        try send(HTTPRequest(method: "GET", path: path))
    }

    /// The path of a task (`/v1/tasks/ID`), its id escaped for a URL path; dots too, so
    /// that the ids `.` and `..` stay ids and are not read as "this" or "up" segments.
    public static func taskPath(_ id: String, _ action: String? = nil) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;?#%.")
        let escaped = id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id
        return "/v1/tasks/" + escaped + (action.map { "/" + $0 } ?? "")
    }

    func send(_ request: HTTPRequest) throws(CLIError) -> Reply {
        let response: HTTPResponse
        do {
            response = try client.send(request)
        } catch {
            if error.replyRefused { throw .unexpectedReply(error.message) }
            throw .unreachable(server: client.displayURL, reason: error.message)
        }
        // Printed as it came with --json: no control character of it may reach the terminal.
        let text = JSONText.escapingControls(String(decoding: response.body, as: UTF8.self))
        let json = JSONValue.parse(response.body)
        guard (200..<300).contains(response.status) else {
            throw Self.refusal(status: response.status, contentType: response.contentType, json: json)
        }
        return Reply(text: text, json: json)
    }

    /// The code of an `.unavailable` reply that had no problem document (a proxy's 502
    /// or 504, say: the server behind it may have done what was asked).
    static let noProblemCode = "unavailable"

    /// The error a non-2xx reply stands for: its problem document when it has one.
    static func refusal(status: Int, contentType: String?, json: JSONValue?) -> CLIError {
        if contentType == "application/problem+json", case .object(let problem)? = json,
           case .string(let title)? = problem["title"], case .string(let code)? = problem["code"] {
            var detail = ""
            if case .string(let text)? = problem["detail"] { detail = text }
            if status == 429 || status >= 500 { return .unavailable(status: status, title: title, detail: detail, code: code) }
            return .refused(title: title, detail: detail, code: code)
        }
        if status == 429 || status >= 500 {
            return .unavailable(status: status, title: "HTTP \(status)", detail: "the server cannot answer now",
                                code: noProblemCode)
        }
        return .unexpectedReply("the server answered HTTP \(status) without a problem document")
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
