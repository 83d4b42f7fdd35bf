import Foundation
import HeadwayTestSupport
import Testing
@testable import HeadwayAPI

/// The task routes against the real daemon on a loopback port: the life cycle, every
/// accuracy rule, and that a refused request changes nothing.
@Suite(.serialized) struct TaskAPITests {
    @Test(arguments: Transport.allCases) func runnerLifeCycle(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let created = try daemon.request("POST", "/v1/tasks", json: #"{"id":"job-1","name":"Nightly backup","total":200,"unit":"files","metadata":{"host":"db-3"}}"#)
        #expect(created.status == 201)
        #expect(created.headers["location"] == "/v1/tasks/job-1")
        #expect(created.headers["content-type"] == "application/json")
        #expect(created.json["state"] as? String == "running")
        #expect(created.json["mode"] as? String == "quantified")
        #expect(created.json["fraction"] as? Double == 0)
        #expect((created.json["metadata"] as? [String: Any])?["host"] as? String == "db-3")

        let progressed = try daemon.request("POST", "/v1/tasks/job-1/progress", json: #"{"completed":50,"label":"Copying photos","seq":1}"#)
        #expect(progressed.status == 200)
        #expect(progressed.json["fraction"] as? Double == 0.25)
        #expect(progressed.json["label"] as? String == "Copying photos")
        #expect(progressed.json["last_progress_at"] is String)

        let incremented = try daemon.request("POST", "/v1/tasks/job-1/progress", json: #"{"increment":25,"seq":2}"#)
        #expect(incremented.json["completed"] as? Int == 75)

        let heartbeat = try daemon.request("POST", "/v1/tasks/job-1/heartbeat", json: #"{"label":"Waiting for the tape"}"#)
        #expect(heartbeat.status == 200)
        #expect(heartbeat.json["completed"] as? Int == 75)

        let finished = try daemon.request("POST", "/v1/tasks/job-1/finish", json: #"{"outcome":"succeeded","message":"200 files"}"#)
        #expect(finished.status == 200)
        #expect(finished.json["state"] as? String == "succeeded")
        #expect(finished.json["completed"] as? Int == 200)
        #expect(finished.json["fraction"] as? Double == 1)
        #expect(finished.json["finished_at"] is String)

        let fetched = try daemon.request("GET", "/v1/tasks/job-1")
        #expect(fetched.status == 200)
        #expect(fetched.text == finished.text)
    }

    @Test(arguments: Transport.allCases) func everyReplyCarriesEveryField(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let task = try daemon.register(#"{"name":"Indexing"}"#)
        let fields = ["id", "name", "label", "parent_id", "weight", "state", "mode", "completed", "total", "unit",
                      "fraction", "rate", "eta_seconds", "stalled", "stall_reason", "stalled_since",
                      "stall_timeout_seconds", "progress_timeout_seconds", "cancel_requested", "created_at",
                      "updated_at", "last_progress_at", "finished_at", "message", "metadata"]
        for field in fields { #expect(task.keys.contains(field), "missing \(field)") }
        #expect(task["mode"] as? String == "indeterminate")
        #expect(task["fraction"] is NSNull)
        #expect(task["stall_timeout_seconds"] as? Int == 30)
        let id = task["id"] as! String
        #expect(id.count == 36, "a generated id is a UUID")
        #expect((task["created_at"] as! String).hasSuffix("Z"))
    }

    @Test(arguments: Transport.allCases) func registrationIsIdempotentAndConflictsAre409(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let body = #"{"id":"etl-7","name":"ETL","total":10}"#
        let first = try daemon.request("POST", "/v1/tasks", json: body)
        #expect(first.status == 201)
        try daemon.request("POST", "/v1/tasks/etl-7/progress", json: #"{"completed":3}"#)
        let repeated = try daemon.request("POST", "/v1/tasks", json: body)
        #expect(repeated.status == 200)
        #expect(repeated.json["completed"] as? Int == 3, "a repeated registration answers with the task as it is")
        let before = try daemon.snapshot("etl-7")
        let conflict = try daemon.request("POST", "/v1/tasks", json: #"{"id":"etl-7","name":"Something else"}"#)
        #expect(conflict.status == 409)
        #expect(conflict.problemCode == "task_conflict")
        #expect(conflict.headers["content-type"] == "application/problem+json")
        #expect(try daemon.snapshot("etl-7") == before)
    }

    @Test(arguments: Transport.allCases) func accuracyRulesRefuseAndChangeNothing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"t","name":"Copy","total":100}"#)
        try daemon.request("POST", "/v1/tasks/t/progress", json: #"{"completed":40,"seq":5}"#)
        let before = try daemon.snapshot("t")
        let cases: [(String, Int, String)] = [
            (#"{"completed":39}"#, 422, "progress_regression"),
            (#"{"completed":101}"#, 422, "completed_exceeds_total"),
            (#"{"increment":61}"#, 422, "completed_exceeds_total"),
            (#"{"total":39}"#, 422, "total_below_completed"),
            (#"{"completed":50,"increment":1}"#, 422, "completed_and_increment"),
            (#"{"completed":-1}"#, 400, "invalid_request"),
            (#"{"completed":1.5}"#, 400, "invalid_request"),
            (#"{"completed":9007199254740992}"#, 400, "invalid_request"),
            (#"{"completed":"50"}"#, 400, "invalid_request"),
            (#"{"completed":NaN}"#, 400, "malformed_json"),
            (#"{"completed":Infinity}"#, 400, "malformed_json"),
            (#"{"label":"\#(String(repeating: "x", count: 501))"}"#, 400, "invalid_request"),
            (#"{"colour":"red"}"#, 400, "invalid_request"),
            (#"[1,2]"#, 400, "invalid_request"),
            (#"{"completed":"#, 400, "malformed_json"),
        ]
        for (body, status, code) in cases {
            let response = try daemon.request("POST", "/v1/tasks/t/progress", json: body)
            #expect(response.status == status, "\(body)")
            #expect(response.problemCode == code, "\(body)")
            #expect(response.headers["content-type"] == "application/problem+json")
        }
        #expect(try daemon.snapshot("t") == before, "refused updates changed the task")
    }

    @Test(arguments: Transport.allCases) func repeatedSeqIsAcknowledgedAndNotApplied(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"s","name":"Upload"}"#)
        let first = try daemon.request("POST", "/v1/tasks/s/progress", json: #"{"increment":10,"seq":1}"#)
        #expect(first.json["completed"] as? Int == 10)
        #expect(first.headers["headway-unchanged"] == nil)
        let retry = try daemon.request("POST", "/v1/tasks/s/progress", json: #"{"increment":10,"seq":1}"#)
        #expect(retry.status == 200)
        #expect(retry.headers["headway-unchanged"] == "true")
        #expect(retry.json["completed"] as? Int == 10)
        let older = try daemon.request("POST", "/v1/tasks/s/heartbeat", json: #"{"seq":0}"#)
        #expect(older.headers["headway-unchanged"] == "true")
        let next = try daemon.request("POST", "/v1/tasks/s/progress", json: #"{"increment":10,"seq":2}"#)
        #expect(next.json["completed"] as? Int == 20)
    }

    @Test(arguments: Transport.allCases) func finishSemantics(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"f","name":"Build","total":10}"#)
        #expect(try daemon.request("POST", "/v1/tasks/f/finish", json: "{}").problemCode == "invalid_request")
        #expect(try daemon.request("POST", "/v1/tasks/f/finish").problemCode == "malformed_json")
        let failed = try daemon.request("POST", "/v1/tasks/f/finish", json: #"{"outcome":"failed","message":"exit 2"}"#)
        #expect(failed.json["state"] as? String == "failed")
        #expect(failed.json["message"] as? String == "exit 2")
        let again = try daemon.request("POST", "/v1/tasks/f/finish", json: #"{"outcome":"failed"}"#)
        #expect(again.status == 200)
        #expect(again.text == failed.text)
        #expect(try daemon.request("POST", "/v1/tasks/f/finish", json: #"{"outcome":"succeeded"}"#).problemCode == "outcome_conflict")
        let late = try daemon.request("POST", "/v1/tasks/f/progress", json: #"{"increment":1}"#)
        #expect(late.status == 409)
        #expect(late.problemCode == "task_finished")
        #expect(try daemon.request("POST", "/v1/tasks/f/heartbeat").status == 409)
        #expect(try daemon.snapshot("f") == failed.text)
    }

    @Test(arguments: Transport.allCases) func pendingTasksStartAtTheirFirstSignal(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        #expect(try daemon.register(#"{"id":"q","name":"Queued","state":"pending"}"#)["state"] as? String == "pending")
        #expect(try daemon.request("POST", "/v1/tasks/q/heartbeat").json["state"] as? String == "running")
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"name":"x","state":"succeeded"}"#).status == 400)
    }

    @Test(arguments: Transport.allCases) func cancelReachesTheRunnerAndCascades(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"parent","name":"Deploy"}"#)
        try daemon.register(#"{"id":"child","name":"Deploy web","parent_id":"parent","weight":2}"#)
        let canceled = try daemon.request("POST", "/v1/tasks/parent/cancel")
        #expect(canceled.status == 202)
        #expect(canceled.json["cancel_requested"] as? Bool == true)
        let childReply = try daemon.request("POST", "/v1/tasks/child/progress", json: #"{"increment":1}"#)
        #expect(childReply.json["cancel_requested"] as? Bool == true, "the runner learns of the cancel from its next reply")
        #expect(try daemon.request("POST", "/v1/tasks/parent/cancel").status == 202)
        let done = try daemon.request("POST", "/v1/tasks/child/finish", json: #"{"outcome":"canceled"}"#)
        #expect(done.json["state"] as? String == "canceled")
        #expect(try daemon.request("POST", "/v1/tasks/child/cancel").problemCode == "task_finished")
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"name":"x","parent_id":"nope"}"#).problemCode == "parent_not_found")
    }

    @Test(arguments: Transport.allCases) func deleteRemovesTheTaskAndItsChildren(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"p","name":"Parent"}"#)
        try daemon.register(#"{"id":"c","name":"Child","parent_id":"p"}"#)
        try daemon.register(#"{"id":"keep","name":"Other"}"#)
        let deleted = try daemon.request("DELETE", "/v1/tasks/p")
        #expect(deleted.status == 204)
        #expect(deleted.body.isEmpty)
        #expect(try daemon.request("GET", "/v1/tasks/c").problemCode == "not_found")
        #expect(try daemon.request("DELETE", "/v1/tasks/p").status == 404)
        #expect(try daemon.request("GET", "/v1/tasks/keep").status == 200)
    }

    @Test(arguments: Transport.allCases) func unknownTasksAndBadIDs(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for (method, path) in [("GET", "/v1/tasks/ghost"), ("POST", "/v1/tasks/ghost/progress"),
                               ("POST", "/v1/tasks/ghost/heartbeat"), ("POST", "/v1/tasks/ghost/cancel")] {
            let response = try daemon.request(method, path, json: method == "POST" ? "{}" : nil)
            #expect(response.status == 404, "\(method) \(path)")
            #expect(response.problemCode == "not_found")
        }
        let badID = try daemon.request("GET", "/v1/tasks/bad%20id")
        #expect(badID.status == 400)
        #expect(badID.problemCode == "invalid_id")
        let longID = try daemon.request("GET", "/v1/tasks/" + String(repeating: "a", count: 129))
        #expect(longID.problemCode == "invalid_id")
        // The id is judged before the body, whichever way the body is read (a plain one, or
        // one the general parser reads and refuses).
        for body in [#"{"increment":1,"label":"plain"}"#, #"{"increment":-1}"#] {
            let refused = try daemon.request("POST", "/v1/tasks/bad%20id/progress", json: body)
            #expect(refused.status == 400, "\(body)")
            #expect(refused.problemCode == "invalid_id", "\(body)")
        }
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"a/b","name":"x"}"#).problemCode == "invalid_request")
    }

    @Test(arguments: [
        ("application/json", "application/json"), (" Application/JSON ; charset=utf-8", "application/json"),
        ("\tapplication/merge-patch+json\t", "application/merge-patch+json"), ("", ""), (" ; x", ""),
        ("text/plain;", "text/plain"),
    ])
    func mediaTypeIsTheLowerCasedTypeBeforeParameters(_ contentType: String, _ expected: String) {
        #expect(TaskAPI.mediaType(contentType) == expected)
    }

    @Test func httpLevelErrors() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"h","name":"Hold"}"#)
        let before = try daemon.snapshot("h")

        let wrongType = try daemon.request("POST", "/v1/tasks/h/progress", json: "completed=1",
                                           headers: [("Content-Type", "application/x-www-form-urlencoded")])
        #expect(wrongType.status == 415)
        #expect(wrongType.problemCode == "unsupported_media_type")
        try daemon.register(#"{"id":"charset","name":"Charset"}"#)
        #expect(try daemon.request("POST", "/v1/tasks/charset/progress", json: "{}",
                                   headers: [("Content-Type", "application/json; charset=utf-8")]).status == 200)

        let unknown = try daemon.request("GET", "/v2/everything")
        #expect(unknown.status == 404)
        #expect(unknown.problemCode == "route_not_found")
        let wrongMethod = try daemon.request("PATCH", "/v1/tasks/h")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.headers["allow"] == "GET, HEAD, DELETE")
        #expect(try daemon.request("GET", "/v1/tasks/h/progress").headers["allow"] == "POST")

        let big = "{\"label\":\"" + String(repeating: "x", count: 70_000) + "\"}"
        let announced = try daemon.connect()
        #expect(try announced.request("POST", "/v1/tasks/h/heartbeat", json: big).status == 413)
        let chunked = try daemon.connect()
        let piece = String(repeating: "x", count: 40_000)
        try chunked.send("POST /v1/tasks/h/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "9c40\r\n\(piece)\r\n9c40\r\n\(piece)\r\n0\r\n\r\n")
        let chunkedReply = try chunked.readResponse()
        #expect(chunkedReply.status == 413)
        #expect(chunkedReply.problemCode == "body_too_large")

        #expect(try daemon.request("POST", "/v1/tasks", json: "").problemCode == "malformed_json")
        #expect(try daemon.request("POST", "/v1/tasks", json: "null").problemCode == "invalid_request")
        #expect(try daemon.request("POST", "/v1/tasks", json: String(repeating: "[", count: 30_000)).status == 400)
        #expect(try daemon.snapshot("h") == before, "refused requests changed the task")
    }

    /// Every reply carries the id its request is logged under: the client's own when plain,
    /// else one made up — refusals of the HTTP layer and the router included.
    @Test func everyReplyCarriesItsRequestID() throws {
        let daemon = try LiveDaemon()
        #expect(try daemon.request("GET", "/healthz", headers: [("X-Request-Id", "abc-123")]).headers["x-request-id"] == "abc-123")
        for hostile in [String(repeating: "x", count: 65), "has space", "quote\"d", ""] {
            let madeUp = try daemon.request("GET", "/healthz", headers: [("X-Request-Id", hostile)]).headers["x-request-id"]
            #expect(madeUp != nil && madeUp != hostile && madeUp?.isEmpty == false, "\(hostile)")
        }
        let first = try daemon.request("GET", "/nowhere").headers["x-request-id"]
        let second = try daemon.request("PATCH", "/v1/tasks/x").headers["x-request-id"]
        #expect(first != nil && second != nil && first != second)
        let big = "{\"label\":\"" + String(repeating: "x", count: 70_000) + "\"}"
        let refused = try daemon.connect().request("POST", "/v1/tasks/x/heartbeat", json: big, headers: [("X-Request-Id", "big-1")])
        #expect(refused.status == 413)
        #expect(refused.headers["x-request-id"] == "big-1")
    }

    @Test(arguments: Transport.allCases) func healthz(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let health = try daemon.request("GET", "/healthz")
        #expect(health.status == 200)
        #expect(health.json["status"] as? String == "ok")
    }
}
