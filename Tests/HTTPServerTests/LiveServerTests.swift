import Dispatch
import Foundation
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HTTPServer

/// A server running in a service group of its own, as the daemon runs it.
struct RunningServer {
    let server: MicroHTTPServer
    private let group: ServiceGroup

    init(_ server: MicroHTTPServer) throws {
        self.server = server
        group = ServiceGroup([ServiceGroup.Member("test-http", server)])
        try group.start()
    }

    var port: Int { server.port }

    /// Stops the server as the daemon does (drains, then stops the daemons).
    func shutdown() { group.stop() }
}

/// The real libmicrohttpd server on 127.0.0.1 with a port chosen by the system.
@Suite struct LiveServerTests {
    /// Shows each refusal as its name and the request's path, with `Connection: close` when
    /// the server stops: the test sees that the server used it.
    static let namingRenderer: HTTPPipeline.RefusalRenderer = { refusal, request in
        let (status, name): (Int, String) = switch refusal {
        case .bodyTooLarge(let limit): (413, "body_too_large \(limit)")
        case .shuttingDown: (503, "shutting_down")
        case .routeNotFound: (404, "route_not_found")
        case .methodNotAllowed(let allowed): (405, "method_not_allowed \(allowed)")
        case .nulInTarget: (400, "nul_in_target")
        case .encodedSlashInPath: (400, "encoded_slash_in_path")
        case .tooManyQueryParameters(let limit): (431, "too_many_query_parameters \(limit)")
        case .targetTooLong(let limit): (414, "target_too_long \(limit)")
        case .badFraming: (400, "bad_framing")
        case .malformedHeader: (400, "malformed_header")
        case .hostMissing: (400, "host_missing")
        case .malformedRequestLine: (400, "malformed_request_line")
        case .versionNotSupported: (505, "version_not_supported")
        case .headTooLarge(let limit): (431, "head_too_large \(limit)")
        case .repliesUnread(let clientBytes, let totalBytes): (503, "replies_unread \(clientBytes) \(totalBytes)")
        }
        return HTTPResponse(status: status, headers: refusal == .shuttingDown ? [HTTPField("Connection", "close")] : [],
                            body: Array("\(name) \(request.path)".utf8))
    }

    /// Echoes the body, answering from another thread after the handler has returned
    /// (so the connection is suspended and resumed) unless the path is `/now`.
    private static func startEchoServer(bodyLimit: Int = 1024, received: DispatchSemaphore? = nil,
                                        hold: DispatchSemaphore? = nil) throws -> RunningServer {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.maximumBodyBytes = bodyLimit
        let server = try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline(renderRefusal: namingRenderer) {
            request, responder in
            let response = HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain")], body: request.body)
            if request.path == "/now" { return responder.respond(response) }
            received?.signal()
            DispatchQueue.global().async {
                hold?.wait()
                responder.respond(response)
            }
        })
        return try RunningServer(server)
    }

    @Test func answersLaterFromAnotherThreadOverKeepAlive() throws {
        let server = try Self.startEchoServer()
        defer { server.shutdown() }
        #expect(server.port > 0)
        let client = try TestHTTPClient(port: server.port)
        for index in 0..<20 {
            let response = try client.request("POST", index % 2 == 0 ? "/later" : "/now", json: "{\"n\":\(index)}")
            #expect(response.status == 200)
            #expect(response.text == "{\"n\":\(index)}")
        }
    }

    /// A server on a free port whose request loop sleeps a minute at a time: only a wake-up,
    /// or work the library does, moves it.
    private static func sleepyLoop(streamPaths: [String] = []) -> MicroHTTPServer.Configuration {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamPaths = streamPaths
        configuration.requestLoopLongestSleepMilliseconds = 60_000
        configuration.requestLoopIdleSleepMilliseconds = 60_000
        return configuration
    }

    /// While a request waits for its answer the request daemon's loop sleeps (the library
    /// says it has work at once, for the request would be handed over again): it runs the
    /// library a few times a tenth of a second, not thousands; the answer, when it comes,
    /// wakes it.
    @Test func aRequestWaitingForItsAnswerLeavesTheLoopAsleep() throws {
        let received = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let server = try Self.startEchoServer(received: received, hold: hold)
        defer { server.shutdown() }
        let loop = try #require(server.server.requestLoop)
        let answered = DispatchSemaphore(value: 0)
        let reply = Locked<TestResponse?>(nil)
        DispatchQueue.global().async {
            let response = try? TestHTTPClient(port: server.port).request("POST", "/later", json: "{\"waited\":true}")
            reply.withLock { $0 = response }
            answered.signal()
        }
        #expect(received.wait(timeout: .now() + 10) == .success)
        let before = loop.runs.load(ordering: .relaxed)
        // A tenth of a second of watching: the loop's idle bound is 20 ms.
        Thread.sleep(forTimeInterval: 0.1)
        let during = loop.runs.load(ordering: .relaxed) - before
        #expect(during <= 20, "the loop ran the library \(during) times while the request waited")
        hold.signal()
        #expect(answered.wait(timeout: .now() + 10) == .success)
        #expect(reply.withLock { $0?.status } == 200)
        #expect(reply.withLock { $0?.text } == "{\"waited\":true}")
    }

    /// A head that could be framed two ways is refused at its first call, before its body
    /// or its handler, and the server closes the connection even though the renderer's
    /// reply does not ask to: the bytes after it never run as a request.
    @Test func refusesAmbiguousFramingAndClosesTheConnection() throws {
        let server = try Self.startEchoServer()
        defer { server.shutdown() }
        let hidden = "POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nhidden"
        for framing in ["Content-Length: 2\r\nContent-Length: \(2 + hidden.utf8.count)",
                        "Transfer-Encoding: chunked\r\nContent-Length: \(12 + hidden.utf8.count)"] {
            let client = try TestHTTPClient(port: server.port)
            let body = framing.hasPrefix("Transfer") ? "2\r\nab\r\n0\r\n\r\n" : "ab"
            try client.send("POST /now HTTP/1.1\r\nHost: x\r\n\(framing)\r\n\r\n\(body)\(hidden)")
            let refused = try client.readResponse()
            #expect(refused.status == 400 && refused.text == "bad_framing /now", "\(refused.text)")
            #expect(refused.headers["connection"]?.lowercased() == "close")
            #expect((try? client.readResponse()) == nil, "a second request was answered")
        }
    }

    /// Every exchange gets an id from the pipeline, sent back as `X-Request-Id` (the client's
    /// own when plain, else one made up), and once over a record with its route pattern
    /// (never the raw path), its status and its id: answered at once or later from another
    /// thread, a `HEAD` (noted as its `GET` route), an unknown path, a wrong method, and a
    /// head refused before any route (its connection closed); a request whose body never
    /// came whole has none.
    @Test func everyExchangeHasAnIDAndARecord() throws {
        var router = Router()
        router.add("GET", "/tasks/{id}") { request, responder in
            if request.pathParameters["id"] == "now" { return responder.respond(HTTPResponse(status: 200)) }
            DispatchQueue.global().async { responder.respond(HTTPResponse(status: 202)) }
        }
        let records = Locked<[ExchangeRecord]>([])
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline(
            router: router, renderRefusal: Self.namingRenderer, requestIDs: RequestIDs(prefix: "p"),
            observeExchange: { record in records.withLock { $0.append(record) } })))
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port)
        let sent: [(method: String, path: String, id: String?, status: Int, route: String?, expectedID: String)] = [
            ("GET", "/tasks/now", "mine-1", 200, "/tasks/{id}", "mine-1"),
            ("GET", "/tasks/later", nil, 202, "/tasks/{id}", "p-1"),
            ("HEAD", "/tasks/now", "a\"quote", 200, "/tasks/{id}", "p-2"),
            ("GET", "/nowhere", String(repeating: "x", count: 65), 404, nil, "p-3"),
            ("DELETE", "/tasks/now", String(repeating: "y", count: 64), 405, nil, String(repeating: "y", count: 64)),
        ]
        for (method, path, id, status, _, expectedID) in sent {
            let response = try client.request(method, path, headers: id.map { [("X-Request-Id", $0)] } ?? [])
            #expect(response.status == status, "\(method) \(path)")
            #expect(response.headers["x-request-id"] == expectedID, "\(method) \(path)")
        }
        let refused = try TestHTTPClient(port: server.port)
        try refused.send("POST /tasks/now HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab")
        let refusal = try refused.readResponse()
        #expect(refusal.status == 400 && refusal.headers["x-request-id"] == "p-4")
        // Records come once each exchange is over, just after its reply went out.
        for _ in 0..<2000 where records.withLock({ $0.count }) < sent.count + 1 { usleep(1000) }
        let seen = records.withLock { $0 }.sorted { $0.requestID < $1.requestID }
        let expected = (sent.map { ($0.expectedID, $0.method, $0.path, $0.status, $0.route) }
            + [("p-4", "POST", "/tasks/now", 400, nil)]).sorted { $0.0 < $1.0 }
        #expect(seen.count == expected.count)
        for (record, want) in zip(seen, expected) {
            #expect(record.requestID == want.0 && record.method == want.1 && record.path == want.2, "\(record)")
            #expect(record.status == want.3 && record.route?.text == want.4, "\(record)")
            #expect(record.durationMicroseconds >= 0)
        }
        // A request cut off before its body was whole never reached the pipeline: no record.
        // The request after it is served by the same thread once the cut one has ended.
        var cut: TestHTTPClient? = try TestHTTPClient(port: server.port)
        try cut?.send("POST /tasks/now HTTP/1.1\r\nHost: x\r\nX-Request-Id: cut-1\r\nContent-Length: 10\r\n\r\nab")
        for _ in 0..<2000 where server.server.requestsUnderWay == 0 { usleep(1000) }
        #expect(server.server.requestsUnderWay == 1, "the cut request's head was never read")
        cut = nil
        for _ in 0..<2000 where server.server.requestsUnderWay > 0 { usleep(1000) }
        #expect(try TestHTTPClient(port: server.port).request("GET", "/tasks/now", headers: [("X-Request-Id", "after-1")]).status == 200)
        for _ in 0..<2000 where records.withLock({ $0.count }) < expected.count + 1 { usleep(1000) }
        #expect(records.withLock { $0.dropFirst(expected.count).map(\.requestID) } == ["after-1"])
    }

    @Test func headCheckRefusals() {
        typealias Field = HeadCheck.Field
        // Names reach the check as the server reads them: ASCII capitals in lower case.
        func lowered(_ name: String) -> String { name.withCString { String(lowercasingASCII: $0) } }
        #expect(lowered("Content-Type") == "content-type" && lowered("X-ÄZ@[") == "x-Äz@[" && lowered("") == "")
        func refusal(_ fields: [(String, String)], http11: Bool = true) -> HTTPRefusal? {
            HeadCheck.refusal(for: fields.map { Field(name: lowered($0.0), value: $0.1) }, isHTTP11: http11)
        }
        #expect(refusal([("Host", "x"), ("Content-Length", "2")]) == nil)
        #expect(refusal([("Host", "x"), ("Transfer-Encoding", "CHUNKED")]) == nil)
        #expect(refusal([]) == .hostMissing)
        #expect(refusal([], http11: false) == nil)
        #expect(refusal([("Host", "x"), ("Content-Length", "2"), ("content-length", "2")])
                == .badFraming("more than one Content-Length"))
        #expect(refusal([("Host", "x"), ("Transfer-Encoding", "chunked"), ("Content-Length", "2")])
                == .badFraming("both Transfer-Encoding and Content-Length"))
        #expect(refusal([("Host", "x"), ("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")])
                == .badFraming("more than one Transfer-Encoding"))
        #expect(refusal([("Host", "x"), ("Transfer-Encoding", "gzip, chunked")])
                == .badFraming("a Transfer-Encoding other than chunked"))
        for name in ["Host ", "Host\t", "X(y)", "X y", "", "Ünicode", "X:y"] {
            if case .malformedHeader = refusal([(name, "x")]) {} else { Issue.record("name '\(name)' passed") }
        }
        let folded = HeadCheck.refusal(for: [Field(name: "Hostx", value: "evil.example", folded: true)], isHTTP11: false)
        #expect(folded == .malformedHeader("a header line continued on the next one (obs-fold)"))
    }

    @Test func servesStreamAndOrdinaryConnectionsWhateverTheirFirstBytes() throws {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamPaths = ["/stream"]
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline {
            request, responder in
            responder.respond(HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain")],
                                           body: Array("\(request.method) \(request.path)".utf8)))
        }))
        defer { server.shutdown() }
        // A stream connection (sent in pieces, so the sorter must wait for enough bytes)
        // also serves any later request on it; an ordinary one serves the stream path too.
        let streamClient = try TestHTTPClient(port: server.port)
        try streamClient.send("GET /str")
        Thread.sleep(forTimeInterval: 0.05)
        try streamClient.send("eam HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try streamClient.readResponse().text == "GET /stream")
        #expect(try streamClient.request("POST", "/other", json: "{}").text == "POST /other")
        let ordinaryClient = try TestHTTPClient(port: server.port)
        #expect(try ordinaryClient.request("GET", "/other").text == "GET /other")
        #expect(try ordinaryClient.request("GET", "/stream").text == "GET /stream")
    }

    /// Requests sent in one write behind one answered later are all answered, though the
    /// loop would sleep a minute whenever it believed only waiting requests were left: the
    /// library reads a pipelined request at a run that calls no handler, and the loop runs
    /// it again before it sleeps.
    @Test func pipelinedRequestsBehindALaterAnswerAreAnsweredWithoutASleep() throws {
        let server = try RunningServer(try MicroHTTPServer(configuration: Self.sleepyLoop(), pipeline: HTTPPipeline {
            request, responder in
            let response = HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain")],
                                        body: Array(request.path.utf8))
            if request.path.hasPrefix("/now") { return responder.respond(response) }
            DispatchQueue.global().async { responder.respond(response) }
        }))
        defer { server.shutdown() }
        // An idle keep-alive connection beside it (the library then names no timeout of its own).
        let idle = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        #expect(try idle.request("GET", "/now").status == 200)
        let client = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        for round in 0..<3 {
            let paths = ["/later\(round)", "/now1", "/later", "/now2", "/now3"]
            try client.send(paths.map { "GET \($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined())
            for path in paths { #expect(try client.readResponse().text == path) }
        }
    }

    /// A stream the library sends block by block (its client closes after it, so it is
    /// never written directly), written whole before it starts, on the request daemon goes
    /// out whole while another request waits for its answer, with the loop's sleeps a minute
    /// long: nothing but the library's own work moves it (each block handed to the library
    /// also counts as work for the loop, a guard this libmicrohttpd does not need here).
    @Test func aLibraryDrivenStreamGoesOutWhileARequestWaits() throws {
        let configuration = Self.sleepyLoop(streamPaths: ["/stream"])
        let received = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let pieces = (0..<16).map { index in Array(repeating: UInt8(ascii: "a") + UInt8(index), count: 2_000) }
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline {
            request, responder in
            switch request.path {
            case "/hold":
                received.signal()
                DispatchQueue.global().async {
                    hold.wait()
                    responder.respond(HTTPResponse(status: 200, body: Array("held".utf8)))
                }
            case "/stream":
                let stream = ResponseStream()
                for piece in pieces { _ = stream.write(piece) }
                stream.finish()
                responder.respond(HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain")], stream: stream))
            default:
                responder.respond(HTTPResponse(status: 204))
            }
        }))
        defer { server.shutdown() }
        let waiting = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        try waiting.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(received.wait(timeout: .now() + 10) == .success)
        let client = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        #expect(try client.request("GET", "/first").status == 204)  // so the request daemon serves the stream
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.body == pieces.flatMap { $0 })
        hold.signal()
        #expect(try waiting.readResponse().text == "held")
    }

    /// A request waiting for its answer longer than the connection timeout keeps its
    /// connection: the library's timeout counts idleness, and a waiting request is not idle
    /// (the timeout is off until its answer is queued, then on again for its reading).
    @Test func aRequestWaitingPastTheConnectionTimeoutIsStillAnswered() throws {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.connectionTimeoutSeconds = 1
        configuration.streamStallTimeoutSeconds = 1
        let received = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline {
            request, responder in
            received.signal()
            DispatchQueue.global().async {
                hold.wait()
                responder.respond(HTTPResponse(status: 200, body: Array("late".utf8)))
            }
        }))
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        try client.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(received.wait(timeout: .now() + 10) == .success)
        // Past the library's one-second timeout, counted from the request's last byte.
        Thread.sleep(forTimeInterval: 2.5)
        hold.signal()
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "late")
    }

    /// An event stream served by the request daemon (its connection's first request was
    /// an ordinary one) ends when it is finished from another thread, though the daemon's
    /// loop would otherwise sleep for a minute: the resume wakes it.
    @Test func aStreamOnTheRequestDaemonEndsWhenFinishedFromAnotherThread() throws {
        var configuration = Self.sleepyLoop(streamPaths: ["/stream"])
        configuration.connectionTimeoutSeconds = 120
        configuration.streamStallTimeoutSeconds = 120
        let opened = DispatchSemaphore(value: 0)
        let streams = Locked<[ResponseStream]>([])
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline {
            request, responder in
            guard request.path == "/stream" else { return responder.respond(HTTPResponse(status: 204)) }
            let stream = ResponseStream()
            streams.withLock { $0.append(stream) }
            responder.respond(HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain")], stream: stream))
            opened.signal()
        }))
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port, timeoutSeconds: 10)
        #expect(try client.request("GET", "/first").status == 204)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(opened.wait(timeout: .now() + 10) == .success)
        let stream = try #require(streams.withLock { $0.first })
        DispatchQueue.global().async {
            _ = stream.write(Array("hello, ".utf8))
            _ = stream.write(Array("world".utf8))
            stream.finish()
        }
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "hello, world")
    }

    /// libmicrohttpd's own messages reach the server's owner (not stderr), and say
    /// whether they only report a client that went away.
    @Test func libraryMessagesGoToTheGivenLog() throws {
        let messages = Messages()
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.connectionMemoryLimit = 4096
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { _, responder in
            responder.respond(HTTPResponse(status: 204))
        }, libraryLog: { message, clientGone in messages.append(message, clientGone) }))
        let client = try TestHTTPClient(port: server.port)
        // A later head on a kept-alive connection: only the library reads it (a first one too
        // large is refused by the accept loop).
        #expect(try client.request("GET", "/x").status == 204)
        try client.send("GET /x HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 6000))\r\n\r\n")
        #expect(try client.readResponse().status == 431)
        server.shutdown()
        #expect(messages.all.contains { $0.text.contains("431") && !$0.clientGone }, "\(messages.all)")
    }

    /// A request carries a number for its client's address: the same for two connections
    /// from one address, and not the number of an unknown one (0).
    @Test func aRequestCarriesItsClientsAddress() throws {
        let clients = Locked<[Int]>([])
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { request, responder in
            clients.withLock { $0.append(request.client) }
            responder.respond(HTTPResponse(status: 204))
        }))
        defer { server.shutdown() }
        for _ in 0..<2 { #expect(try TestHTTPClient(port: server.port).request("GET", "/x").status == 204) }
        let seen = clients.withLock { $0 }
        #expect(seen.count == 2 && seen[0] == seen[1] && seen[0] != 0, "\(seen)")
    }

    /// Clients that go away halfway through their bodies, closing or resetting, are
    /// routine: what the library says of them is marked as such (the service logs it as
    /// debug), so a client that does it over and over cannot fill the log with warnings.
    @Test(arguments: [false, true]) func clientsLeavingMidBodyAreRoutine(reset: Bool) throws {
        let messages = Messages()
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { _, responder in
            responder.respond(HTTPResponse(status: 204))
        }, libraryLog: { message, clientGone in messages.append(message, clientGone) }))
        defer { server.shutdown() }
        for _ in 0..<5 {
            let leaving = try TestHTTPClient(port: server.port)
            if reset { leaving.resetWhenClosed() }
            try leaving.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"half\":")
            #expect(try TestHTTPClient(port: server.port).request("GET", "/after").status == 204)
        }  // each `leaving` closes its socket as it goes
        for _ in 0..<200 where messages.all.count < 5 {
            #expect(try TestHTTPClient(port: server.port).request("GET", "/after").status == 204)
        }
        #expect(messages.all.count >= 5, "\(messages.all)")
        #expect(messages.all.allSatisfy { $0.clientGone }, "\(messages.all)")
    }

    /// libmicrohttpd's messages for what clients do routinely, once per connection (so a
    /// client decides how many there are), say that the client went away (logged as
    /// debug, not as a warning); others do not. The texts are the library's own.
    @Test func routineLibraryMessagesSayTheClientWentAway() {
        let routine = ["Connection was closed by remote side with incomplete request.",
                       "Closing connection (application error generating response).",
                       "Closing connection (application reported error generating data).",
                       "The connection was forcibly closed by remote peer",
                       "Connection socket is closed when reading request due to the error: detected connection closure",
                       "Socket has been disconnected when reading request.",
                       "Connection socket is closed when reading request due to the error: The socket is not connected",
                       "Failed to send the response body for the request for `/v1/tasks'. Error: The socket is not connected"]
        let notRoutine = ["Closing connection (out of memory).",
                          "Error processing request (HTTP response code is 431 ('Request Header Fields Too Large')). Closing connection."]
        for message in routine { #expect(MicroHTTPServer.saysClientGone(message), "\(message)") }
        for message in notRoutine { #expect(!MicroHTTPServer.saysClientGone(message), "\(message)") }
    }

    /// A handler that answers after the stop's timeout has passed still has its answer
    /// sent, and the daemons are stopped only then (libmicrohttpd aborts the process if a
    /// connection is still suspended when its daemon stops). A request arriving meanwhile
    /// on a kept-alive connection is refused at once. The daemon's thread is held before
    /// it queues the answer: the stop must wait for the answer to be sent, not only to come.
    @Test func aStopWaitsForAnAnswerPastItsTimeout() throws {
        let messages = Messages()
        let received = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let queueing = DispatchSemaphore(value: 0)
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.shutdownTimeoutSeconds = 0
        configuration.beforeQueueingAResumedAnswer = { _ = queueing.wait(timeout: .now() + 20) }
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline(
            renderRefusal: Self.namingRenderer) { request, responder in
            if request.path == "/now" { return responder.respond(HTTPResponse(status: 204)) }
            received.signal()
            DispatchQueue.global().async {
                hold.wait()
                responder.respond(HTTPResponse(status: 200, body: request.body))
            }
        }, libraryLog: { message, clientGone in messages.append(message, clientGone) }))
        let client = try TestHTTPClient(port: server.port)
        let other = try TestHTTPClient(port: server.port)
        #expect(try other.request("GET", "/now").status == 204)
        try client.send("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nping")
        #expect(received.wait(timeout: .now() + 10) == .success, "the handler never saw the request")
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            server.shutdown()
            stopped.signal()
        }
        // The stop has given up waiting for requests still arriving and waits for the answer.
        for _ in 0..<2000 where !messages.all.contains(where: { $0.text.contains("stop waits for 1 answer") }) {
            usleep(5000)
        }
        #expect(messages.all.contains { $0.text == "stop waits for 1 answer still under way" }, "\(messages.all)")
        #expect(stopped.wait(timeout: .now()) == .timedOut, "the stop did not wait for the answer")
        #expect(try other.request("GET", "/now").status == 503)
        hold.signal()
        // The daemon's thread waits to queue the answer until the stop waits for it to be
        // sent, or (the fault) has gone on to stop the daemons.
        #expect(eventually { server.server.isAwaitingAnswersSent || server.server.sorter == nil })
        queueing.signal()
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "ping")
        #expect(stopped.wait(timeout: .now() + 20) == .success, "the stop ended")
    }

    /// A request target with a NUL byte, raw or percent-encoded, never reaches a handler
    /// (the library would cut the path short at it).
    @Test func refusesANulInTheTarget() throws {
        let server = try Self.startEchoServer()
        defer { server.shutdown() }
        for target in ["/now/p1%00%2F..%2Fx", "/now?x=a%00b"] {
            let response = try TestHTTPClient(port: server.port).request("GET", target)
            #expect(response.status == 400 && response.text.hasPrefix("nul_in_target"), "\(target): \(response.text)")
        }
        let client = try TestHTTPClient(port: server.port)
        try client.send(Array("GET /now/p1".utf8) + [0] + Array("/x HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        let response = try client.readResponse()
        #expect(response.status == 400 && response.text == "nul_in_target /now/p1")
    }

    /// An encoded slash in the path is refused (the library would decode it into a
    /// separator: `/p1%2Fcancel` would reach the route of `/p1/cancel`); in the query it is data.
    @Test func refusesAnEncodedSlashInThePath() throws {
        let server = try Self.startEchoServer()
        defer { server.shutdown() }
        for target in ["/now/p1%2Fcancel", "/now/p1%2f..%2fx?a=b"] {
            let response = try TestHTTPClient(port: server.port).request("GET", target)
            #expect(response.status == 400 && response.text.hasPrefix("encoded_slash_in_path"), "\(target): \(response.text)")
        }
        let query = try TestHTTPClient(port: server.port).request("GET", "/now/p1%2G?next=a%2Fb")
        #expect(query.status == 200, "\(query.text)")
    }

    /// Query parameters up to the limit are served, even 60 long task ids; one more gets
    /// 431 naming the limit; thousands, or a target too long, get an answer, not silence.
    @Test func queryParametersAtAndPastTheLimit() throws {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.maximumQueryParameters = 100
        configuration.connectionMemoryLimit = 16 * 1024 + 100 * 64
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline(
            renderRefusal: Self.namingRenderer) { request, responder in
            responder.respond(HTTPResponse(status: 200, body: Array("\(request.query.count)".utf8)))
        }))
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port)
        func query(_ count: Int, value: (Int) -> String) -> String {
            "/x?" + (0..<count).map { "task=\(value($0))" }.joined(separator: "&")
        }
        let longID = { (index: Int) in String(repeating: "a", count: 62) + String(format: "%02d", index % 100) }
        let sixty = try client.request("GET", query(60, value: longID))
        #expect(sixty.status == 200 && sixty.text == "60")
        let atLimit = try client.request("GET", query(100, value: longID))
        #expect(atLimit.status == 200 && atLimit.text == "100")
        // A refused head may cost its connection: each on a connection of its own.
        let pastLimit = try TestHTTPClient(port: server.port).request("GET", query(101, value: { "\($0)" }))
        #expect(pastLimit.status == 431 && pastLimit.text.hasPrefix("too_many_query_parameters 100"))
        let thousands = try TestHTTPClient(port: server.port).request(
            "GET", "/x?" + Array(repeating: "a", count: 3000).joined(separator: "&"))
        #expect(thousands.status == 431, "\(thousands.status)")
        let tooLong = try TestHTTPClient(port: server.port).request("GET", "/x?q=" + String(repeating: "b", count: 9000))
        #expect(tooLong.status == 414 && tooLong.text.hasPrefix("target_too_long 8192"))
    }

    private final class Messages: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [(text: String, clientGone: Bool)] = []
        func append(_ text: String, _ clientGone: Bool) { lock.withLock { items.append((text, clientGone)) } }
        var all: [(text: String, clientGone: Bool)] { lock.withLock { items } }
    }

    @Test func refusesAnAnnouncedOversizedBodyBeforeReadingIt() throws {
        let server = try Self.startEchoServer(bodyLimit: 1024)
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port)
        try client.send("POST /now HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1025\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 413)
        #expect(response.text == "body_too_large 1024 /now", "the refusal is shown by the pipeline's renderer")
    }

    @Test func refusesAnOversizedChunkedBody() throws {
        let server = try Self.startEchoServer(bodyLimit: 1024)
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port)
        let chunk = String(repeating: "a", count: 600)
        try client.send("POST /now HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "258\r\n\(chunk)\r\n258\r\n\(chunk)\r\n0\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 413)
        #expect(response.text == "body_too_large 1024 /now")
    }

    @Test func acceptsAChunkedBodyWithinTheLimit() throws {
        let server = try Self.startEchoServer(bodyLimit: 1024)
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port)
        try client.send("POST /later HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "hello world")
    }

    @Test func shutdownAnswersRequestsUnderWay() throws {
        let received = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let server = try Self.startEchoServer(received: received, hold: hold)
        let port = server.port
        let client = try TestHTTPClient(port: port)
        try client.send("POST /later HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nping")
        #expect(received.wait(timeout: .now() + 10) == .success, "the handler never saw the request")
        let other = try TestHTTPClient(port: port)
        #expect(try other.request("GET", "/now").status == 200)
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            server.shutdown()
            stopped.signal()
        }
        // While the first request is held in its handler, new requests are turned away.
        var refusal: TestResponse?
        for _ in 0..<400 {
            let response = try other.request("GET", "/now")
            if response.status == 503 {
                refusal = response
                break
            }
            usleep(5000)
        }
        #expect(refusal?.text == "shutting_down /now")
        #expect(refusal?.headers["connection"]?.lowercased() == "close")
        hold.signal()
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "ping")
        stopped.wait()
    }

    /// An ordinary response whose client reads nothing has its connection closed after the
    /// send stall timeout, not after the library's longer idle timeout.
    @Test func anUnreadResponseIsClosedAfterTheSendStallTimeout() throws {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamStallTimeoutSeconds = 1
        let body = [UInt8](repeating: UInt8(ascii: "a"), count: 8 << 20)
        let server = try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { _, responder in
            responder.respond(HTTPResponse(status: 200, body: body))
        }))
        defer { server.shutdown() }
        let client = try TestHTTPClient(port: server.port, receiveBuffer: 4096)
        try client.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { server.server.connectionsPerAddress.openCount == 1 })
        // Up to 15 s (the library's idle timeout is 60 s): the connection's close releases it.
        for _ in 0..<3000 where server.server.connectionsPerAddress.openCount > 0 { usleep(5000) }
        #expect(server.server.connectionsPerAddress.openCount == 0, "an unread response held its connection")
    }
}
