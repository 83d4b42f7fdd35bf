import Lifecycle
import Foundation
import HTTPServer
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Testing
@testable import HeadwayAPI
@testable import Telemetry
@testable import Daemon

/// Every error becomes a reply in one place (`ErrorReplies`): the domain's refusals, the
/// service's and the HTTP layer's, a stopped writer, and anything unexpected.
@Suite struct ErrorMappingTests {
    final class Lines: Sendable {
        let lines = Locked<[String]>([])
        var all: [String] { lines.withLock { $0 } }
    }

    let lines = Lines()
    var replies: ErrorReplies {
        let lines = self.lines
        return ErrorReplies(logger: Logger(minimumLevel: .info, sink: { line in lines.lines.withLock { $0.append(line) } }))
    }
    let request = HTTPRequest(method: "POST", path: "/v1/tasks/t/progress", requestID: "req-7")

    private func problem(_ error: any Error) -> (status: Int, code: String?, json: [String: Any], headers: [HTTPField]) {
        let response = replies.response(for: error, request)
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        #expect(response.headers.contains(HTTPField("Content-Type", "application/problem+json")))
        return (response.status, json["code"] as? String, json, response.headers)
    }

    @Test(arguments: [
        (TaskError.invalidRequest([FieldError(field: "total", message: "must be a number")]), 400),
        (.malformedJSON("bad"), 400), (.invalidID("x y"), 400), (.notFound("t"), 404),
        (.registrationConflict("t"), 409), (.taskFinished(id: "t", state: .failed), 409),
        (.outcomeConflict(id: "t", state: .failed, requested: .succeeded), 409),
        (.progressRegression(id: "t", completed: 5, requested: 4), 422), (.completedExceedsTotal(completed: 5, total: 4), 422),
        (.totalBelowCompleted(total: 4, completed: 5), 422), (.completedAndIncrement, 422), (.countOutOfRange(1), 422),
        (.parentNotFound("p"), 422), (.parentFinished("p"), 422), (.ownParent("t"), 422),
    ])
    func domainRefusalsKeepTheirCodeAndGetTheirStatus(_ error: TaskError, _ status: Int) {
        let reply = problem(error)
        #expect(reply.status == status)
        #expect(reply.code == error.code)
        #expect(reply.json["status"] as? Int == status)
        #expect(reply.json["type"] as? String == "https://headway.dev/problems/" + error.code.replacingOccurrences(of: "_", with: "-"))
        #expect(lines.all.isEmpty, "a refusal is not an error of the server")
    }

    @Test func aStoppedWriterIsShuttingDownWithRetryAfter() {
        let reply = problem(WriterError.stopped)
        #expect(reply.status == 503)
        #expect(reply.code == "shutting_down")
        #expect(reply.headers.contains(HTTPField("Retry-After", "1")))
        #expect(reply.headers.contains(HTTPField("Connection", "close")))
        #expect(replies.response(for: .shuttingDown, request).body == replies.response(for: WriterError.stopped, request).body,
                "the HTTP layer's refusal and the writer's look the same")
    }

    @Test func anythingElseIs500WithTheRequestIDAndIsLogged() {
        struct Surprise: Error {}
        let reply = problem(Surprise())
        #expect(reply.status == 500)
        #expect(reply.code == "internal_error")
        #expect((reply.json["detail"] as? String)?.contains("request id req-7") == true)
        #expect(lines.all.count == 1)
        #expect(lines.all.first?.contains("level=error event=request.failed request_id=req-7") == true)
    }

    @Test func aWriteLockHeldElsewhereIs503DatabaseBusyWithRetryAfter() {
        // SQLITE_BUSY (5), as `BEGIN IMMEDIATE` fails after the busy timeout; and one of its
        // extended codes (SQLITE_BUSY_SNAPSHOT, 517).
        for code: Int32 in [5, 517] {
            let reply = problem(DatabaseError(code: code, message: "database is locked", sql: "BEGIN IMMEDIATE"))
            #expect(reply.status == 503)
            #expect(reply.code == "database_busy")
            #expect(reply.headers.contains(HTTPField("Retry-After", "1")))
        }
        #expect(lines.all.count == 2)
        #expect(lines.all.allSatisfy { $0.contains("level=warn event=request.database_busy request_id=req-7") })
        let locked = problem(DatabaseError(code: 6, message: "database table is locked", sql: nil))
        #expect(locked.status == 500, "only SQLITE_BUSY is another process's lock")
    }

    /// PostgreSQL's errors are judged as SQLite's of the same meaning: a lock or statement
    /// timeout is busy, a full disk or a read-only transaction a storage refusal, a lost
    /// connection or a server going down `database_unavailable`; anything else is 500.
    @Test(arguments: [
        ("55P03", false, 503, "database_busy"), ("40P01", false, 503, "database_busy"),
        ("53100", false, 503, "storage_full"), ("25006", false, 503, "storage_read_only"),
        ("08006", false, 503, "database_unavailable"), ("57P01", false, 503, "database_unavailable"),
        ("42601", true, 503, "database_unavailable"), ("42601", false, 500, "internal_error"),
        ("23505", false, 500, "internal_error"),
    ])
    func postgresErrorsMapLikeSQLiteOnes(sqlState: String, connectionLost: Bool, status: Int, code: String) {
        let error = DatabaseError.postgres(sqlState: sqlState, message: "m", sql: "SELECT 1", connectionLost: connectionLost)
        let reply = problem(error)
        #expect(reply.status == status)
        #expect(reply.code == code)
        if status == 503 { #expect(reply.headers.contains { $0.name == "Retry-After" }) }
        #expect(problem(DatabaseError.unavailable("cannot connect")).code == "database_unavailable")
    }

    /// Every request queued behind another process's lock gets `database_busy`: the log
    /// says so at most once a second, with how many it did not write.
    @Test func busyRequestsAreLoggedAtMostOnceASecond() {
        let throttle = LogThrottle(nanoseconds: 1_000)
        #expect(throttle.admit(now: 10) == 0)
        #expect(throttle.admit(now: 500) == nil)
        #expect(throttle.admit(now: 1_009) == nil)
        #expect(throttle.admit(now: 1_010) == 2)
        let shared = replies
        for _ in 0..<5 {
            _ = shared.response(for: DatabaseError(code: 5, message: "database is locked", sql: "BEGIN IMMEDIATE"), request)
        }
        #expect(lines.all.count == 1)
        #expect(lines.all.first?.contains("not_logged_since=0") == true)
    }

    @Test func refusalsOfTheHTTPLayer() {
        #expect(replies.response(for: .bodyTooLarge(limit: 10), request).status == 413)
        #expect(replies.response(for: .routeNotFound, request).status == 404)
        let wrongMethod = replies.response(for: .methodNotAllowed(allowed: ["GET", "DELETE"]), request)
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.headers.contains(HTTPField("Allow", "GET, DELETE")))
        #expect(String(decoding: wrongMethod.body, as: UTF8.self).contains("not POST"))
    }
}

/// The 503 and 500 replies through the real daemon.
@Suite(.serialized) struct ErrorRepliesLiveTests {
    @Test func aChangeAfterTheWriterStoppedIs503AndChangesNothing() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"w","name":"Writer","total":10}"#)
        let before = try daemon.snapshot("w")
        // Once asked to stop, the writer takes no new job.
        daemon.application.writer.requestStop()
        let reply = try daemon.request("POST", "/v1/tasks/w/progress", json: #"{"completed":1}"#)
        #expect(reply.status == 503)
        #expect(reply.problemCode == "shutting_down")
        #expect(reply.headers["retry-after"] == "1")
        #expect(try daemon.connect().request("GET", "/v1/tasks/w").text == before)
    }

    @Test(.enabled(if: TestPostgresDatabase.sqliteOnly, "damages the SQLite file itself"))
    func aFailureOfTheStoreIs500WithTheRequestIDAndChangesNothing() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"h","name":"History","total":10}"#)
        let before = try daemon.snapshot("h")
        // Progress in a new second writes a history sample: without its table, the change fails.
        let database = try Database(path: daemon.directory.file("headway.db"))
        try database.execute("DROP TABLE history")
        database.close()
        clock.advance(by: 1000)
        let reply = try daemon.request("POST", "/v1/tasks/h/progress", json: #"{"completed":3}"#,
                                       headers: [("X-Request-Id", "fail-1")])
        #expect(reply.status == 500)
        #expect(reply.problemCode == "internal_error")
        #expect((reply.json["detail"] as? String)?.contains("request id fail-1") == true)
        #expect(try daemon.snapshot("h") == before, "the failed change was rolled back")
    }
}
