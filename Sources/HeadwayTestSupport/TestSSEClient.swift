import Foundation

/// One dispatched Server-Sent Event, or a comment line.
public struct TestEvent: Equatable, Sendable {
    public var id: String?
    public var event: String?
    public var data: String
    public var retry: Int?
    /// True for a comment line (`:`), which clients ignore.
    public var isComment = false

    public init(id: String? = nil, event: String? = nil, data: String = "", retry: Int? = nil, isComment: Bool = false) {
        self.id = id
        self.event = event
        self.data = data
        self.retry = retry
        self.isComment = isComment
    }

    /// The data parsed as a JSON object.
    public var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(data.utf8))) as? [String: Any] ?? [:]
    }
}

/// An event-stream client on a raw socket: it sends the request it is told to, decodes the
/// chunked body and parses SSE frames as the WHATWG standard says, one frame at a time.
/// Reads time out, so a test waiting for an event that never comes fails instead of hanging.
public final class TestSSEClient: @unchecked Sendable {  // a socket and a read buffer, used by one thread at a time
    private let fd: Int32
    private var raw: [UInt8] = []
    private var body: [UInt8] = []
    private var chunked = false
    private var bodyEnded = false
    /// The response status and header fields (names lower-cased).
    public private(set) var status = 0
    public private(set) var headers: [String: String] = [:]
    /// A problem body, when the status is not 200.
    public private(set) var errorBody = ""

    /// Connects to 127.0.0.1:`port` and sends `GET path` with `headers`; a small receive
    /// buffer (`receiveBuffer`) makes a client that does not read fall behind quickly.
    public init(port: Int, path: String = "/v1/events", headers: [(String, String)] = [],
                timeoutSeconds: Int = 5, receiveBuffer: Int? = nil, httpVersion: String = "HTTP/1.1") throws {
        fd = try connectToLoopback(port: port, timeoutSeconds: timeoutSeconds, receiveBuffer: receiveBuffer)
        var request = "GET \(path) \(httpVersion)\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        let bytes = Array((request + "\r\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        try readHead()
    }

    deinit { close(fd) }

    /// Closes the connection (the server notices on its next write).
    public func disconnect() { shutdown(fd, Int32(SHUT_RDWR)) }

    /// The next event or comment; nil when the stream has ended. Throws on timeout.
    public func next() throws -> TestEvent? {
        while true {
            if let event = takeFrame() { return event }
            if bodyEnded { return nil }
            try receiveBody()
        }
    }

    /// The next event that is not a comment.
    public func nextEvent() throws -> TestEvent? {
        while let event = try next() {
            if !event.isComment { return event }
        }
        return nil
    }

    /// Reads events until `predicate` holds for one; returns all read (that one last).
    public func events(until predicate: (TestEvent) -> Bool) throws -> [TestEvent] {
        var seen: [TestEvent] = []
        while let event = try nextEvent() {
            seen.append(event)
            if predicate(event) { return seen }
        }
        throw TestHTTPError("the stream ended first, after \(seen.count) events")
    }

    /// Reads to the end of the stream (bounded by the read timeout).
    public func remainingEvents() throws -> [TestEvent] {
        var seen: [TestEvent] = []
        while let event = try nextEvent() { seen.append(event) }
        return seen
    }

    private func readHead() throws {
        while true {
            if let end = find([13, 10, 13, 10], in: raw) {
                let head = String(decoding: raw[..<end], as: UTF8.self)
                raw.removeFirst(end + 4)
                var lines = head.components(separatedBy: "\r\n")
                let statusLine = lines.removeFirst().split(separator: " ")
                status = statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                chunked = headers["transfer-encoding"]?.lowercased() == "chunked"
                if status != 200 {
                    if let length = headers["content-length"].flatMap(Int.init) {
                        while raw.count < length { guard try readSocket() else { break } }
                        errorBody = String(decoding: raw.prefix(length), as: UTF8.self)
                    }
                    bodyEnded = true
                }
                return
            }
            guard try readSocket() else { throw TestHTTPError("closed before the response head") }
        }
    }

    /// Moves decoded body bytes from `raw` to `body`, reading the socket as needed.
    private func receiveBody() throws {
        if !chunked {
            if raw.isEmpty { guard try readSocket() else { bodyEnded = true; return } }
            body += raw
            raw = []
            return
        }
        while true {
            if let lineEnd = find([13, 10], in: raw) {
                let size = Int(String(decoding: raw[..<lineEnd], as: UTF8.self).split(separator: ";").first ?? "", radix: 16) ?? 0
                if raw.count >= lineEnd + 2 + size + 2 {
                    body += raw[(lineEnd + 2)..<(lineEnd + 2 + size)]
                    raw.removeFirst(lineEnd + 2 + size + 2)
                    if size == 0 { bodyEnded = true }
                    return
                }
            }
            guard try readSocket() else { bodyEnded = true; return }
        }
    }

    /// Parses one frame (up to a blank line) out of `body`.
    private func takeFrame() -> TestEvent? {
        guard let end = find([10, 10], in: body) else { return nil }
        let text = String(decoding: body[..<end], as: UTF8.self)
        body.removeFirst(end + 2)
        var event = TestEvent()
        var dataLines: [String] = []
        var onlyComments = true
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix(":") { continue }
            onlyComments = false
            let (field, value): (Substring, Substring)
            if let colon = line.firstIndex(of: ":") {
                field = line[..<colon]
                var rest = line[line.index(after: colon)...]
                if rest.hasPrefix(" ") { rest = rest.dropFirst() }
                value = rest
            } else {
                (field, value) = (line, "")
            }
            switch field {
            case "id": event.id = String(value)
            case "event": event.event = String(value)
            case "data": dataLines.append(String(value))
            case "retry": event.retry = Int(value)
            default: break
            }
        }
        if onlyComments { return TestEvent(isComment: true) }
        event.data = dataLines.joined(separator: "\n")
        return event
    }

    private func readSocket() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 { throw TestHTTPError("read failed or timed out (errno \(errno))") }
        if count == 0 { return false }
        raw += chunk.prefix(count)
        return true
    }

    private func find(_ marker: [UInt8], in bytes: [UInt8]) -> Int? {
        guard bytes.count >= marker.count else { return nil }
        for start in 0...(bytes.count - marker.count) where bytes[start] == marker[0] {
            if Array(bytes[start..<(start + marker.count)]) == marker { return start }
        }
        return nil
    }
}
