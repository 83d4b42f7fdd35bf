import Foundation
import HTTPServer
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import Daemon
@testable import HeadwayAPI

/// `POST /v1/progress` against the real daemon: each item applied in order as the single
/// route would apply it, or refused alone with the single route's problem and nothing of
/// it stored; the whole request in one writer job; bounds; events of applied items only.
@Suite(.serialized) struct BatchProgressTests {
    /// Sends `{"updates": [items…]}` and returns the reply.
    private func send(_ daemon: LiveDaemon, _ items: [String], headers: [(String, String)] = []) throws -> TestResponse {
        try daemon.request("POST", "/v1/progress", json: #"{"updates":["# + items.joined(separator: ",") + "]}",
                           headers: headers)
    }

    /// The results of a batch reply, one per item.
    private func results(_ reply: TestResponse) -> [[String: Any]] { reply.json["results"] as? [[String: Any]] ?? [] }

    /// An item result's task or problem, as compact JSON text (to compare byte for byte).
    private func text(_ value: Any?) throws -> String {
        let object = try #require(value)
        return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// A reply's JSON text with its keys sorted (as `text(_:)` writes it).
    private func sorted(_ reply: TestResponse) throws -> String { try text(reply.json) }

    @Test(arguments: Transport.allCases) func mixedBatchAppliesEachItemAloneAndRefusalsChangeNothing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"a","name":"A","total":100}"#)
        try daemon.register(#"{"id":"b","name":"B","total":10}"#)
        try daemon.register(#"{"id":"done","name":"Done"}"#)
        try daemon.request("POST", "/v1/tasks/done/finish", json: #"{"outcome":"succeeded"}"#)
        try daemon.register(#"{"id":"p","name":"Parent"}"#)
        try daemon.register(#"{"id":"c","name":"Child","parent_id":"p","total":10}"#)
        let untouched = try ["b", "done"].map { try daemon.snapshot($0) }

        let items = [
            #"{"task_id":"a","completed":10,"seq":1}"#,
            #"{"task_id":"ghost","increment":1}"#,
            #"{"task_id":"b","completed":11}"#,
            #"{"task_id":"done","increment":1}"#,
            #"{"task_id":"a","completed":5}"#,
            #"{"task_id":"a","increment":5,"seq":2,"label":"Copying"}"#,
            #"{"completed":1}"#,
            #"7"#,
            #"{"task_id":"b","colour":"red"}"#,
            #"{"task_id":"bad id","increment":1}"#,
            #"{"task_id":"b","completed":1,"increment":1}"#,
            #"{"task_id":"c","completed":5}"#,
        ]
        let reply = try send(daemon, items)
        #expect(reply.status == 200, "\(reply.text)")
        #expect(reply.headers["content-type"] == "application/json")
        let results = results(reply)
        #expect(results.map { $0["status"] as? Int } == [200, 404, 422, 409, 422, 200, 400, 400, 400, 400, 422, 200])
        let codes = results.map { ($0["problem"] as? [String: Any])?["code"] as? String }
        #expect(codes == [nil, "not_found", "completed_exceeds_total", "task_finished", "progress_regression", nil,
                          "invalid_request", "invalid_request", "invalid_request", "invalid_request",
                          "completed_and_increment", nil])
        #expect(results.allSatisfy { ($0["task"] == nil) != ($0["problem"] == nil) }, "a task or a problem, never both")
        #expect(results.allSatisfy { $0["unchanged"] == nil })

        // Applied in order: the regression is judged after the first item, the increment after both.
        #expect((results[0]["task"] as? [String: Any])?["completed"] as? Int == 10)
        #expect(try text(results[5]["task"]) == (try sorted(daemon.request("GET", "/v1/tasks/a"))))
        #expect((results[11]["task"] as? [String: Any])?["fraction"] as? Double == 0.5)
        #expect((try daemon.request("GET", "/v1/tasks/p").json["fraction"] as? Double) == 0.5, "rolled up to the parent")
        #expect(try ["b", "done"].map { try daemon.snapshot($0) } == untouched, "refused items changed a task")

        // Items count as progress updates, accepted or refused by code.
        let samples = MetricsTests.samples(try daemon.request("GET", "/metrics").text)
        #expect(samples[#"headway_updates_accepted_total{kind="progress"}"#] == 3)
        #expect(samples[#"headway_updates_refused_total{kind="progress",code="invalid_request"}"#] == 4)
        #expect(samples[#"headway_updates_refused_total{kind="progress",code="not_found"}"#] == 1)

        // Each problem is the one the single route gives for the same update (on the same task).
        for (index, id, body) in [(1, "ghost", #"{"increment":1}"#), (2, "b", #"{"completed":11}"#),
                                  (3, "done", #"{"increment":1}"#), (8, "b", #"{"colour":"red"}"#),
                                  (10, "b", #"{"completed":1,"increment":1}"#)] {
            let single = try daemon.request("POST", "/v1/tasks/\(id)/progress", json: body)
            #expect(try text(results[index]["problem"]) == (try sorted(single)), "item \(index)")
            #expect((results[index]["problem"] as? [String: Any])?["status"] as? Int == single.status)
        }
        let fields = { (index: Int) in
            ((results[index]["problem"] as? [String: Any])?["errors"] as? [[String: Any]] ?? []).map { $0["field"] as? String }
        }
        #expect(fields(6) == ["task_id"])
        #expect(fields(7) == ["(item)"])
        #expect(fields(9) == ["task_id"])
        #expect(results.map { $0["task_id"] as? String } == ["a", "ghost", "b", "done", "a", "a", nil, nil, "b", "bad id", "b", "c"])
        #expect(results[6]["task_id"] is NSNull && results[7]["task_id"] is NSNull, "null when the item names none")

    }

    @Test(arguments: Transport.allCases) func repeatedSeqIsAcknowledgedInsideAndAcrossBatches(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"s","name":"Upload"}"#)
        let first = results(try send(daemon, [#"{"task_id":"s","increment":10,"seq":1}"#, #"{"task_id":"s","increment":10,"seq":1}"#,
                                              #"{"task_id":"s","increment":10,"seq":2}"#]))
        #expect(first.map { ($0["task"] as? [String: Any])?["completed"] as? Int } == [10, 10, 20])
        #expect(first.map { $0["unchanged"] as? Bool } == [nil, true, nil])
        #expect(first.map { $0["status"] as? Int } == [200, 200, 200])

        let retried = results(try send(daemon, [#"{"task_id":"s","increment":10,"seq":2}"#, #"{"task_id":"s","increment":10,"seq":1}"#]))
        #expect(retried.map { $0["unchanged"] as? Bool } == [true, true], "a whole batch resent changes nothing")
        #expect(retried.map { ($0["task"] as? [String: Any])?["completed"] as? Int } == [20, 20])
        let single = try daemon.request("POST", "/v1/tasks/s/progress", json: #"{"increment":10,"seq":2}"#)
        #expect(single.headers["headway-unchanged"] == "true", "the batch's seq is the single route's")
        #expect(try text(retried[0]["task"]) == (try sorted(single)))
        #expect(try daemon.request("POST", "/v1/tasks/s/progress", json: #"{"increment":10,"seq":3}"#).json["completed"] as? Int == 30)
        let after = results(try send(daemon, [#"{"task_id":"s","increment":10,"seq":3}"#, #"{"task_id":"s","increment":10,"seq":4}"#]))
        #expect(after.map { $0["unchanged"] as? Bool } == [true, nil])
        #expect(try daemon.request("GET", "/v1/tasks/s").json["completed"] as? Int == 40)
    }

    @Test(arguments: Transport.allCases) func aTaskPrefixTokenReachesOnlyItsTasks(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let admin = try daemon.makeToken([.admin], name: "admin")
        let runner = try daemon.makeToken([.report], name: "ci", prefix: "ci.")
        let reader = try daemon.makeToken([.read], name: "reader")
        for id in ["ci.one", "other"] {
            #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"T"}"#,
                                       headers: [("Authorization", "Bearer \(admin)")]).status == 201)
        }
        let before = try daemon.request("GET", "/v1/tasks/other", headers: [("Authorization", "Bearer \(admin)")]).text
        let reply = try send(daemon, [#"{"task_id":"other","increment":1}"#, #"{"task_id":"ci.one","increment":1}"#,
                                      #"{"task_id":"ci.none","increment":1}"#],
                             headers: [("Authorization", "Bearer \(runner)")])
        #expect(reply.status == 200)
        let results = results(reply)
        #expect(results.map { $0["status"] as? Int } == [404, 200, 404], "another prefix's task does not exist for it")
        #expect(try text(results[0]["problem"]) == (try text(results[2]["problem"])).replacingOccurrences(of: "ci.none", with: "other"))
        #expect(try daemon.request("GET", "/v1/tasks/other", headers: [("Authorization", "Bearer \(admin)")]).text == before)

        let refused = try send(daemon, [#"{"task_id":"ci.one","increment":1}"#], headers: [("Authorization", "Bearer \(reader)")])
        #expect(refused.status == 403)
        #expect(refused.problemCode == "insufficient_scope")
        #expect(try send(daemon, [#"{"task_id":"ci.one","increment":1}"#]).status == 401)
        #expect(try daemon.request("GET", "/v1/tasks/ci.one", headers: [("Authorization", "Bearer \(admin)")])
            .json["completed"] as? Int == 1)
    }

    @Test(arguments: Transport.allCases) func aBodyThatIsNoBatchIsRefusedWhole(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"t","name":"T","total":5000}"#)
        let before = try daemon.snapshot("t")
        let item = #"{"task_id":"t","increment":1}"#
        let tooMany = "[" + Array(repeating: item, count: ProgressBatch.defaultMaximumItems + 1).joined(separator: ",") + "]"
        let cases: [(String, Int, String)] = [
            ("", 400, "malformed_json"),
            (#"{"updates":["#, 400, "malformed_json"),
            ("[\(item)]", 400, "invalid_request"),
            ("{}", 400, "invalid_request"),
            (#"{"updates":null}"#, 400, "invalid_request"),
            (#"{"updates":{"task_id":"t"}}"#, 400, "invalid_request"),
            (#"{"updates":[\#(item)],"extra":1}"#, 400, "invalid_request"),
            (#"{"updates":\#(tooMany)}"#, 413, "too_many_items"),
        ]
        for (body, status, code) in cases {
            let reply = try daemon.request("POST", "/v1/progress", json: body)
            #expect(reply.status == status, "\(body.prefix(60))")
            #expect(reply.problemCode == code, "\(body.prefix(60))")
            #expect(reply.headers["content-type"] == "application/problem+json")
        }
        let form = try daemon.request("POST", "/v1/progress", json: #"{"updates":[\#(item)]}"#,
                                      headers: [("Content-Type", "text/plain")])
        #expect(form.status == 415)
        #expect(try daemon.request("GET", "/v1/progress").status == 405)
        #expect(try daemon.snapshot("t") == before, "a refused batch changed the task")

        let empty = try send(daemon, [])
        #expect(empty.status == 200)
        #expect(empty.text == #"{"results":[]}"#)
        let most = try daemon.request("POST", "/v1/progress",
                                      json: #"{"updates":["# + Array(repeating: item, count: ProgressBatch.defaultMaximumItems).joined(separator: ",") + "]}")
        #expect(results(most).count == ProgressBatch.defaultMaximumItems)
        #expect(try daemon.request("GET", "/v1/tasks/t").json["completed"] as? Int == ProgressBatch.defaultMaximumItems,
                "duplicate ids are applied in order")
    }

    @Test func maxBatchItemsBoundsTheItemsOfARequest() throws {
        let daemon = try LiveDaemon(arguments: ["--max-batch-items", "2"])
        try daemon.register(#"{"id":"t","name":"T"}"#)
        let item = #"{"task_id":"t","increment":1}"#
        let refused = try send(daemon, [item, item, item])
        #expect(refused.status == 413)
        #expect(refused.problemCode == "too_many_items")
        #expect(refused.json["detail"] as? String == "A batch may hold at most 2 updates (got 3); send the rest in another request.")
        #expect(try send(daemon, [item, item]).status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/t").json["completed"] as? Int == 2)
        #expect(throws: UsageError("--max-batch-items must be a whole number from 1 to 10000, not '0'")) {
            _ = try Configuration.parse(arguments: ["--max-batch-items", "0"], environment: [:])
        }
        guard case .run(let defaults) = try Configuration.parse(arguments: [], environment: [:]),
              case .run(let set) = try Configuration.parse(arguments: [], environment: ["HEADWAY_MAX_BATCH_ITEMS": "50"])
        else { throw UsageError("expected a run command") }
        #expect(defaults.maximumBatchItems == 1_000)
        #expect(set.maximumBatchItems == 50)
    }

    /// The batch route takes bodies up to 1 MiB (other routes keep `--max-body-bytes`).
    @Test func theBatchRouteTakesALargerBodyBounded() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"big","name":"Big"}"#)
        let label = String(repeating: "x", count: 500)
        let item = #"{"task_id":"big","increment":1,"label":"\#(label)"}"#
        let large = #"{"updates":["# + Array(repeating: item, count: ProgressBatch.defaultMaximumItems).joined(separator: ",") + "]}"
        #expect(large.utf8.count > 500_000)
        let reply = try daemon.connect().request("POST", "/v1/progress", json: large)
        #expect(reply.status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/big").json["completed"] as? Int == ProgressBatch.defaultMaximumItems)

        let before = try daemon.snapshot("big")
        let tooLarge = #"{"updates":["# + String(repeating: " ", count: TaskAPI.batchBodyBytes) + item + "]}"
        let refused = try daemon.connect().request("POST", "/v1/progress", json: tooLarge)
        #expect(refused.status == 413)
        #expect(refused.problemCode == "body_too_large")
        #expect((refused.json["detail"] as? String)?.contains("\(TaskAPI.batchBodyBytes) bytes") == true)
        let single = try daemon.connect().request("POST", "/v1/tasks/big/progress",
                                                  json: #"{"label":"\#(String(repeating: "y", count: 70_000))"}"#)
        #expect(single.status == 413, "the single route keeps its 64 KiB")
        #expect(try daemon.snapshot("big") == before)
    }

    /// A large batch is parsed off the server's thread: with its parsing held back, the
    /// server still answers other requests at once, and the batch is answered once parsed.
    @Test func aLargeBatchBeingParsedHoldsNoOtherRequest() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"big","name":"Big"}"#)
        let item = #"{"task_id":"big","increment":1,"label":"\#(String(repeating: "x", count: 100))"}"#
        let large = #"{"updates":["# + Array(repeating: item, count: 1000).joined(separator: ",") + "]}"
        #expect(large.utf8.count >= TaskAPI.batchParsedInPlaceBytes)
        daemon.application.batchParsing.suspend()
        let batch = try daemon.connect()
        try batch.send("POST /v1/progress HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       + "Content-Length: \(large.utf8.count)\r\n\r\n" + large)
        // Read once the server is sure to have the whole body: a later request on another
        // connection was served after it.
        #expect(try daemon.connect().request("GET", "/healthz").status == 200)
        #expect(try daemon.connect().request("GET", "/v1/tasks/big").json["completed"] as? Int == 0)
        daemon.application.batchParsing.resume()
        let reply = try batch.readResponse()
        #expect(reply.status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/big").json["completed"] as? Int == 1000)
    }

    /// (Over a socket: an event stream is read from one.)
    @Test func eventsArePublishedForAppliedItemsOnly() throws {
        let daemon = try LiveDaemon()
        for id in ["a", "b", "end"] { try daemon.register(#"{"id":"\#(id)","name":"T","total":10}"#) }
        try daemon.request("POST", "/v1/tasks/b/progress", json: #"{"completed":1,"seq":1}"#)
        let client = try daemon.subscribe()
        #expect(try client.nextEvent()?.event == "snapshot")
        let reply = try send(daemon, [#"{"task_id":"a","completed":2}"#, #"{"task_id":"ghost","increment":1}"#,
                                      #"{"task_id":"b","completed":0}"#, #"{"task_id":"b","increment":5,"seq":1}"#,
                                      #"{"task_id":"b","increment":3,"seq":2}"#, #"{"task_id":"a","completed":11}"#])
        #expect(results(reply).map { $0["status"] as? Int } == [200, 404, 422, 200, 200, 422])
        try daemon.request("POST", "/v1/tasks/end/progress", json: #"{"completed":1}"#)
        let events = try client.events { $0.json["id"] as? String == "end" }
        #expect(events.map { "\($0.event ?? "") \($0.json["id"] as? String ?? "") \($0.json["completed"] as? Int ?? -1)" }
                == ["task.updated a 2", "task.updated b 4", "task.updated end 1"])
    }

    /// The whole request is one writer job, in one batch and one commit. The writer is
    /// held while the request is handed over. The maintenance thread, the only other
    /// submitter (SQLite: on PostgreSQL the change listener may ask for a catch-up at any
    /// time), waits for each job it submits: within one of its ticks (250 ms) its next job
    /// is queued, or it was taken into the held batch; either way it submits nothing more
    /// until the writer is released. So the queue grows by exactly the request's jobs, and
    /// the queued jobs and the request's then commit as one batch. The writer's statistics
    /// are read when the reply is sent (on the writer thread, after its batch committed).
    @Test func oneRequestIsOneWriterJobAndOneCommit() throws {
        let daemon = try LiveDaemon(transport: .inProcess)
        guard daemon.postgresDatabase == nil else { return }
        try daemon.register(#"{"id":"t","name":"T"}"#)
        let writer = daemon.application.writer
        let running = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        writer.submit({ _ in
            running.signal()
            release.wait()
        }) { _ in }
        running.wait()
        // Bounded: a second, eight of the maintenance thread's ticks.
        var waited = 0
        while writer.queueDepth == 0 && waited < 200 {
            Thread.sleep(forTimeInterval: 0.005)
            waited += 1
        }
        let queued = writer.queueDepth
        let before = writer.statistics
        let items = (1...200).map { #"{"task_id":"t","increment":1,"seq":\#($0)}"# }
        let request = HTTPRequest(method: "POST", path: "/v1/progress", query: [],
                                  headers: [HTTPField("content-type", "application/json")],
                                  body: Array((#"{"updates":["# + items.joined(separator: ",") + "]}").utf8))
        let responder = StatisticsAtReply(writer: writer)
        daemon.application.pipeline.handle(request, responder)
        #expect(writer.queueDepth == queued + 1, "the request queued one job")
        release.signal()
        let (response, atReply) = try #require(responder.wait())
        #expect(response.status == 200)
        #expect(atReply.batches == before.batches + 2, "the held batch, then the queued jobs and the request's as one")
        #expect(try daemon.request("GET", "/v1/tasks/t").json["completed"] as? Int == 200)
    }

    /// An item that fails after it wrote (its roll-up to the parent refused by a trigger)
    /// changes nothing, and the items around it are applied: the request's items run
    /// again, each in a savepoint of its own (on PostgreSQL the failed statement aborted
    /// the transaction; on SQLite it undid only itself, leaving the child written).
    @Test(arguments: Transport.allCases) func anItemFailingAfterItWroteChangesNothing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"p","name":"Parent"}"#)
        try daemon.register(#"{"id":"c","name":"Child","parent_id":"p","total":10}"#)
        try daemon.register(#"{"id":"solo","name":"Solo","total":10}"#)
        let database = try Database(path: daemon.application.configuration.databasePath)
        if database.isPostgres {
            try database.execute("""
                CREATE FUNCTION refuse_parent() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'refused by the test'; END $$
                """)
            try database.execute("""
                CREATE TRIGGER refuse_parent BEFORE UPDATE ON tasks FOR EACH ROW WHEN (NEW.id = 'p')
                EXECUTE FUNCTION refuse_parent()
                """)
        } else {
            try database.execute("""
                CREATE TRIGGER refuse_parent BEFORE UPDATE ON tasks WHEN NEW.id = 'p'
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        database.close()
        let before = try ["c", "p"].map { try daemon.snapshot($0) }
        let reply = try send(daemon, [#"{"task_id":"solo","increment":1}"#, #"{"task_id":"c","increment":5}"#,
                                      #"{"task_id":"solo","increment":1}"#, #"{"task_id":"c","increment":5}"#])
        #expect(reply.status == 200, "\(reply.text)")
        let results = results(reply)
        #expect(results.map { $0["status"] as? Int } == [200, 500, 200, 500])
        #expect(results.map { ($0["problem"] as? [String: Any])?["code"] as? String } == [nil, "internal_error", nil, "internal_error"])
        #expect(try ["c", "p"].map { try daemon.snapshot($0) } == before, "the failed items left nothing behind")
        #expect(try daemon.request("GET", "/v1/tasks/solo").json["completed"] as? Int == 2)
        // The change numbers taken by the failed items were given back: events stay gapless.
        guard transport == .socket else { return }
        let client = try daemon.subscribe()
        let snapshot = try #require(try client.nextEvent())
        let snapshotID = try #require(snapshot.id.flatMap { Int64($0) })
        try daemon.request("POST", "/v1/tasks/solo/progress", json: #"{"increment":1}"#)
        #expect(try client.nextEvent()?.id == "\(snapshotID + 1)")
    }
}

/// Keeps the reply and the writer's statistics at the moment it was sent.
private final class StatisticsAtReply: Responder, @unchecked Sendable {  // `answer` is guarded by its lock
    private let writer: GroupCommitWriter
    private let answer = Locked<(HTTPResponse, GroupCommitWriter.Statistics)?>(nil)
    private let answered = DispatchSemaphore(value: 0)

    init(writer: GroupCommitWriter) { self.writer = writer }

    func respond(_ response: consuming HTTPResponse) {
        let statistics = writer.statistics
        answer.withLock { $0 = (response, statistics) }
        answered.signal()
    }

    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) {}

    func wait() -> (HTTPResponse, GroupCommitWriter.Statistics)? {
        guard answered.wait(timeout: .now() + 10) == .success else { return nil }
        return answer.withLock { $0 }
    }
}
