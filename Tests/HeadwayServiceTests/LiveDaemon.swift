import Lifecycle
import Foundation
import HTTPServer
import HeadwayCore
import HeadwayTestSupport
@testable import Daemon
@testable import Telemetry

/// How a test reaches the daemon: over a loopback socket, or by handing requests to its
/// pipeline in process (no socket; the same middleware, routes, writer and store). API
/// tests run their body both ways.
enum Transport: String, CaseIterable, Sendable, CustomStringConvertible {
    case socket
    case inProcess

    var description: String { rawValue }
}

/// The whole daemon in this process with a fresh database file: on 127.0.0.1 with a free
/// port, or (in process) without listening at all. With `HEADWAY_TEST_DB=postgres` (and
/// `HEADWAY_TEST_POSTGRES`, the URI of a PostgreSQL server's `postgres` database: `make
/// test` starts one), each daemon gets a fresh PostgreSQL database instead, dropped at the
/// end: the same suites then run against PostgreSQL.
final class LiveDaemon {
    let directory = TemporaryDirectory()
    let application: HeadwayApplication
    let transport: Transport
    private let socketClient: TestHTTPClient?
    /// The PostgreSQL database, when the tests run against PostgreSQL.
    let postgresDatabase: TestPostgresDatabase?

    /// `log`, if given, receives every log line from `info` up (none are kept otherwise).
    init(transport: Transport = .socket, durability: String = "normal", arguments: [String] = [],
         clock: any WallClock = SystemClock(), adjust: (inout Configuration) -> Void = { _ in },
         log: (@Sendable (String) -> Void)? = nil,
         prepare: (_ databasePath: String) throws -> Void = { _ in }) throws {
        postgresDatabase = TestPostgresDatabase.isSelected ? try TestPostgresDatabase() : nil
        let location = postgresDatabase?.uri ?? directory.file("headway.db")
        let command = try Configuration.parse(
            arguments: ["--listen", "127.0.0.1:0", "--db", location, "--durability", durability] + arguments,
            environment: [:])
        guard case .run(var configuration) = command else { throw TestHTTPError("not a run configuration") }
        adjust(&configuration)
        self.transport = transport
        try prepare(configuration.databasePath)
        let logger = log.map { Logger(minimumLevel: .info, sink: $0) } ?? Logger(minimumLevel: .error, sink: { _ in })
        application = try buildApplication(configuration, clock: clock, logger: logger)
        try application.start(listening: transport == .socket)
        socketClient = transport == .socket ? try TestHTTPClient(port: application.port) : nil
    }

    deinit {
        application.shutdown()
        postgresDatabase?.drop()
        directory.remove()
    }

    /// A new event-stream subscriber (over a socket).
    func subscribe(_ query: String = "", headers: [(String, String)] = [], receiveBuffer: Int? = nil) throws -> TestSSEClient {
        try TestSSEClient(port: application.port, path: "/v1/events" + query, headers: headers, receiveBuffer: receiveBuffer)
    }

    /// A new connection to the daemon (over a socket).
    func connect() throws -> TestHTTPClient { try TestHTTPClient(port: application.port) }

    /// Sends one request (a JSON body, and a POST without one, gets `Content-Type:
    /// application/json` unless `headers` sets one, as the daemon asks of every POST) and
    /// returns the reply, by the daemon's transport.
    @discardableResult
    func request(_ method: String, _ path: String, json: String? = nil,
                 headers: [(String, String)] = []) throws -> TestResponse {
        var headers = headers
        if method == "POST" && json == nil && !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            headers.append(("Content-Type", "application/json"))
        }
        if let socketClient { return try socketClient.request(method, path, json: json, headers: headers) }
        return try InProcessClient(pipeline: application.pipeline).request(method, path, json: json, headers: headers)
    }

    /// Registers a task and returns its JSON.
    @discardableResult
    func register(_ body: String) throws -> [String: Any] {
        let response = try request("POST", "/v1/tasks", json: body)
        guard response.status == 201 else { throw TestHTTPError("register failed: \(response.status) \(response.text)") }
        return response.json
    }

    /// The task as the API shows it now (raw text, to compare byte for byte).
    func snapshot(_ id: String) throws -> String { try request("GET", "/v1/tasks/\(id)").text }
}

/// Hands requests to a pipeline as the server would (query split and decoded, header names
/// lower-cased) and waits for the answer.
struct InProcessClient {
    let pipeline: HTTPPipeline

    func request(_ method: String, _ target: String, json body: String?, headers: [(String, String)]) throws -> TestResponse {
        let (path, query) = Self.split(target)
        var fields = headers.map { HTTPField($0.0.lowercased(), $0.1) }
        if body != nil && !fields.contains(where: { $0.name == "content-type" }) {
            fields.append(HTTPField("content-type", "application/json"))
        }
        let request = HTTPRequest(method: method, path: path, query: query, headers: fields, body: Array((body ?? "").utf8))
        let responder = WaitingResponder()
        pipeline.handle(request, responder)
        guard let response = responder.wait() else { throw TestHTTPError("no answer in process within 10 s") }
        guard response.stream == nil else { throw TestHTTPError("a stream cannot be read in process") }
        var replyHeaders: [String: String] = [:]
        for field in response.headers { replyHeaders[field.name.lowercased()] = field.value }
        return TestResponse(status: response.status, headers: replyHeaders, body: response.body)
    }

    /// The path and the decoded query arguments of a request target.
    static func split(_ target: String) -> (String, [HTTPField]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, []) }
        let query = target[target.index(after: mark)...].split(separator: "&").map { pair -> HTTPField in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in String(text).removingPercentEncoding ?? String(text) }
            return HTTPField(decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
        return (String(target[..<mark]), query)
    }

    /// Keeps the answer and lets the test wait for it.
    final class WaitingResponder: Responder {
        private let answer = Locked<HTTPResponse?>(nil)
        private let answered = DispatchSemaphore(value: 0)

        func respond(_ response: consuming HTTPResponse) {
            answer.withLock { $0 = response }
            answered.signal()
        }

        func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) {}

        func wait() -> HTTPResponse? {
            guard answered.wait(timeout: .now() + 10) == .success else { return nil }
            return answer.withLock { $0 }
        }
    }
}

extension TestResponse {
    /// The `code` of a problem reply.
    var problemCode: String? { json["code"] as? String }
}
