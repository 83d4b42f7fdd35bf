import Foundation
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HTTPServer

/// One request from a client bound to `source` (127.0.0.2 is loopback too on Linux: another
/// client address): the response's text, or nil if the server closed the connection.
private func requestFrom(_ source: String, port: Int, path: String = "/x") throws -> String? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestHTTPError("socket() failed") }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    func address(_ host: String, _ port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        return address
    }
    var local = address(source, 0), server = address("127.0.0.1", port)
    let length = socklen_t(MemoryLayout<sockaddr_in>.size)
    guard withUnsafePointer(to: &local, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }) == 0,
          withUnsafePointer(to: &server, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) } }) == 0
    else { throw TestHTTPError("cannot connect from \(source)") }
    let request = Array("GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
    guard write(fd, request, request.count) == request.count else { return nil }
    var reply: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = read(fd, &chunk, chunk.count)
        if count > 0 { reply += chunk.prefix(count) } else if count == 0 || errno == ECONNRESET { break } else {
            throw TestHTTPError("no answer from the server (errno \(errno))")
        }
    }
    guard let end = reply.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
    return String(decoding: reply[end.upperBound...], as: UTF8.self)
}

/// `eventually`, waking the server's accept loop before each look: with a manual clock it
/// checks its deadlines only when woken.
private func eventuallyWakingTheLoop(_ running: RunningServer, _ condition: () -> Bool) -> Bool {
    eventually {
        running.server.sorter?.wake()
        return condition()
    }
}

/// Floods through a real server: the cap per client address holds for the whole life of a
/// connection, and established clients are served while half-sent heads fill the waiting set.
@Suite(.serialized) struct ConnectionFloodTests {
    private func server(_ adjust: (inout MicroHTTPServer.Configuration) -> Void) throws -> RunningServer {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamPaths = ["/stream"]
        adjust(&configuration)
        return try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { request, responder in
            responder.respond(HTTPResponse(status: 200, body: Array("\(request.method) \(request.path)".utf8)))
        }))
    }

    @Test func theCapPerAddressHoldsWhileItsConnectionsLiveAndSparesOtherAddresses() throws {
        let running = try server { $0.maximumConnectionsPerAddress = 20 }
        defer { running.shutdown() }
        var clients = try (0..<20).map { _ in try TestHTTPClient(port: running.port) }
        for client in clients { #expect(try client.request("GET", "/x").text == "GET /x", "up to the cap: served") }
        let past = try TestHTTPClient(port: running.port)
        guard case .closed = try past.exchange(Array("GET /x HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) else {
            Issue.record("a 21st connection from one address was served")
            return
        }
        #expect(try requestFrom("127.0.0.2", port: running.port) == "GET /x", "another address is served")
        #expect(try clients[0].request("GET", "/y").text == "GET /y", "the connections open are still served")
        clients.removeLast()  // closed by the client: the daemon's close notice makes room
        #expect(eventually { (try? requestFrom("127.0.0.1", port: running.port)) == "GET /x" })
    }

    @Test func establishedAndNewClientsAreServedWhileHalfHeadsFillTheWaitingSet() throws {
        let running = try server { $0.maximumWaitingConnections = 8 }
        defer { running.shutdown() }
        let established = try TestHTTPClient(port: running.port)
        #expect(try established.request("GET", "/before").text == "GET /before")
        let halfHeads = try (0..<8).map { _ in try TestHTTPClient(port: running.port) }
        for client in halfHeads { try client.send("GET /x HTTP/1.1\r\nHost: x\r\n") }
        #expect(eventually { running.server.connectionsBeingSorted == 8 })
        #expect(try established.request("GET", "/during").text == "GET /during", "a kept-alive client is served")
        let newcomer = try TestHTTPClient(port: running.port)
        #expect(try newcomer.request("GET", "/new").text == "GET /new", "a new client is served at once")
        #expect(running.server.connectionsBeingSorted <= 8)
    }

    @Test func aStreamHeadWithBareLineFeedsIsServedWithoutWaiting() throws {
        let clock = ManualMonotonicClock()  // never moves: no timeout can be what hands it over
        let running = try server { $0.sortingClock = { clock.read() } }
        defer { running.shutdown() }
        let client = try TestHTTPClient(port: running.port)
        try client.send("GET /stream HTTP/1.1\nHost: x\n\n")
        #expect(try client.readResponse().text == "GET /stream")
    }

    /// Every head has the head timeout, counted from the previous response: a kept-alive
    /// connection that dribbles its next head is closed at its deadline, while one that
    /// sends its next request in time is served (and has the timeout again afterwards).
    @Test func aKeptAliveConnectionDribblingItsNextHeadIsClosedWhileOneInTimeIsServed() throws {
        let clock = ManualMonotonicClock()
        let running = try server {
            $0.sortingClock = { clock.read() }
            $0.headTimeoutNanoseconds = 10_000_000_000
        }
        defer { running.shutdown() }
        let dribbling = try TestHTTPClient(port: running.port), inTime = try TestHTTPClient(port: running.port)
        #expect(try dribbling.request("GET", "/a").text == "GET /a")
        #expect(try inTime.request("GET", "/a").text == "GET /a")
        #expect(eventually { running.server.requestDeadlines.count == 2 }, "both wait for their next head")
        try dribbling.send("GET /b HTTP/1.1\r\nHost: x\r\n")
        clock.advance(by: 9_000_000_000)
        try dribbling.send("X-More: 1\r\n")
        #expect(try inTime.request("GET", "/b").text == "GET /b", "a next request in time is served")
        #expect(eventually { running.server.requestDeadlines.count == 2 }, "and waits for its next head again")
        clock.advance(by: 1_000_000_001)
        #expect(eventuallyWakingTheLoop(running) { running.server.requestDeadlines.count == 1 },
                "the dribbling connection's time is up")
        guard case .closed = try dribbling.exchange(Array("X-Last: 1\r\n\r\n".utf8)) else {
            Issue.record("a kept-alive connection dribbling its next head was served past the head timeout")
            return
        }
        #expect(try inTime.request("GET", "/c").text == "GET /c")
    }

    /// A body must be whole within the body timeout of its head (not the head timeout): one
    /// dribbled is closed at its deadline and counted as `body_timeout`, one whole in time
    /// is served.
    @Test func aBodyDribbledPastItsDeadlineIsClosedWhileOneInTimeIsServed() throws {
        let clock = ManualMonotonicClock()
        let refused = Locked<[ConnectionRefusal: Int]>([:])
        let running = try server {
            $0.sortingClock = { clock.read() }
            $0.headTimeoutNanoseconds = 10_000_000_000
            $0.bodyTimeoutNanoseconds = 30_000_000_000
            $0.connectionsRefused = { counts in refused.withLock { $0.merge(counts, uniquingKeysWith: +) } }
        }
        defer { running.shutdown() }
        let dribbling = try TestHTTPClient(port: running.port), inTime = try TestHTTPClient(port: running.port)
        try dribbling.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
        try inTime.send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n12")
        #expect(eventually { running.server.requestDeadlines.bodiesAwaited == 2 }, "both heads read, both bodies awaited")
        clock.advance(by: 29_000_000_000)  // long past the head timeout
        let passes = running.server.sorter?.loopPasses ?? 0
        #expect(eventuallyWakingTheLoop(running) { (running.server.sorter?.loopPasses ?? 0) >= passes + 2 })
        try inTime.send("34")
        #expect(try inTime.readResponse().text == "POST /b", "a body whole in time is served")
        clock.advance(by: 1_000_000_001)
        #expect(eventuallyWakingTheLoop(running) { running.server.requestDeadlines.bodiesAwaited == 0 },
                "the dribbling body's time is up")
        guard case .closed = try dribbling.exchange(Array("67890".utf8)) else {
            Issue.record("a body dribbled past the body timeout was served")
            return
        }
        #expect(eventually { refused.withLock { $0 } == [.bodyTimeout: 1] })
        #expect(try inTime.request("GET", "/c").text == "GET /c", "the other connection is kept")
    }

    /// A chunked body has the same deadline, from its head, however its chunks come: one
    /// whose chunk of 10 bytes arrives a byte at a time (libmicrohttpd's idle timeout
    /// restarts with each) is closed at the body timeout and counted; one whose chunks are
    /// whole in time is served.
    @Test func aChunkedBodyDribbledPastItsDeadlineIsClosed() throws {
        let clock = ManualMonotonicClock()
        let refused = Locked<[ConnectionRefusal: Int]>([:])
        let running = try server {
            $0.sortingClock = { clock.read() }
            $0.headTimeoutNanoseconds = 10_000_000_000
            $0.bodyTimeoutNanoseconds = 30_000_000_000
            $0.connectionsRefused = { counts in refused.withLock { $0.merge(counts, uniquingKeysWith: +) } }
        }
        defer { running.shutdown() }
        let dribbling = try TestHTTPClient(port: running.port), inTime = try TestHTTPClient(port: running.port)
        try dribbling.send("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\na\r\n12")
        try inTime.send("POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n12\r\n")
        #expect(eventually { running.server.requestDeadlines.bodiesAwaited == 2 }, "both heads read, both bodies awaited")
        for byte in ["3", "4", "5"] {
            clock.advance(by: 9_000_000_000)
            try dribbling.send(byte)
            let passes = running.server.sorter?.loopPasses ?? 0
            #expect(eventuallyWakingTheLoop(running) { (running.server.sorter?.loopPasses ?? 0) >= passes + 2 })
        }
        try inTime.send("2\r\n34\r\n0\r\n\r\n")
        #expect(try inTime.readResponse().text == "POST /b", "a chunked body whole in time is served")
        clock.advance(by: 3_000_000_001)
        #expect(eventuallyWakingTheLoop(running) { running.server.requestDeadlines.bodiesAwaited == 0 },
                "the dribbling body's time is up")
        guard case .closed = try dribbling.exchange(Array("67890\r\n0\r\n\r\n".utf8)) else {
            Issue.record("a chunked body dribbled past the body timeout was served")
            return
        }
        #expect(eventually { refused.withLock { $0 } == [.bodyTimeout: 1] })
    }
}

/// libmicrohttpd 0.9.75's epoll loop takes at most 128 ready connections from one
/// `epoll_wait`; when it gets exactly 128 it waits again, with the timeout it computed
/// before the first wait, before serving any of them. If nothing else happens, those 128
/// wait until some other connection stirs; edge-triggered, they never report again.
@Suite(.serialized) struct EpollBatchTests {
    /// A stream daemon kept busy (its thread held in a handler) while exactly 128
    /// connections are handed to it: once it is free, every one of them is answered.
    /// The sorting clock never moves, so no head timeout can be what ends their wait.
    @Test(arguments: [128, 256]) func connectionsHandedOverInMultiplesOf128AreServed(count: Int) throws {
        let clock = ManualMonotonicClock()
        let held = DispatchSemaphore(value: 0), gate = DispatchSemaphore(value: 0)
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamPaths = ["/stream"]
        configuration.sortingClock = { clock.read() }
        let running = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { request, responder in
            if request.query.contains(where: { $0.name == "hold" }) {  // on the stream daemon's thread
                held.signal()
                gate.wait()
            }
            responder.respond(HTTPResponse(status: 200, body: Array("\(request.method) \(request.path)".utf8)))
        }))
        defer { running.shutdown() }
        let holder = try TestHTTPClient(port: running.port)
        try holder.send("GET /stream?hold=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(held.wait(timeout: .now() + 5) == .success, "the stream daemon is held")
        let clients = try (0..<count).map { _ in try TestHTTPClient(port: running.port, timeoutSeconds: 5) }
        for client in clients { try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n") }
        #expect(eventually { running.server.connectionsBeingSorted == 0 }, "all handed over while the daemon is held")
        gate.signal()
        #expect(try holder.readResponse().text == "GET /stream")
        var answered = 0
        for client in clients where (try? client.readResponse().text) == "GET /stream" { answered += 1 }
        #expect(answered == count)
    }
}
