import Foundation

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
    /// The id this request is logged under (from `X-Request-Id`, or made up).
    public var requestID: String
    /// Values taken from `{name}` segments of the matched route.
    public var pathParameters: [String: String] = [:]

    public init(method: String, path: String, query: [HTTPField] = [], headers: [HTTPField] = [],
                body: [UInt8] = [], requestID: String = "test") {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.requestID = requestID
    }

    /// The first value of header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name == lowered }?.value
    }

    /// Every value of query argument `name`.
    public func queryValues(_ name: String) -> [String] {
        query.filter { $0.name == name }.map(\.value)
    }
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
        HTTPResponse(status: status, headers: [HTTPField("Content-Type", contentType)] + headers,
                     body: Array(text.utf8))
    }

    /// An RFC 9457 problem reply for errors found by the HTTP layer itself.
    public static func problem(_ status: Int, code: String, title: String, detail: String,
                               headers: [HTTPField] = []) -> HTTPResponse {
        let text = #"{"type":"https://headway.dev/problems/\#(code.replacingOccurrences(of: "_", with: "-"))","#
            + #""title":\#(quoted(title)),"status":\#(status),"detail":\#(quoted(detail)),"code":"\#(code)"}"#
        return json(status, text, contentType: "application/problem+json", headers: headers)
    }

    private static func quoted(_ text: String) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: [text], options: [.withoutEscapingSlashes])) ?? Data("[\"\"]".utf8)
        return String(decoding: data.dropFirst().dropLast(), as: UTF8.self)
    }
}

/// Sends the response to one request, exactly once, from any thread.
public protocol Responder: Sendable {
    func respond(_ response: HTTPResponse)
}

/// Handles one request; calls `responder` now or later, from any thread.
public typealias HTTPHandler = @Sendable (HTTPRequest, any Responder) -> Void
