import Foundation
import HeadwayTestSupport

/// A real terminal for the command under test: a detached tmux session on a private
/// server socket, of a fixed size, running `command`; read back with `capture-pane`.
final class TmuxPane {
    private let socket = "headway-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    private var panePID: Int32 = 0

    init(columns: Int, rows: Int, command: String) throws {
        // The server new-session starts would keep Foundation's watch on the client open:
        // spawn and reap that one directly.
        let started = spawnAndWait(["/usr/bin/tmux", "-L", socket, "new-session", "-d", "-x", "\(columns)", "-y", "\(rows)",
                                    "-s", "test", command])
        guard started == 0 else { throw TestHTTPError("tmux new-session exited \(started)") }
        panePID = Int32(try tmux("display-message", "-p", "-t", "test", "#{pane_pid}")
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    /// The visible screen as text, one line per row, trailing blanks removed.
    func screen() -> String { (try? tmux("capture-pane", "-p", "-t", "test")) ?? "" }

    /// The screen with its colours, as SGR escape sequences (`capture-pane -e`).
    func styledScreen() -> String { (try? tmux("capture-pane", "-p", "-e", "-t", "test")) ?? "" }

    /// Types `keys` (tmux key names: `C-c`, `Enter`, or text).
    func sendKeys(_ keys: String...) {
        _ = try? tmux(["send-keys", "-t", "test"] + keys)
    }

    /// Changes the terminal's size, as a user resizing the window does (the command gets
    /// SIGWINCH).
    func resize(columns: Int, rows: Int) {
        _ = try? tmux("resize-window", "-t", "test", "-x", "\(columns)", "-y", "\(rows)")
    }

    /// Kills the command and the tmux server.
    func close() {
        if panePID > 0 { kill(panePID, SIGKILL) }
        _ = spawnAndWait(["/usr/bin/tmux", "-L", socket, "kill-server"])
    }

    private func tmux(_ arguments: String...) throws -> String { try tmux(arguments) }

    private func tmux(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/tmux")
        process.arguments = ["-L", socket] + arguments
        process.environment = ["PATH": "/usr/bin:/bin", "TERM": "xterm-256color"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}

/// `text` as one word for /bin/sh.
func shellQuoted(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
}

/// A stand-in event server on 127.0.0.1 that answers each `GET /v1/events` with a
/// snapshot whose id is 7 and then sends nothing more, keeping the connection open.
final class SilentEventServer {
    private let listener: Int32
    private var connections: [Int32] = []
    let url: String

    init() throws {
        (listener, url) = try listenOnLoopback()
    }

    /// Accepts the next connection (waiting at most `seconds`), reads its request head,
    /// answers with the snapshot and returns the head.
    func acceptRequest(within seconds: Int32) throws -> String {
        var wait = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&wait, 1, seconds * 1000) == 1 else { throw TestHTTPError("no connection within \(seconds) s") }
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else { throw TestHTTPError("accept failed") }
        connections.append(connection)
        var head: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !head.ends(with: Array("\r\n\r\n".utf8)) {
            var readable = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            guard poll(&readable, 1, seconds * 1000) == 1 else { throw TestHTTPError("no request head") }
            let count = read(connection, &buffer, buffer.count)
            guard count > 0, head.count < 65_536 else { throw TestHTTPError("request head cut short") }
            head += buffer[0..<count]
        }
        let reply = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
            + "retry: 100\nid: 7\nevent: snapshot\ndata: {\"tasks\":[]}\n\n"
        _ = reply.utf8CString.withUnsafeBufferPointer { write(connection, $0.baseAddress, $0.count - 1) }
        return String(decoding: head, as: UTF8.self)
    }

    func close() {
        for connection in connections { Glibc.close(connection) }
        Glibc.close(listener)
    }
}

/// A socket listening on a free port of 127.0.0.1, and its `http://` URL.
func listenOnLoopback() throws -> (Int32, String) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound, listen(fd, 16) == 0 else {
        Glibc.close(fd)
        throw TestHTTPError("cannot listen on loopback")
    }
    return (fd, "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))")
}

extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}

/// A stand-in HTTP server on 127.0.0.1: each request (one per connection) is recorded
/// and answered by `reply` with its status and JSON body, then the connection closes.
final class StubServer: @unchecked Sendable {
    typealias Reply = (status: Int, body: String)
    private let listener: Int32
    private let reply: @Sendable (_ method: String, _ path: String, _ index: Int) -> Reply
    private let lock = NSLock()
    private var recorded: [String] = []
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)
    let url: String

    /// Starts serving; `reply` gets each request's method, path and number (from 0).
    init(reply: @escaping @Sendable (_ method: String, _ path: String, _ index: Int) -> Reply) throws {
        self.reply = reply
        (listener, url) = try listenOnLoopback()
        Thread { [self] in serve() }.start()
    }

    /// The requests so far: `METHOD PATH BODY`, in order.
    var requests: [String] { lock.withLock { recorded } }

    private func serve() {
        defer { done.signal() }
        while !lock.withLock({ stopped }) {
            var wait = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&wait, 1, 50) == 1 else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            handle(connection)
            Glibc.close(connection)
        }
    }

    private func handle(_ connection: Int32) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func headEnd() -> Int? {
            guard received.count >= 4 else { return nil }
            return (0...(received.count - 4)).first { Array(received[$0..<($0 + 4)]) == Array("\r\n\r\n".utf8) }
        }
        var end: Int?
        var bodyLength = 0
        while true {
            if end == nil, let found = headEnd() {
                end = found
                let head = String(decoding: received[..<found], as: UTF8.self).lowercased()
                if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) {
                    bodyLength = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let end, received.count >= end + 4 + bodyLength { break }
            var readable = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            guard poll(&readable, 1, 5000) == 1 else { return }
            let count = read(connection, &buffer, buffer.count)
            guard count > 0, received.count < 1 << 20 else { return }
            received += buffer[0..<count]
        }
        let head = String(decoding: received[..<end!], as: UTF8.self)
        let words = head.split(separator: " ", maxSplits: 2)
        let method = String(words.first ?? ""), path = words.count > 1 ? String(words[1]) : ""
        let body = String(decoding: received[(end! + 4)...], as: UTF8.self)
        let index: Int = lock.withLock {
            recorded.append("\(method) \(path) \(body)")
            return recorded.count - 1
        }
        let (status, json) = reply(method, path, index)
        let text = "HTTP/1.1 \(status) X\r\nContent-Type: \(status < 400 ? "application/json" : "application/problem+json")\r\n"
            + "Content-Length: \(json.utf8.count)\r\nConnection: close\r\n\r\n" + json
        _ = text.utf8CString.withUnsafeBufferPointer { write(connection, $0.baseAddress, $0.count - 1) }
    }

    /// Stops serving and closes the socket.
    func close() {
        lock.withLock { stopped = true }
        done.wait()
        Glibc.close(listener)
    }
}
