import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Daemon
@testable import Telemetry

/// Run-time rules through the real daemon (`RunTimeRule`): `expected_seconds`, `deadline`
/// and `min_seconds` stored and shown, the overdue flag raised by the sweeper and kept,
/// `overdue=true` listings, the events and their order, the metrics, the refusals, and a
/// restart across a due moment. In `POSTGRES_SUITES`: the same on PostgreSQL.
@Suite(.serialized) struct OverdueAPITests {
    private static let start: EpochMilliseconds = 1_800_000_000_000

    private func time(_ milliseconds: EpochMilliseconds) -> String { Timestamp.rfc3339(milliseconds) }

    @Test(arguments: Transport.allCases) func theRulesAreStoredShownAndTheSweeperFlagsAtTheDueMoment(_ transport: Transport) throws {
        let clock = ManualClock(Self.start)
        let daemon = try LiveDaemon(transport: transport, clock: clock)
        let deadline = Self.start + 3_600_000
        let created = try daemon.register(
            #"{"id":"nightly","name":"Nightly","expected_seconds":90,"deadline":"\#(time(deadline))","min_seconds":30.5,"stall_timeout_seconds":3600}"#)
        #expect(created["expected_seconds"] as? Double == 90)
        #expect(created["deadline"] as? String == time(deadline))
        #expect(created["min_seconds"] as? Double == 30.5)
        #expect(created["overdue"] as? Bool == false && created["overdue_since"] is NSNull && created["too_quick"] as? Bool == false)
        try daemon.register(#"{"id":"plain","name":"Plain","stall_timeout_seconds":3600}"#)

        clock.advance(by: 89_999)
        daemon.application.sweepStalls()
        #expect(try daemon.request("GET", "/v1/tasks/nightly").json["overdue"] as? Bool == false, "not before the due moment")
        clock.advance(by: 1)
        daemon.application.sweepStalls()
        let flagged = try daemon.request("GET", "/v1/tasks/nightly").json
        #expect(flagged["overdue"] as? Bool == true)
        #expect(flagged["overdue_since"] as? String == time(Self.start + 90_000), "since the start plus expected_seconds")
        #expect(flagged["stalled"] as? Bool == false, "overdue is not a stall")

        let listed = try daemon.request("GET", "/v1/tasks?overdue=true").json
        #expect(listed["total_size"] as? Int == 1)
        #expect((listed["tasks"] as? [[String: Any]])?.map { $0["id"] as? String } == ["nightly"])
        #expect(try daemon.request("GET", "/v1/tasks?overdue=false").json["total_size"] as? Int == 2, "false: every task")
        #expect(try daemon.request("GET", "/v1/tasks?overdue=true&state=succeeded").json["total_size"] as? Int == 0)
        #expect(try daemon.request("GET", "/v1/tasks?overdue=true&q=night").json["total_size"] as? Int == 1)
        #expect(try daemon.request("GET", "/v1/tasks?overdue=maybe").problemCode == "invalid_request")

        let finished = try daemon.request("POST", "/v1/tasks/nightly/finish", json: #"{"outcome":"succeeded"}"#).json
        #expect(finished["overdue"] as? Bool == true, "a task that ran late and then succeeded still says so")
        #expect(finished["too_quick"] as? Bool == false)
        let stored = try daemon.request("GET", "/v1/tasks?overdue=true&state=succeeded").json
        #expect((stored["tasks"] as? [[String: Any]])?.first?["overdue_since"] as? String == time(Self.start + 90_000))
    }

    @Test func theStreamOrdersOverdueFinishedAndTooQuick() throws {
        let clock = ManualClock(Self.start)
        // Only the test sweeps (the running sweeper waits an hour of real time).
        let daemon = try LiveDaemon(clock: clock, adjust: { $0.maintenance.sweepInterval = 3600 })
        let subscriber = try daemon.subscribe()
        _ = try subscriber.nextEvent()  // snapshot
        try daemon.register(#"{"id":"late","name":"Late","expected_seconds":10,"stall_timeout_seconds":3600}"#)
        try daemon.register(#"{"id":"quick","name":"Quick","min_seconds":60,"stall_timeout_seconds":3600}"#)
        try daemon.register(#"{"id":"unswept","name":"Unswept","expected_seconds":20,"stall_timeout_seconds":3600}"#)
        clock.advance(by: 10_000)
        daemon.application.sweepStalls()
        try daemon.request("POST", "/v1/tasks/late/finish", json: #"{"outcome":"failed"}"#)
        try daemon.request("POST", "/v1/tasks/quick/finish", json: #"{"outcome":"succeeded"}"#)
        // Past its due moment, finished before any sweep came by: flagged by the finish itself,
        // as the sweep would have.
        clock.advance(by: 10_000)
        try daemon.request("POST", "/v1/tasks/unswept/finish", json: #"{"outcome":"succeeded"}"#)
        let events = try subscriber.events { $0.event == "task.finished" && $0.json["id"] as? String == "unswept" }
        let named = events.filter { $0.event != "task.created" }.map { "\($0.event ?? "") \($0.json["id"] as? String ?? "")" }
        #expect(named == ["task.overdue late", "task.finished late", "task.finished quick", "task.too_quick quick",
                          "task.overdue unswept", "task.finished unswept"])
        let ids = events.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids == ids.sorted() && Set(ids).count == ids.count, "each change has its own increasing number")
        let tooQuick = try #require(events.first { $0.event == "task.too_quick" })
        #expect(tooQuick.json["too_quick"] as? Bool == true && tooQuick.json["state"] as? String == "succeeded")
        let unswept = try #require(events.first { $0.event == "task.overdue" && $0.json["id"] as? String == "unswept" })
        #expect(unswept.json["state"] as? String == "running", "flagged as the sweep would have, before the finish")
        #expect(unswept.json["overdue_since"] as? String == time(Self.start + 20_000))
        let reply = try daemon.request("GET", "/v1/tasks/quick").json
        #expect(reply["too_quick"] as? Bool == true)
    }

    /// A finish past the due moment that no sweep had flagged makes two changes (the flag,
    /// then the finish): its reply is the task as finished, what a read gives after it,
    /// not the task as flagged, still running.
    @Test(arguments: Transport.allCases) func aFinishThatFlagsTheTaskRepliesWithTheTaskFinished(_ transport: Transport) throws {
        let clock = ManualClock(Self.start)
        // Only the finish flags it (the running sweeper waits an hour of real time).
        let daemon = try LiveDaemon(transport: transport, clock: clock, adjust: { $0.maintenance.sweepInterval = 3600 })
        try daemon.register(#"{"id":"late","name":"Late","expected_seconds":20,"stall_timeout_seconds":3600}"#)
        clock.advance(by: 20_500)
        let reply = try daemon.request("POST", "/v1/tasks/late/finish", json: #"{"outcome":"succeeded"}"#)
        #expect(reply.status == 200)
        #expect(reply.json["state"] as? String == "succeeded")
        #expect(reply.json["overdue"] as? Bool == true)
        #expect(reply.json["finished_at"] as? String == time(Self.start + 20_500))
        #expect(reply.text == (try daemon.request("GET", "/v1/tasks/late").text), "the reply is the task as stored")
    }

    @Test func theGaugeAndTheCounterFollowTheFlags() throws {
        let clock = ManualClock(Self.start)
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"a","name":"A","deadline":"\#(time(Self.start + 5_000))","stall_timeout_seconds":3600}"#)
        try daemon.register(#"{"id":"b","name":"B","expected_seconds":5,"stall_timeout_seconds":3600}"#)
        try daemon.register(#"{"id":"c","name":"C","min_seconds":5,"stall_timeout_seconds":3600}"#)
        try daemon.request("POST", "/v1/tasks/c/finish", json: #"{"outcome":"succeeded"}"#)
        clock.advance(by: 5_000)
        daemon.application.sweepStalls()
        try daemon.request("POST", "/v1/tasks/b/finish", json: #"{"outcome":"succeeded"}"#)
        let samples = MetricsTests.samples(try daemon.request("GET", "/metrics").text)
        #expect(samples["headway_tasks_overdue"] == 1, "b finished: only a is overdue and unfinished")
        #expect(samples[#"headway_tasks_flagged_total{flag="overdue"}"#] == 2)
        #expect(samples[#"headway_tasks_flagged_total{flag="too_quick"}"#] == 1)
    }

    @Test(arguments: Transport.allCases) func badRulesAreRefusedWithACodeAndNothingStored(_ transport: Transport) throws {
        let clock = ManualClock(Self.start)
        let daemon = try LiveDaemon(transport: transport, clock: clock)
        for (body, code) in [
            (#"{"id":"x","name":"X","expected_seconds":0}"#, "invalid_request"),
            (#"{"id":"x","name":"X","expected_seconds":-1}"#, "invalid_request"),
            (#"{"id":"x","name":"X","min_seconds":1e300}"#, "invalid_request"),
            (#"{"id":"x","name":"X","expected_seconds":5,"min_seconds":9}"#, "invalid_request"),
            (#"{"id":"x","name":"X","deadline":"soon"}"#, "invalid_request"),
            (#"{"id":"x","name":"X","deadline":"\#(time(Self.start - 1))"}"#, "deadline_out_of_range"),
            (#"{"id":"x","name":"X","deadline":"\#(time(Self.start))"}"#, "deadline_out_of_range"),
            (#"{"id":"x","name":"X","deadline":"9999-12-31T23:59:59Z"}"#, "deadline_out_of_range"),
        ] {
            let reply = try daemon.request("POST", "/v1/tasks", json: body)
            #expect(reply.headers["content-type"] == "application/problem+json", "\(body)")
            #expect(reply.problemCode == code, "\(body): \(reply.text)")
            #expect(reply.status == (code == "invalid_request" ? 400 : 422), "\(body)")
        }
        #expect(try daemon.request("GET", "/v1/tasks/x").status == 404)
        #expect(try daemon.request("GET", "/v1/tasks").json["total_size"] as? Int == 0)
        // A registration repeated after its deadline passed is the same task, not a refusal.
        let body = #"{"id":"y","name":"Y","deadline":"\#(time(Self.start + 1_000))"}"#
        try daemon.register(body)
        clock.advance(by: 2_000)
        #expect(try daemon.request("POST", "/v1/tasks", json: body).status == 200)
    }

    /// The daemon is stopped before a deadline and started again after it: the task is
    /// flagged at the first sweep, since the deadline itself; one whose deadline is still
    /// ahead is not flagged a moment early, downtime or not.
    @Test func aRestartAcrossTheDeadlineFlagsAtTheFirstSweepAndNeverEarly() throws {
        let clock = ManualClock(Self.start)
        let directory = TemporaryDirectory()
        let postgres = TestPostgresDatabase.isSelected ? try TestPostgresDatabase() : nil
        defer {
            postgres?.drop()
            directory.remove()
        }
        func start() throws -> HeadwayApplication {
            guard case .run(let configuration) = try Configuration.parse(
                arguments: ["--listen", "127.0.0.1:0", "--db", postgres?.uri ?? directory.file("h.db")], environment: [:]) else {
                throw TestHTTPError("not a run configuration")
            }
            let application = try buildApplication(configuration, clock: clock,
                                                   logger: Logger(minimumLevel: .error, sink: { _ in }))
            try application.start()
            return application
        }
        let first = try start()
        let client = try TestHTTPClient(port: first.port)
        _ = try client.request("POST", "/v1/tasks", json:
            #"{"id":"crossed","name":"Crossed","deadline":"\#(time(Self.start + 10_000))","min_seconds":2.5,"stall_timeout_seconds":3600}"#)
        _ = try client.request("POST", "/v1/tasks", json:
            #"{"id":"ahead","name":"Ahead","expected_seconds":120,"stall_timeout_seconds":3600}"#)
        clock.advance(by: 5_000)
        #expect(first.sweepStalls() == 0)
        first.shutdown()
        clock.advance(by: 55_000)  // down for 55 s, across the first deadline
        let second = try start()
        defer { second.shutdown() }
        second.sweepStalls()
        let reader = try TestHTTPClient(port: second.port)
        let crossed = try reader.request("GET", "/v1/tasks/crossed").json
        #expect(crossed["overdue"] as? Bool == true)
        #expect(crossed["overdue_since"] as? String == time(Self.start + 10_000), "since the deadline, not the restart")
        // The rules as stored, read back by a daemon that never saw them in memory.
        #expect(crossed["deadline"] as? String == time(Self.start + 10_000) && crossed["min_seconds"] as? Double == 2.5)
        #expect(crossed["expected_seconds"] is NSNull && crossed["too_quick"] as? Bool == false)
        #expect(try reader.request("GET", "/v1/tasks/ahead").json["overdue"] as? Bool == false)
        clock.advance(by: 59_999)  // 1 ms before the start plus 120 s
        second.sweepStalls()
        #expect(try reader.request("GET", "/v1/tasks/ahead").json["overdue"] as? Bool == false, "no grace, and no early flag")
        clock.advance(by: 1)
        second.sweepStalls()
        let ahead = try reader.request("GET", "/v1/tasks/ahead").json
        #expect(ahead["overdue"] as? Bool == true)
        #expect(ahead["overdue_since"] as? String == time(Self.start + 120_000))
        #expect(ahead["expected_seconds"] as? Double == 120 && ahead["deadline"] is NSNull)
    }
}
