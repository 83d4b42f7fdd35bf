import Foundation
import HeadwayCore

/// The query of the list API (`GET /v1/tasks`), with its parameters named exactly as
/// `openapi.yaml` names them: `state` (repeated), `stalled`, `parent_id`, `root`,
/// `page_size`, `page_token`.
public struct TaskListQuery: Sendable, Equatable {
    public var states: [String] = []
    /// Only stalled (true) or only not stalled (false) tasks; nil for both.
    public var stalled: Bool?
    public var parentID: String?
    /// Only tasks without a parent.
    public var root = false
    public var pageSize: Int64?
    public var pageToken: String?

    public init(states: [String] = [], stalled: Bool? = nil, parentID: String? = nil, root: Bool = false,
                pageSize: Int64? = nil, pageToken: String? = nil) {
        self.states = states
        self.stalled = stalled
        self.parentID = parentID
        self.root = root
        self.pageSize = pageSize
        self.pageToken = pageToken
    }

    /// The request path with its query string, values percent-encoded.
    public var path: String {
        var items: [(String, String)] = states.map { ("state", $0) }
        if let stalled { items.append(("stalled", stalled ? "true" : "false")) }
        if let parentID { items.append(("parent_id", parentID)) }
        if root { items.append(("root", "true")) }
        if let pageSize { items.append(("page_size", String(pageSize))) }
        if let pageToken { items.append(("page_token", pageToken)) }
        guard !items.isEmpty else { return "/v1/tasks" }
        return "/v1/tasks?" + items.map { $0.0 + "=" + Self.escape($0.1) }.joined(separator: "&")
    }

    /// `text` percent-encoded for a query value (only unreserved characters stay).
    static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// One page of a listing (the `TaskList` schema), or several pages joined.
public struct TaskPage: Sendable {
    /// The task objects as the server sent them.
    public var tasks: [JSONValue]
    /// The token of the next page; nil on the last one.
    public var nextPageToken: String?
    /// How many tasks match the filters in all.
    public var totalSize: Int64

    /// How many matching tasks this page (or these pages) did not include.
    public var remaining: Int64 { max(0, totalSize - Int64(tasks.count)) }
}

extension TaskAPI {
    /// One page of `query`.
    public func listPage(_ query: TaskListQuery) throws(CLIError) -> TaskPage {
        let reply = try get(query.path)
        guard case .object(let list)? = reply.json, case .array(let tasks)? = list["tasks"] else {
            throw .unexpectedReply("the server's task list is not a TaskList object")
        }
        var token: String? = nil
        if case .string(let text)? = list["next_page_token"] { token = text }
        var total = Int64(tasks.count)
        switch list["total_size"] {
        case .integer(let value)?: total = value
        case .number(let value)? where value.isFinite: total = Int64(value)
        default: break
        }
        return TaskPage(tasks: tasks, nextPageToken: token, totalSize: total)
    }

    /// Every page of `query`, following `next_page_token` until it is null. Stops with an
    /// error if the server hands out a token it gave before (a loop would never end).
    public func listAll(_ query: TaskListQuery) throws(CLIError) -> TaskPage {
        var query = query
        var page = try listPage(query)
        var seen: Set<String> = []
        while let token = page.nextPageToken {
            guard seen.insert(token).inserted else {
                throw .unexpectedReply("the server repeated the page token '\(token)'")
            }
            query.pageToken = token
            let next = try listPage(query)
            page = TaskPage(tasks: page.tasks + next.tasks, nextPageToken: next.nextPageToken, totalSize: next.totalSize)
        }
        return page
    }
}
