import Foundation
import HeadwayCore

/// The query of the list API (`GET /v1/tasks`), with its parameters named exactly as
/// `openapi.yaml` names them: `state` (repeated), `stalled`, `parent_id`, `root`,
/// `page_size`, `page_token`, `id_prefix`, `overdue`.
public struct TaskListQuery: Sendable, Equatable {
    public var states: [String] = []
    /// Only stalled (true) or only not stalled (false) tasks; nil for both.
    public var stalled: Bool?
    public var parentID: String?
    /// Only tasks without a parent.
    public var root = false
    public var pageSize: Int64?
    public var pageToken: String?
    /// Only tasks whose id starts with this (`id_prefix`).
    public var idPrefix: String?
    /// Only tasks flagged overdue.
    public var overdue = false

    public init(states: [String] = [], stalled: Bool? = nil, parentID: String? = nil, root: Bool = false,
                pageSize: Int64? = nil, pageToken: String? = nil, idPrefix: String? = nil, overdue: Bool = false) {
        self.overdue = overdue
        self.idPrefix = idPrefix
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
        if overdue { items.append(("overdue", "true")) }
        if let pageSize { items.append(("page_size", String(pageSize))) }
        if let pageToken { items.append(("page_token", pageToken)) }
        if let idPrefix { items.append(("id_prefix", idPrefix)) }
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
        try Self.page(from: try get(query.path).json)
    }

    /// The page a `TaskList` object holds; a total that is no count becomes the page's size.
    static func page(from json: JSONValue?) throws(CLIError) -> TaskPage {
        guard case .object(let list)? = json, case .array(let tasks)? = list["tasks"] else {
            throw .unexpectedReply("the server's task list is not a TaskList object")
        }
        var token: String? = nil
        if case .string(let text)? = list["next_page_token"] { token = text }
        var total = Int64(tasks.count)
        switch list["total_size"] {
        case .integer(let value)?: total = value
        case .number(let value)? where value.isFinite && abs(value) < 9e18: total = Int64(value)
        default: break
        }
        return TaskPage(tasks: tasks, nextPageToken: token, totalSize: max(0, total))
    }

    /// Every page of `query`, one at a time, following `next_page_token` until it is null.
    /// Stops with an error when the server hands out a token it gave before, gives an
    /// empty page that is not the last, or lists more tasks than the most it said match
    /// plus a page (any of which could go on for ever).
    public func forEachPage(_ query: TaskListQuery, _ body: (TaskPage) throws(CLIError) -> Void) throws(CLIError) {
        var query = query
        var page = try listPage(query)
        var seen: Set<String> = []
        var listed = Int64(page.tasks.count), most = page.totalSize
        try body(page)
        while let token = page.nextPageToken {
            guard seen.insert(token).inserted else {
                throw .unexpectedReply("the server repeated the page token '\(DisplayWidth.sanitize(token))'")
            }
            guard !page.tasks.isEmpty else {
                throw .unexpectedReply("the server gave an empty page with a next page token")
            }
            query.pageToken = token
            page = try listPage(query)
            listed += Int64(page.tasks.count)
            most = max(most, page.totalSize)
            guard listed <= most + Int64(page.tasks.count) else {
                throw .unexpectedReply("the server listed \(listed) tasks but said at most \(most) match")
            }
            try body(page)
        }
    }

    /// Every page of `query` joined into one.
    public func listAll(_ query: TaskListQuery) throws(CLIError) -> TaskPage {
        var joined = TaskPage(tasks: [], nextPageToken: nil, totalSize: 0)
        try forEachPage(query) { page throws(CLIError) in
            joined.tasks += page.tasks
            joined.totalSize = page.totalSize
        }
        return joined
    }
}

extension TaskAPI {
    /// The most ids an ambiguous prefix's error names.
    static let ambiguityShown: Int64 = 5

    /// The id `text` stands for: `text` itself when a task has that id; else, when `text`
    /// is the start of a generated id (4 characters or more, as tables shorten them:
    /// `IDDisplay`), the one generated id that starts with it. Two or more such ids:
    /// `ambiguousID`. None: the task's own `not_found` (or, when `lenient`, `text`
    /// unchanged, for a task that may appear later).
    public func resolveID(_ text: String, lenient: Bool = false) throws(CLIError) -> String {
        do {
            _ = try get(Self.taskPath(text))
            return text
        } catch {
            guard error.isNotFound else { throw error }
            if let id = try generatedID(startingWith: text) { return id }
            if lenient { return text }
            throw error
        }
    }

    /// `text` resolved (`resolveID`) when it could be a shortened generated id; any other
    /// text as it is, with no request.
    public func resolveIfShortened(_ text: String, lenient: Bool = false) throws(CLIError) -> String {
        IDDisplay.couldBePrefix(text) ? try resolveID(text, lenient: lenient) : text
    }

    /// Runs `body` with the id `text`; when the server does not know it, with the one
    /// generated id `text` starts (see `resolveID`), if any. Nothing more is asked of
    /// the server when the id is whole.
    public func withTaskID<T>(_ text: String, _ body: (String) throws(CLIError) -> T) throws(CLIError) -> T {
        do {
            return try body(text)
        } catch {
            guard error.isNotFound, let id = try generatedID(startingWith: text) else { throw error }
            return try body(id)
        }
    }

    /// The one generated id starting with `text`; nil when none does or `text` cannot
    /// start one. Only generated ids are looked for: an id a runner chose is given whole,
    /// so a script's `progress build` never lands on a task `build-2`.
    func generatedID(startingWith text: String) throws(CLIError) -> String? {
        guard IDDisplay.couldBePrefix(text) else { return nil }
        let page = try listPage(TaskListQuery(pageSize: 50, idPrefix: text))
        let matches = page.tasks.compactMap { task -> String? in
            guard case .object(let fields) = task, case .string(let id)? = fields["id"], IDDisplay.isGenerated(id),
                  id.hasPrefix(text) else { return nil }
            return id
        }
        if matches.count > 1 {
            throw .ambiguousID(prefix: text, matches: Array(matches.prefix(Int(Self.ambiguityShown))),
                               count: max(Int64(matches.count), page.nextPageToken == nil ? 0 : page.totalSize))
        }
        return matches.first
    }
}

extension CLIError {
    /// Whether the server said the task does not exist (`not_found`).
    var isNotFound: Bool {
        if case .refused(_, _, "not_found") = self { return true }
        return false
    }
}
