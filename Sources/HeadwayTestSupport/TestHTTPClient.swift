import Foundation

/// A response as read off the wire by `TestHTTPClient`.
public struct TestResponse: Sendable {
    public var status: Int
    /// Header names lower-cased; a repeated header keeps its last value.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// The body parsed as a JSON object (empty when it is not one).
    public var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
    }
}

/// Why a test exchange failed.
public struct TestHTTPError: Error, CustomStringConvertible {
    public var description: String
    /// The server closed (or reset) the connection: an answer in itself, unlike a timeout.
    public var peerClosed: Bool
    public init(_ description: String, peerClosed: Bool = false) {
        self.description = description
        self.peerClosed = peerClosed
    }
}

/// What a server did with a request: answered it, or closed the connection.
public enum TestReply: Sendable {
    case response(TestResponse)
    case closed
}

/// A deliberately plain HTTP/1.1 client on a blocking socket, so tests control every byte
/// sent (bad bodies, chunked uploads, missing headers) and read exactly what came back.
/// Every read times out after a few seconds, so a test can never hang. One thread uses a
/// client at a time.
public final class TestHTTPClient: @unchecked Sendable {  // a socket and a read buffer, used by one thread at a time
    private let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to 127.0.0.1:`port` (from `sourceAddress`, another loopback address such
    /// as 127.0.0.2, to be another client); a small `receiveBuffer` makes a client that does
    /// not read leave the server's bytes waiting sooner.
    public init(port: Int, timeoutSeconds: Int = 5, receiveBuffer: Int? = nil, sourceAddress: String? = nil) throws {
        fd = try connectToLoopback(port: port, timeoutSeconds: timeoutSeconds, receiveBuffer: receiveBuffer,
                                   sourceAddress: sourceAddress)
    }

    deinit { close(fd) }

    /// Makes the close at the end of this client's life a reset (RST) instead of a FIN, as a
    /// client that aborts its connection sends.
    public func resetWhenClosed() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Sends raw bytes; a connection the server has closed is an error (`peerClosed`), not
    /// a SIGPIPE that would end the tests.
    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else {
                throw TestHTTPError("write failed (errno \(errno))", peerClosed: errno == EPIPE || errno == ECONNRESET)
            }
            offset += written
        }
    }

    /// Sends raw text.
    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Sends one request and reads its response. A JSON body gets
    /// `Content-Type: application/json` unless `headers` sets one.
    public func request(_ method: String, _ path: String, json body: String? = nil,
                        headers: [(String, String)] = []) throws -> TestResponse {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        var headers = headers
        if let body {
            if !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                headers.append(("Content-Type", "application/json"))
            }
            headers.append(("Content-Length", "\(body.utf8.count)"))
        }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        try send(head + "\r\n" + (body ?? ""))
        return try readResponse()
    }

    /// Reads one line (without its CRLF), e.g. an interim `100 Continue` status line.
    public func readLine() throws -> String {
        let lineEnd = try readUntil([13, 10])
        defer { buffer.removeFirst(lineEnd + 2) }
        return String(decoding: buffer[..<lineEnd], as: UTF8.self)
    }

    /// Sends `bytes` and reads the reply, or sees the connection closed (at any point); throws
    /// when the server neither answers nor closes in time.
    public func exchange(_ bytes: [UInt8]) throws -> TestReply {
        do {
            try send(bytes)
            return .response(try readResponse())
        } catch let error as TestHTTPError where error.peerClosed {
            return .closed
        }
    }

    /// Reads one response (body by Content-Length, chunked, or up to the close).
    public func readResponse() throws -> TestResponse {
        let headEnd = try readUntil([13, 10, 13, 10])
        let head = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + 4)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw TestHTTPError("bad status line: \(head)") }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body: [UInt8] = []
        if let length = headers["content-length"].flatMap(Int.init) {
            try fill(length)
            body = Array(buffer.prefix(length))
            buffer.removeFirst(length)
        } else if headers["transfer-encoding"]?.lowercased() == "chunked" {
            while true {
                let lineEnd = try readUntil([13, 10])
                let size = Int(String(decoding: buffer[..<lineEnd], as: UTF8.self).split(separator: ";")[0], radix: 16) ?? 0
                buffer.removeFirst(lineEnd + 2)
                try fill(size + 2)
                body += buffer.prefix(size)
                buffer.removeFirst(size + 2)
                if size == 0 { break }
            }
        } else if status != 204 && status != 304 {
            while try readMore() {}
            body = buffer
            buffer = []
        }
        return TestResponse(status: status, headers: headers, body: body)
    }

    private func readUntil(_ marker: [UInt8]) throws -> Int {
        var searchFrom = 0
        while true {
            if buffer.count >= marker.count {
                for start in searchFrom...(buffer.count - marker.count) where Array(buffer[start..<start + marker.count]) == marker {
                    return start
                }
                searchFrom = buffer.count - marker.count + 1
            }
            guard try readMore() else { throw TestHTTPError("connection closed before a complete response", peerClosed: true) }
        }
    }

    private func fill(_ count: Int) throws {
        while buffer.count < count {
            guard try readMore() else { throw TestHTTPError("connection closed in the middle of a body") }
        }
    }

    /// Reads what is available; false at end of stream.
    @discardableResult
    private func readMore() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 { throw TestHTTPError("read failed or timed out (errno \(errno))", peerClosed: errno == ECONNRESET) }
        if count == 0 { return false }
        buffer += chunk.prefix(count)
        return true
    }
}

/// A fresh temporary directory, removed by `remove()`.
public struct TemporaryDirectory {
    public let path: String

    public init() {
        path = NSTemporaryDirectory() + "headway-test-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// A path inside the directory.
    public func file(_ name: String) -> String { path + "/" + name }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, whose reads and writes time out
/// after `timeoutSeconds`; `receiveBuffer` sets a small receive buffer (a slow reader);
/// `sourceAddress` binds it to another local address first.
func connectToLoopback(port: Int, timeoutSeconds: Int, receiveBuffer: Int? = nil,
                       sourceAddress: String? = nil) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestHTTPError("socket() failed") }
    var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    if var size = receiveBuffer.map(Int32.init) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    if let sourceAddress {
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(sourceAddress)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(fd)
            throw TestHTTPError("cannot bind to \(sourceAddress)")
        }
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        close(fd)
        throw TestHTTPError("cannot connect to 127.0.0.1:\(port)")
    }
    return fd
}
