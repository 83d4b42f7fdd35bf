import Foundation
import HeadwayCore
import HeadwayTestSupport
@testable import HeadwayService

/// The whole daemon in this process, on 127.0.0.1 with a free port and a fresh database file.
final class LiveDaemon {
    let directory = TemporaryDirectory()
    let application: HeadwayApplication
    let client: TestHTTPClient

    init(durability: String = "normal", arguments: [String] = [], clock: any WallClock = SystemClock(),
         adjust: (inout Configuration) -> Void = { _ in }) throws {
        let command = try Configuration.parse(
            arguments: ["--listen", "127.0.0.1:0", "--db", directory.file("headway.db"), "--durability", durability] + arguments,
            environment: [:])
        guard case .run(var configuration) = command else { throw TestHTTPError("not a run configuration") }
        adjust(&configuration)
        application = try buildApplication(configuration, clock: clock, logger: Logger(minimumLevel: .error, sink: { _ in }))
        try application.start()
        client = try TestHTTPClient(port: application.port)
    }

    deinit {
        application.shutdown()
        directory.remove()
    }

    /// A new event-stream subscriber.
    func subscribe(_ query: String = "", headers: [(String, String)] = [], receiveBuffer: Int? = nil) throws -> TestSSEClient {
        try TestSSEClient(port: application.port, path: "/v1/events" + query, headers: headers, receiveBuffer: receiveBuffer)
    }

    /// A new connection to the daemon.
    func connect() throws -> TestHTTPClient { try TestHTTPClient(port: application.port) }

    @discardableResult
    func request(_ method: String, _ path: String, json: String? = nil,
                 headers: [(String, String)] = []) throws -> TestResponse {
        try client.request(method, path, json: json, headers: headers)
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

extension TestResponse {
    /// The `code` of a problem reply.
    var problemCode: String? { json["code"] as? String }
}
