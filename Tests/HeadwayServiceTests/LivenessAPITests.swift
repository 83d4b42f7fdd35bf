import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Daemon
@testable import Telemetry

/// Stall flags, estimates, roll-up, history and retention through the real daemon.
@Suite(.serialized) struct LivenessAPITests {
    private func parseTime(_ text: Any?) -> Double? {
        guard let text = text as? String else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)?.timeIntervalSince1970
    }

    /// The running sweeper (not one called by the test) flags a task whose deadline has
    /// passed on the daemon's clock; how late it does so in real time is a benchmark figure
    /// (`bench/stall-sweeper.py`), not a test.
    @Test func aSilentTaskIsFlaggedByTheRunningSweeperAndRecovers() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        let subscriber = try daemon.subscribe()
        _ = try subscriber.nextEvent()
        let task = try daemon.register(#"{"id":"quiet","name":"Quiet","stall_timeout_seconds":1}"#)
        _ = try subscriber.nextEvent()  // task.created
        clock.advance(by: 1000)
        let stalled = try #require(try subscriber.nextEvent())
        #expect(stalled.event == "task.stalled")
        #expect(stalled.json["stalled"] as? Bool == true)
        #expect(stalled.json["stall_reason"] as? String == "silent")
        let created = try #require(parseTime(task["created_at"]))
        #expect(parseTime(stalled.json["stalled_since"]) == created + 1, "stalled since the deadline itself")
        #expect(stalled.json["rate"] is NSNull)

        let reply = try daemon.request("POST", "/v1/tasks/quiet/heartbeat")
        #expect(reply.json["stalled"] as? Bool == false)
        let recovered = try #require(try subscriber.nextEvent())
        #expect(recovered.event == "task.recovered")
        #expect(recovered.json["stall_reason"] is NSNull)
    }

    @Test func noProgressIsFlaggedAndOnlyProgressClearsIt() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"spin","name":"Spinning","total":10,"stall_timeout_seconds":60,"progress_timeout_seconds":5}"#)
        let subscriber = try daemon.subscribe()
        _ = try subscriber.nextEvent()
        for _ in 0..<3 {
            clock.advance(by: 2000)
            try daemon.request("POST", "/v1/tasks/spin/heartbeat")
        }
        daemon.application.sweepStalls()
        let events = try subscriber.events { $0.event == "task.stalled" }
        #expect(events.last?.json["stall_reason"] as? String == "no_progress")
        clock.advance(by: 1000)
        let stillStalled = try daemon.request("POST", "/v1/tasks/spin/heartbeat")
        #expect(stillStalled.json["stalled"] as? Bool == true, "a heartbeat is no progress")
        let progressed = try daemon.request("POST", "/v1/tasks/spin/progress", json: #"{"increment":1}"#)
        #expect(progressed.json["stalled"] as? Bool == false)
        #expect(try subscriber.events { $0.event == "task.recovered" }.last?.json["completed"] as? Int == 1)
        #expect(try daemon.request("GET", "/v1/tasks?stalled=true").json["total_size"] as? Int == 0)
    }

    @Test(arguments: Transport.allCases) func pendingTasksAreNeverStalledAndChildrenKeepTheirParentAlive(_ transport: Transport) throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(transport: transport, clock: clock)
        try daemon.register(#"{"id":"queued","name":"Queued","state":"pending","stall_timeout_seconds":5}"#)
        try daemon.register(#"{"id":"parent","name":"Parent","stall_timeout_seconds":5}"#)
        try daemon.register(#"{"id":"child","name":"Child","parent_id":"parent","stall_timeout_seconds":60}"#)
        for _ in 0..<4 {
            clock.advance(by: 3000)
            try daemon.request("POST", "/v1/tasks/child/heartbeat")
            daemon.application.sweepStalls()
        }
        #expect(try daemon.request("GET", "/v1/tasks/queued").json["stalled"] as? Bool == false)
        #expect(try daemon.request("GET", "/v1/tasks/parent").json["stalled"] as? Bool == false)
        let stalled = try daemon.request("GET", "/v1/tasks?stalled=true")
        #expect(stalled.json["total_size"] as? Int == 0)
    }

    @Test func afterARestartRunningTasksGetAFullTimeout() throws {
        let clock = ManualClock()
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        func start() throws -> HeadwayApplication {
            guard case .run(let configuration) = try Configuration.parse(
                arguments: ["--listen", "127.0.0.1:0", "--db", directory.file("h.db")], environment: [:]) else {
                throw TestHTTPError("not a run configuration")
            }
            let application = try buildApplication(configuration, clock: clock,
                                                   logger: Logger(minimumLevel: .error, sink: { _ in }))
            try application.start()
            return application
        }
        let first = try start()
        _ = try TestHTTPClient(port: first.port).request(
            "POST", "/v1/tasks", json: #"{"id":"job","name":"Job","stall_timeout_seconds":10}"#)
        first.shutdown()
        clock.advance(by: 60_000)  // the server was down for a minute
        let second = try start()
        defer { second.shutdown() }
        #expect(second.sweepStalls() == 0, "downtime is not the runner's stall")
        clock.advance(by: 9_999)
        #expect(second.sweepStalls() == 0)
        clock.advance(by: 1)
        #expect(second.sweepStalls() == 1)
    }

    @Test(arguments: Transport.allCases) func rateAndETAComeFromWhenProgressArrived(_ transport: Transport) throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(transport: transport, clock: clock)
        let created = try daemon.register(#"{"id":"copy","name":"Copy","total":100}"#)
        #expect(created["rate"] is NSNull)
        var last: [String: Any] = [:]
        for second in 1...12 {
            clock.advance(by: 1000)
            last = try daemon.request("POST", "/v1/tasks/copy/progress", json: #"{"completed":\#(second * 5)}"#).json
        }
        let rate = try #require(last["rate"] as? Double)
        let eta = try #require(last["eta_seconds"] as? Double)
        #expect(abs(rate - 5) < 0.01)
        #expect(abs(eta - 8) < 0.1, "40 units left at 5 per second")
        let done = try daemon.request("POST", "/v1/tasks/copy/finish", json: #"{"outcome":"succeeded"}"#).json
        #expect(done["rate"] is NSNull && done["eta_seconds"] is NSNull)
    }

    @Test func aParentShowsItsChildrenAndEachChildChangeUpdatesIt() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"deploy","name":"Deploy"}"#)
        let subscriber = try daemon.subscribe("?task=deploy")
        _ = try subscriber.nextEvent()
        try daemon.register(#"{"id":"web","name":"Web","parent_id":"deploy","weight":3,"total":10}"#)
        try daemon.register(#"{"id":"db","name":"DB","parent_id":"deploy"}"#)
        try daemon.request("POST", "/v1/tasks/web/progress", json: #"{"completed":10}"#)
        try daemon.request("POST", "/v1/tasks/db/finish", json: #"{"outcome":"succeeded"}"#)
        let parent = try daemon.request("GET", "/v1/tasks/deploy").json
        #expect(parent["mode"] as? String == "quantified")
        #expect(parent["fraction"] as? Double == 1.0)
        let updates = try subscriber.events { ($0.json["fraction"] as? Double) == 1.0 }
        #expect(updates.allSatisfy { $0.json["id"] as? String == "deploy" && $0.event == "task.updated" })
    }

    @Test(arguments: Transport.allCases) func historyIsDownsampledWithinItsBounds(_ transport: Transport) throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(transport: transport, clock: clock)
        try daemon.register(#"{"id":"curve","name":"Curve","total":1000}"#)
        for second in 1...300 {
            clock.advance(by: 1000)
            try daemon.request("POST", "/v1/tasks/curve/progress", json: #"{"completed":\#(second * 3)}"#)
        }
        let full = try daemon.request("GET", "/v1/tasks/curve/history?max_points=1000").json
        let fullPoints = try #require(full["points"] as? [[String: Any]])
        #expect(fullPoints.count == 301)
        let sampled = try daemon.request("GET", "/v1/tasks/curve/history?max_points=25").json
        let points = try #require(sampled["points"] as? [[String: Any]])
        #expect(points.count == 25)
        #expect(points.first?["completed"] as? Int == 0)
        #expect(points.last?["completed"] as? Int == 900)
        #expect(points.last?["fraction"] as? Double == 0.9)
        #expect(try daemon.request("GET", "/v1/tasks/curve/history").json["points"].map { ($0 as? [Any])?.count } == 200)
        for bad in ["max_points=1", "max_points=1001", "max_points=x", "points=5"] {
            #expect(try daemon.request("GET", "/v1/tasks/curve/history?\(bad)").problemCode == "invalid_request", "\(bad)")
        }
        #expect(try daemon.request("GET", "/v1/tasks/nope/history").status == 404)
    }

    @Test(arguments: Transport.allCases) func retentionForgetsOldFinishedTasks(_ transport: Transport) throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(transport: transport, arguments: ["--retention", "1d"], clock: clock)
        try daemon.register(#"{"id":"old","name":"Old"}"#)
        try daemon.register(#"{"id":"active","name":"Active"}"#)
        try daemon.request("POST", "/v1/tasks/old/finish", json: #"{"outcome":"succeeded"}"#)
        clock.advance(by: 86_400_000 - 1)
        #expect(daemon.application.pruneOldTasks() == 0)
        clock.advance(by: 2)
        #expect(daemon.application.pruneOldTasks() == 1)
        #expect(try daemon.request("GET", "/v1/tasks/old").status == 404)
        #expect(try daemon.request("GET", "/v1/tasks/active").status == 200)
        #expect(try daemon.request("GET", "/v1/tasks").json["total_size"] as? Int == 1)
    }
}
