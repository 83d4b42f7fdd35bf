import Foundation
import Lifecycle
import Synchronization

/// One name/value pair of a query string or header block.
public struct HTTPField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A complete HTTP request: head and body.
public struct HTTPRequest: Sendable {
    /// `GET`, `POST`, …
    public var method: String
    /// The path, without the query string.
    public var path: String
    /// Query arguments in the order sent; a name may repeat.
    public var query: [HTTPField]
    /// Header fields; names are lower-case.
    public var headers: [HTTPField]
    /// The body bytes (at most the server's body limit).
    public var body: [UInt8]
    /// The id this request is known by in logs and replies, given by a middleware (empty
    /// until one does).
    public var requestID: String
    /// Values taken from `{name}` segments of the matched route.
    public var pathParameters = PathParameters()
    /// Where the router notes the pattern of the route it matched, for whoever wants it once
    /// the exchange is over (`HTTPPipeline.observeExchange`: metrics, logs): the server's
    /// exchange when the pipeline observes exchanges, nil otherwise (the router then notes
    /// nothing).
    public var routeNote: (any RouteNote)?
    /// Whether the HTTP layer refuses the request (`HTTPPipeline.refuse`): the middleware
    /// then sees a request that no route will take, and whose answer is decided.
    public var isRefused = false
    /// A number standing for the client: its address, the same for every connection from
    /// it (0 when unknown), until the application knows it better (by the token it
    /// presented, say: behind a proxy every client has the proxy's address). What is
    /// shared between clients in turns (the API reads) is shared by it.
    public var client = 0
    /// A number standing for the client's address alone (0 when unknown), whatever `client`
    /// is made to stand for.
    public var clientAddress = 0
    /// The reply bytes the server reserved for this request from its head, before reading
    /// its body (`MicroHTTPServer.Configuration.largerBodyReplyBytes`): the handler may
    /// shrink it once it knows its reply's size; it is released when the request is
    /// answered, or its exchange ends unanswered.
    public var replyReservation: ReplyReservation?

    public init(method: String, path: String, query: [HTTPField] = [], headers: [HTTPField] = [],
                body: [UInt8] = [], requestID: String = "") {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.requestID = requestID
    }

    /// The first value of header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        // Callers mostly ask in lower case already: no new string then.
        let lowered = name.hasASCIICapital ? name.lowercased() : name
        // Lengths first: most names differ in length, and comparing the lengths of two
        // native strings is two loads, where `==` on unequal strings is a call.
        let length = lowered.utf8.count
        return headers.first { $0.name.utf8.count == length && $0.name == lowered }?.value
    }

    /// How many header lines are named `loweredName` (given in lower case).
    public func headerCount(_ loweredName: String) -> Int {
        let length = loweredName.utf8.count
        var count = 0
        for field in headers where field.name.utf8.count == length && field.name == loweredName { count += 1 }
        return count
    }

    /// The query arguments as (name, value) pairs, in the order sent.
    public var queryParameters: [(name: String, value: String)] { query.map { ($0.name, $0.value) } }

    /// Every value of query argument `name`.
    public func queryValues(_ name: String) -> [String] {
        query.filter { $0.name == name }.map(\.value)
    }
}

/// The values of a matched route's `{name}` segments, found by name. A route has one or
/// two, so they are kept in order in a small array and found by a scan: a dictionary cost
/// a table and two hashes of the name on every routed request.
public struct PathParameters: Sendable, ExpressibleByDictionaryLiteral {
    private var pairs: [(name: String, value: String)] = []

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { append(name, value) }
    }

    /// The value of parameter `name`, if the route has one.
    public subscript(name: String) -> String? { pairs.first { $0.name == name }?.value }

    /// Adds parameter `name` (a pattern names each parameter once).
    mutating func append(_ name: String, _ value: String) { pairs.append((name, value)) }
}

/// An HTTP response: a complete body, or a stream written over time.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [HTTPField]
    public var body: [UInt8]
    /// When set, the body is this stream (chunked) instead of `body`.
    public var stream: ResponseStream?

    public init(status: Int, headers: [HTTPField] = [], body: [UInt8] = [], stream: ResponseStream? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.stream = stream
    }

    /// A JSON reply (`application/json`, or another JSON media type).
    public static func json(_ status: Int, _ text: String, contentType: String = "application/json",
                            headers: [HTTPField] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: fields(contentType: contentType, headers), body: Array(text.utf8))
    }

    /// A JSON response whose text is already UTF-8 bytes.
    public static func json(_ status: Int, bytes: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: fields(contentType: "application/json", []), body: bytes)
    }

    /// `Content-Type` then `headers`, in an array with room for the few that middlewares
    /// add on the way out (the request id, say): one allocation a response.
    private static func fields(contentType: String, _ headers: [HTTPField]) -> [HTTPField] {
        var fields: [HTTPField] = []
        fields.reserveCapacity(headers.count + 3)
        fields.append(HTTPField("Content-Type", contentType))
        fields.append(contentsOf: headers)
        return fields
    }
}

/// What the HTTP layer refuses by itself, before or instead of a handler: the application
/// decides how each looks (`HTTPPipeline`'s renderer).
public enum HTTPRefusal: Equatable, Sendable {
    /// The body is larger than the server's limit (413).
    case bodyTooLarge(limit: Int)
    /// The server is stopping (503).
    case shuttingDown
    /// No route has this path (404).
    case routeNotFound
    /// Routes with this path take other methods (405).
    case methodNotAllowed(allowed: [String])
    /// The request target holds a NUL byte, raw or percent-encoded (400).
    case nulInTarget
    /// The path holds an encoded slash (`%2F`), which the library would decode into a
    /// separator of the path's segments: `/v1/tasks/p1%2Fcancel` is not `/v1/tasks/p1/cancel` (400).
    case encodedSlashInPath
    /// The query has more parameters than the server's limit (431).
    case tooManyQueryParameters(limit: Int)
    /// The request target is longer than the server's limit (414).
    case targetTooLong(limit: Int)
    /// The body's length can be read more than one way (RFC 9112 §6.3): more than one
    /// `Content-Length`, `Transfer-Encoding` with `Content-Length`, more than one
    /// `Transfer-Encoding`, or one other than `chunked` (400; the connection is closed, so
    /// nothing after it is read as a request). Says which.
    case badFraming(String)
    /// A header line that is not `name: value` with a token as its name: whitespace or
    /// another character not allowed before the colon, or a line folded onto the previous
    /// one (obs-fold) (400; the connection is closed). Says which.
    case malformedHeader(String)
    /// An HTTP/1.1 request without `Host` (400; the connection is closed).
    case hostMissing
    /// A request line that is not `METHOD SP target SP HTTP/1.x` (400; the connection is
    /// closed).
    case malformedRequestLine
    /// A request of another HTTP version than 1.x (505; the connection is closed).
    case versionNotSupported
    /// A request head larger than a connection's memory holds, each header line and query
    /// parameter weighing 64 bytes besides its text (`HeadScreen`; 431, the connection is
    /// closed).
    case headTooLarge(limit: Int)
    /// Replies wait unread: the client's share of `UnreadReplies`, or everyone's, left no
    /// room for the reply this request's head asked for (503; its body was dropped as it came).
    /// Says what the client and everyone held.
    case repliesUnread(clientBytes: Int, totalBytes: Int)
}

/// What the server checks of a request's head before anything reads its body or routes
/// it: a head a proxy in front could read otherwise is refused, and its connection closed.
struct HeadCheck: Sendable {
    /// One header line as the library gave it: its name (ASCII letters in lower case), its
    /// value, whether the library folded a continuation line into it, and whether the whole
    /// value as received (past a NUL, which ends `value`) holds a control character.
    struct Field: Sendable {
        var name: String
        var value: String
        var folded = false
        var controlInValue = false
    }

    /// What `malformedHeader` says of a folded line, a name that is not a token, a control
    /// character in a value.
    static let foldedReason = "a header line continued on the next one (obs-fold)"
    static let nameReason = "a header name that is not a token (whitespace or another character not allowed before the colon)"
    static let controlReason = "a control character in a header value (only a tab may appear there)"

    /// The refusal a request with `fields` calls for, if any.
    static func refusal(for fields: [Field], isHTTP11: Bool) -> HTTPRefusal? {
        var lengths = 0
        var hosts = 0
        var encodings: [String] = []
        for field in fields {
            if field.folded { return .malformedHeader(foldedReason) }
            if field.name.isEmpty || !field.name.utf8Satisfies(isTokenByte) { return .malformedHeader(nameReason) }
            if field.controlInValue { return .malformedHeader(controlReason) }
            switch field.name {
            case "content-length": lengths += 1
            case "transfer-encoding": encodings.append(field.value)
            case "host": hosts += 1
            default: break
            }
        }
        if lengths > 1 { return .badFraming("more than one Content-Length") }
        if encodings.count > 1 { return .badFraming("more than one Transfer-Encoding") }
        if let encoding = encodings.first {
            if lengths > 0 { return .badFraming("both Transfer-Encoding and Content-Length") }
            if encoding.lowercased() != "chunked" { return .badFraming("a Transfer-Encoding other than chunked") }
        }
        if isHTTP11 && hosts == 0 { return .hostMissing }
        return nil
    }

    /// Whether a field value's bytes hold a control character that RFC 9110 §5.5 allows in
    /// no field value: 0x00–0x08, 0x0A–0x1F or DEL (a tab, 0x09, is allowed). A value that
    /// carries one means something else to each reader (a NUL ends it for C code, a CR or a
    /// bare LF ends the line for some proxies, ESC moves a terminal showing a log).
    static func hasControlCharacter(_ value: UnsafeRawBufferPointer) -> Bool {
        value.contains { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7f }
    }

    /// Whether `byte` is a `tchar` of RFC 9110 §5.6.2.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
             UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
             UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }
}

/// What the server checks of a request target before libmicrohttpd parses it (the library
/// keeps every query parameter in the connection's fixed memory, and cannot even answer
/// once that is full).
struct TargetCheck: Sendable {
    /// More query parameters are refused (431).
    var maximumQueryParameters: Int
    /// Longer targets are refused (414).
    var maximumTargetBytes: Int

    /// The refusal `target` (raw, as sent) calls for, if any.
    func refusal(for target: some Collection<UInt8>) -> HTTPRefusal? {
        if target.count > maximumTargetBytes { return .targetTooLong(limit: maximumTargetBytes) }
        // Most targets hold neither `%` nor `?`: one pass finds that, and nothing is refused.
        guard target.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "?") }) else { return nil }
        if Self.containsEncodedNUL(target) { return .nulInTarget }
        let question = target.firstIndex(of: UInt8(ascii: "?"))
        if Self.containsEncodedSlash(target[..<(question ?? target.endIndex)]) { return .encodedSlashInPath }
        guard let question else { return nil }
        let query = target[target.index(after: question)...]
        let parameters = query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true).count
        return parameters > maximumQueryParameters ? .tooManyQueryParameters(limit: maximumQueryParameters) : nil
    }

    /// The path of `target` (raw, as sent: before the `?`) as an exchange's record names it,
    /// when the path the library decodes from it would not show what was sent: nil for a
    /// path of printable ASCII without `%` (the decoded path is the same), else the raw path
    /// with every byte outside printable ASCII percent-encoded (`%1B`, `%C3%A9`), so that a
    /// log line shows `/v1/tasks/p1%00/../x` where the decoded path, cut at the NUL, said
    /// `/v1/tasks/p1`, and no byte of it can start a line or a terminal sequence of its own.
    /// `cutByNUL`: the target went on after a raw NUL, which ended `target` (the rest is
    /// not read: nothing says how far the library's line goes); `%00` then ends the path.
    static func pathAsSent(_ target: UnsafeRawBufferPointer, cutByNUL: Bool) -> String? {
        let path = target.prefix { $0 != UInt8(ascii: "?") }
        let isPrintable = { (byte: UInt8) in byte > 0x20 && byte < 0x7f }
        guard cutByNUL || path.contains(where: { $0 == UInt8(ascii: "%") || !isPrintable($0) }) else { return nil }
        let hex = Array("0123456789ABCDEF".utf8)
        var escaped: [UInt8] = []
        escaped.reserveCapacity(path.count + 8)
        for byte in path {
            if isPrintable(byte) {
                escaped.append(byte)
            } else {
                escaped += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0f)]]
            }
        }
        if cutByNUL && path.count == target.count { escaped += Array("%00".utf8) }
        return String(decoding: escaped, as: UTF8.self)
    }

    /// Whether `path` holds `%2F` or `%2f`.
    private static func containsEncodedSlash(_ path: some Collection<UInt8>) -> Bool {
        containsEscape(in: path) { $0 == UInt8(ascii: "2") && $1 | 0x20 == UInt8(ascii: "f") }
    }

    /// Whether `target` holds `%00`.
    private static func containsEncodedNUL(_ target: some Collection<UInt8>) -> Bool {
        containsEscape(in: target) { $0 == UInt8(ascii: "0") && $1 == UInt8(ascii: "0") }
    }

    /// Whether `bytes` holds a `%` whose next two bytes `matches` accepts: a scan from `%`
    /// to `%` in place (most targets have none), without a copy of the bytes.
    private static func containsEscape(in bytes: some Collection<UInt8>, _ matches: (UInt8, UInt8) -> Bool) -> Bool {
        var rest = bytes[...]
        while let percent = rest.firstIndex(of: UInt8(ascii: "%")) {
            let first = bytes.index(after: percent)
            guard first != bytes.endIndex else { return false }
            let second = bytes.index(after: first)
            guard second != bytes.endIndex else { return false }
            if matches(bytes[first], bytes[second]) { return true }
            rest = bytes[first...]
        }
        return false
    }
}

/// How an exchange ended: the status sent (nil when the connection went away first) and
/// how long it took from the request's head to the end.
public struct HTTPCompletion: Sendable, Equatable {
    public var status: Int?
    public var durationMicroseconds: Int64

    public init(status: Int?, durationMicroseconds: Int64) {
        self.status = status
        self.durationMicroseconds = durationMicroseconds
    }
}

/// A route's pattern (e.g. `/v1/tasks/{id}/progress`), made once when the route is added:
/// what a request matched is noted as a reference to it, so noting, comparing and hashing it
/// cost no string work (two patterns are the same series when they are the same object).
public final class RoutePattern: Sendable, Hashable {
    public let text: String

    public init(_ text: String) { self.text = text }

    public static func == (lhs: RoutePattern, rhs: RoutePattern) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// Where the router notes the pattern of the route a request matched (`HTTPRequest.routeNote`):
/// the exchange itself, when the pipeline observes exchanges, or a `MatchedRoute`.
public protocol RouteNote: AnyObject, Sendable {
    /// Notes `route`; the first route noted stays.
    func note(_ route: RoutePattern)
}

/// The route a request matched, noted by the router on the server's thread and read when
/// the exchange is over: nil while no route matched (an unknown path, a wrong method, a
/// refusal before routing). No lock. The first route noted stays.
///
/// The route is kept as the address of a retained `RoutePattern` in an `Atomic<UInt>`
/// (0 for none), not in an `AtomicLazyReference`, whose generic code looked up the type
/// metadata of `Unmanaged` at every load and store (a tenth of the router's cost).
struct NotedRoute: ~Copyable, Sendable {
    private let matched = Atomic<UInt>(0)

    init() {}

    deinit {
        let address = matched.load(ordering: .acquiring)
        if address != 0 { Unmanaged<RoutePattern>.fromOpaque(UnsafeRawPointer(bitPattern: address)!).release() }
    }

    /// The route matched, if any.
    var route: RoutePattern? {
        let address = matched.load(ordering: .acquiring)
        guard address != 0 else { return nil }
        return Unmanaged<RoutePattern>.fromOpaque(UnsafeRawPointer(bitPattern: address)!).takeUnretainedValue()
    }

    func note(_ route: RoutePattern) {
        let retained = Unmanaged.passRetained(route)
        let address = UInt(bitPattern: retained.toOpaque())
        if !matched.compareExchange(expected: 0, desired: address, ordering: .acquiringAndReleasing).exchanged {
            retained.release()
        }
    }
}

/// A `RouteNote` of its own (one allocation), for a request that is not an exchange of the
/// server's: tests, a pipeline driven by hand.
public final class MatchedRoute: RouteNote {
    private let noted = NotedRoute()

    public init() {}

    /// The route matched, if any.
    public var route: RoutePattern? { noted.route }

    /// The pattern matched, if any.
    public var pattern: String? { route?.text }

    public func note(_ route: RoutePattern) { noted.note(route) }
}

/// Sends the response to one request, exactly once, from any thread.
public protocol Responder: Sendable {
    /// Sends `response`, which is taken rather than borrowed: a responder that changes it
    /// on its way (adds a header) and passes it on makes no copy of its own first.
    func respond(_ response: consuming HTTPResponse)
    /// Runs `handler` once the exchange is over (a stream: when it ends), with what was sent.
    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void)
}


/// Handles one request; calls `responder` now or later, from any thread.
public typealias HTTPHandler = @Sendable (HTTPRequest, any Responder) -> Void

extension String {
    /// Whether every UTF-8 byte of the string satisfies `predicate`, checked on the bytes in
    /// place when the string is native (as received text is): a loop over `utf8` steps
    /// String's index at each byte and costs several times more.
    func utf8Satisfies(_ predicate: (UInt8) -> Bool) -> Bool {
        utf8.withContiguousStorageIfAvailable { $0.allSatisfy(predicate) } ?? utf8.allSatisfy(predicate)
    }

    /// Whether the string holds an ASCII capital letter.
    var hasASCIICapital: Bool { !utf8Satisfies { $0 &- UInt8(ascii: "A") >= 26 } }

    /// The NUL-terminated `cString` with its ASCII capitals in lower case, made in one pass
    /// (a header name: `String(cString:)` then `lowercased()` would make two strings, the
    /// second by Unicode's rules, which change nothing more in a name that is a token).
    /// Bytes that are not UTF-8 are repaired as `String(cString:)` repairs them.
    init(lowercasingASCII cString: UnsafePointer<CChar>) {
        let count = strlen(cString)
        self.init(unsafeUninitializedCapacity: count) { buffer in
            for index in 0..<count {
                let byte = UInt8(bitPattern: cString[index])
                buffer[index] = byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte
            }
            return count
        }
    }
}
