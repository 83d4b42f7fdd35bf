import Foundation
import HeadwayTestSupport
import Testing
import HeadwayCore
@testable import Daemon
@testable import HeadwayAPI

/// `openapi.yaml` is valid, names exactly the routes the daemon serves, and the daemon's
/// replies match its schemas.
@Suite(.serialized) struct OpenAPITests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The Python with the test tools: `HEADWAY_PYTHON` (set by `make test`), else the
    /// virtual environment `make test` creates, else `python3` from the path.
    static let pythonCommand: [String] = {
        if let configured = ProcessInfo.processInfo.environment["HEADWAY_PYTHON"], !configured.isEmpty {
            return [configured]
        }
        let venv = root.appendingPathComponent(".build/venv/bin/python3").path
        return FileManager.default.isExecutableFile(atPath: venv) ? [venv] : ["python3"]
    }()

    /// Runs Python with `arguments…` in the repository; returns exit status and output.
    private func python(_ arguments: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = Self.pythonCommand + arguments
        process.currentDirectoryURL = Self.root
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    @Test func specIsValidOpenAPI31() throws {
        let (status, output) = try python(["-m", "openapi_spec_validator", "openapi.yaml"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("OK"))
    }

    @Test func specAndRouterNameTheSameRoutes() throws {
        let daemon = try LiveDaemon()
        let served = Set(daemon.application.routes.map { "\($0.method) \($0.pattern)" })
        let (status, output) = try python(["scripts/openapi-check.py", "routes"])
        #expect(status == 0, "\(output)")
        let documented = Set(output.split(separator: "\n").map(String.init))
        #expect(served == documented, "served but not documented: \(served.subtracting(documented)); documented but not served: \(documented.subtracting(served))")
        #expect(served.count >= 9)
    }

    @Test func repliesMatchTheSchemas() throws {
        let daemon = try LiveDaemon()
        var instances: [(String, String)] = []
        func keep(_ schema: String, _ response: TestResponse) { instances.append((schema, response.text)) }
        keep("Task", try daemon.request("POST", "/v1/tasks", json: #"{"id":"p","name":"Parent","metadata":{"k":[1,2]}}"#))
        keep("Task", try daemon.request("POST", "/v1/tasks", json: #"{"id":"c","name":"Child","parent_id":"p","total":10,"unit":"files","stall_timeout_seconds":2.5,"progress_timeout_seconds":60,"state":"pending","weight":0.5}"#))
        keep("Task", try daemon.request("POST", "/v1/tasks/c/progress", json: #"{"completed":3,"label":"Copying","seq":1}"#))
        keep("Task", try daemon.request("POST", "/v1/tasks/c/heartbeat"))
        keep("ProgressBatchResults", try daemon.request("POST", "/v1/progress", json: #"{"updates":[{"id":"c","completed":4,"seq":2},{"id":"c","increment":1,"seq":2},{"id":"none","increment":1},7]}"#))
        keep("Task", try daemon.request("POST", "/v1/tasks/p/cancel"))
        keep("Task", try daemon.request("POST", "/v1/tasks/c/finish", json: #"{"outcome":"canceled","message":"asked to"}"#))
        keep("TaskList", try daemon.request("GET", "/v1/tasks?page_size=1"))
        keep("Task", try daemon.request("POST", "/v1/tasks", json: #"{"id":"o","name":"Output"}"#))
        keep("Task", try daemon.request("POST", "/v1/tasks/o/heartbeat", json: #"{"output":["one","\u001b[1mtwo"]}"#))
        keep("OutputTail", try daemon.request("GET", "/v1/tasks/o/output"))
        keep("OutputTail", try daemon.request("GET", "/v1/tasks/p/output"))
        keep("TaskList", try daemon.request("GET", "/v1/tasks?q=out&page_size=1"))
        keep("TaskSummary", try daemon.request("GET", "/v1/tasks/summary"))
        keep("Task", try daemon.request("POST", "/v1/tasks/o/terminate"))
        keep("Problem", try daemon.request("GET", "/v1/tasks?q=a%01"))
        keep("Health", try daemon.request("GET", "/healthz"))
        keep("Readiness", try daemon.request("GET", "/readyz"))
        keep("TokenInfo", try daemon.request("GET", "/v1/token"))
        keep("Problem", try daemon.request("GET", "/assets/none.js"))
        keep("Problem", try daemon.request("POST", "/v1/tasks/c/progress", json: #"{"completed":1}"#))
        keep("Problem", try daemon.request("POST", "/v1/tasks", json: #"{"name":5,"extra":true}"#))
        keep("Problem", try daemon.request("PUT", "/v1/tasks"))
        keep("Problem", try daemon.request("GET", "/nowhere"))
        // What browsers may not do: a foreign Origin, an undeclared body, a foreign Host.
        keep("Problem", try daemon.request("POST", "/v1/tasks/p/heartbeat", headers: [("Origin", "https://evil.example")]))
        keep("Problem", try daemon.request("POST", "/v1/tasks/p/heartbeat", headers: [("Content-Type", "text/plain")]))
        let foreignHost = try daemon.connect()
        try foreignHost.send("GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        keep("Problem", try foreignHost.readResponse())
        // The first token makes every other route need one.
        let made = try daemon.request("POST", "/v1/tokens", json: #"{"name":"ci","scopes":["report","read"],"task_prefix":"ci.","expires_at":"2099-01-01T00:00:00Z"}"#)
        keep("TokenCreated", made)
        let secret = made.json["secret"] as? String ?? ""
        let auth = [("Authorization", "Bearer \(secret)")]
        keep("Problem", try daemon.request("GET", "/v1/tokens", headers: auth))
        keep("Problem", try daemon.request("GET", "/v1/tasks"))
        keep("Problem", try daemon.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer nope")]))
        keep("Problem", try daemon.request("POST", "/v1/tasks", json: #"{"id":"other","name":"O"}"#, headers: auth))
        keep("Problem", try daemon.request("GET", "/v1/tasks?access_token=\(secret)"))
        keep("TaskList", try daemon.request("GET", "/v1/tasks", headers: auth))
        let admin = try TokenCommand.create(TokenRequest(name: "admin", scopes: [.admin]), expiresInSeconds: nil,
                                            databasePath: daemon.application.configuration.databasePath)
        daemon.application.refreshTokens()
        keep("TokenList", try daemon.request("GET", "/v1/tokens", headers: [("Authorization", "Bearer \(admin)")]))
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.file("instances.tsv")
        try instances.map { "\($0.0)\t\($0.1)" }.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let (status, output) = try python(["scripts/openapi-check.py", "instances", file])
        #expect(status == 0, "\(output)")
    }
}
