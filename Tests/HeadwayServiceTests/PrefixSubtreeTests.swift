import Foundation
import Testing
import HeadwayCore
import HeadwayTestSupport

/// Cancel and delete of a subtree by a token with a task prefix, on a tree that an
/// unprefixed token built across prefixes: the cancel reaches only the prefix's part of
/// the subtree (not below another prefix's task), the delete is refused whole.
@Suite(.serialized) struct PrefixSubtreeTests {
    private struct Setup {
        let daemon: LiveDaemon
        let admin: String
        let teamA: String

        func auth(_ secret: String) -> [(String, String)] { [("Authorization", "Bearer \(secret)")] }

        func register(_ id: String, parent: String? = nil) throws {
            let parentField = parent.map { #","parent_id":"\#($0)""# } ?? ""
            let reply = try daemon.request("POST", "/v1/tasks",
                                           json: #"{"id":"\#(id)","name":"T","total":10,"stall_timeout_seconds":3600\#(parentField)}"#,
                                           headers: auth(admin))
            guard reply.status == 201 else { throw TestHTTPError("register \(id): \(reply.status) \(reply.text)") }
        }

        /// The task as the admin sees it, or nil when it is gone.
        func task(_ id: String) throws -> [String: Any]? {
            let reply = try daemon.request("GET", "/v1/tasks/\(id)", headers: auth(admin))
            return reply.status == 200 ? reply.json : nil
        }

        func cancelRequested(_ id: String) throws -> Bool { try task(id)?["cancel_requested"] as? Bool ?? false }

        /// Every task the admin can list, as text: what a refused request may not change.
        func everything() throws -> String {
            var pages: [String] = []
            var token: String?
            repeat {
                let query = "/v1/tasks?page_size=500" + (token.map { "&page_token=\($0)" } ?? "")
                let reply = try daemon.request("GET", query, headers: auth(admin))
                pages.append(reply.text)
                token = reply.json["next_page_token"] as? String
            } while token != nil
            return pages.joined(separator: "\n")
        }

        func total() throws -> Int {
            try daemon.request("GET", "/v1/tasks?page_size=1", headers: auth(admin)).json["total_size"] as? Int ?? -1
        }
    }

    /// `team-a.root` ─┬─ `team-a.kid`
    ///                └─ `team-b.child` ── `team-a.under-b`
    private func mixedTree() throws -> Setup {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let teamA = try daemon.makeToken([.read, .report, .control], name: "team-a", prefix: "team-a.")
        let setup = Setup(daemon: daemon, admin: admin, teamA: teamA)
        try setup.register("team-a.root")
        try setup.register("team-a.kid", parent: "team-a.root")
        try setup.register("team-b.child", parent: "team-a.root")
        try setup.register("team-a.under-b", parent: "team-b.child")
        return setup
    }

    @Test func prefixedCancelLeavesOtherPrefixesTasksAndWhatLiesBelowThem() throws {
        let setup = try mixedTree()
        let reply = try setup.daemon.request("POST", "/v1/tasks/team-a.root/cancel", headers: setup.auth(setup.teamA))
        #expect(reply.status == 202, "\(reply.text)")
        #expect(try setup.cancelRequested("team-a.root"))
        #expect(try setup.cancelRequested("team-a.kid"))
        #expect(try !setup.cancelRequested("team-b.child"))
        #expect(try !setup.cancelRequested("team-a.under-b"))
    }

    @Test func unprefixedCancelStillReachesTheWholeSubtree() throws {
        let setup = try mixedTree()
        let control = try setup.daemon.makeToken([.control], name: "control")
        #expect(try setup.daemon.request("POST", "/v1/tasks/team-a.root/cancel", headers: setup.auth(control)).status == 202)
        for id in ["team-a.root", "team-a.kid", "team-b.child", "team-a.under-b"] {
            #expect(try setup.cancelRequested(id), "\(id)")
        }
    }

    @Test func prefixedDeleteOfAMixedSubtreeIsRefusedAndChangesNothing() throws {
        let setup = try mixedTree()
        let before = try setup.everything()
        let reply = try setup.daemon.request("DELETE", "/v1/tasks/team-a.root", headers: setup.auth(setup.teamA))
        #expect(reply.status == 403, "\(reply.text)")
        #expect(reply.json["code"] as? String == "prefix_not_allowed")
        #expect((reply.json["detail"] as? String ?? "").contains("another prefix"), "\(reply.text)")
        #expect(try setup.everything() == before)
        // A subtree wholly inside the prefix is deleted as before.
        #expect(try setup.daemon.request("DELETE", "/v1/tasks/team-a.kid", headers: setup.auth(setup.teamA)).status == 204)
        #expect(try setup.task("team-a.kid") == nil)
    }

    @Test func unprefixedDeleteStillRemovesTheWholeSubtree() throws {
        let setup = try mixedTree()
        let control = try setup.daemon.makeToken([.control], name: "control")
        #expect(try setup.daemon.request("DELETE", "/v1/tasks/team-a.root", headers: setup.auth(control)).status == 204)
        #expect(try setup.total() == 0)
    }

    /// More tasks than one step of the walk holds (1,000), the other prefix's task last.
    @Test func aSubtreeOfManyStepsBehavesTheSame() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let teamA = try daemon.makeToken([.read, .report, .control], name: "team-a", prefix: "team-a.")
        let setup = Setup(daemon: daemon, admin: admin, teamA: teamA)
        try setup.register("team-a.root")
        for index in 0..<1_100 { try setup.register("team-a.n\(index)", parent: "team-a.root") }
        try setup.register("team-a.deep", parent: "team-a.n1099")
        try setup.register("team-b.x", parent: "team-a.deep")
        try setup.register("team-a.under-b", parent: "team-b.x")
        #expect(try setup.total() == 1_104)

        let before = try setup.everything()
        let refused = try daemon.request("DELETE", "/v1/tasks/team-a.root", headers: setup.auth(teamA))
        #expect(refused.status == 403, "\(refused.text)")
        #expect(refused.json["code"] as? String == "prefix_not_allowed")
        #expect(try setup.everything() == before)

        #expect(try daemon.request("POST", "/v1/tasks/team-a.root/cancel", headers: setup.auth(teamA)).status == 202)
        for id in ["team-a.root", "team-a.n0", "team-a.n999", "team-a.n1099", "team-a.deep"] {
            #expect(try setup.cancelRequested(id), "\(id)")
        }
        #expect(try !setup.cancelRequested("team-b.x"))
        #expect(try !setup.cancelRequested("team-a.under-b"))

        // Once the other prefix's task is gone, the prefixed delete takes the whole subtree.
        #expect(try daemon.request("DELETE", "/v1/tasks/team-b.x", headers: setup.auth(admin)).status == 204)
        #expect(try daemon.request("DELETE", "/v1/tasks/team-a.root", headers: setup.auth(teamA)).status == 204)
        #expect(try setup.total() == 0)
    }

    // MARK: - A parent of another prefix

    /// `team-b.root` ── `team-a.child`, and `team-a.root` ── `team-a.kid`: built by the
    /// unprefixed admin; the `team-a.` token may not learn that `team-b.root` exists.
    private func childOfAnotherPrefix() throws -> Setup {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let teamA = try daemon.makeToken([.read, .report, .control], name: "team-a", prefix: "team-a.")
        let setup = Setup(daemon: daemon, admin: admin, teamA: teamA)
        try setup.register("team-b.root")
        try setup.register("team-a.child", parent: "team-b.root")
        try setup.register("team-a.root")
        try setup.register("team-a.kid", parent: "team-a.root")
        return setup
    }

    /// The `parent_id` member of a task's JSON: its value, "null" when null, nil when absent.
    private static func parent(_ task: [String: Any]?) -> String? {
        guard let value = task?["parent_id"] else { return nil }
        return value is NSNull ? "null" : value as? String
    }

    /// The task `id` in an event's data (the task itself, or one of a snapshot's).
    private static func task(_ id: String, in event: TestEvent) -> [String: Any]? {
        let json = event.json
        if json["id"] as? String == id { return json }
        return (json["tasks"] as? [[String: Any]])?.first { $0["id"] as? String == id }
    }

    /// Every reply that shows a task shows a parent outside the token's prefix as null —
    /// get, list, register again, progress, heartbeat, batch, finish, cancel — and a
    /// listing of that parent's children is 404, as the parent itself is; a parent inside
    /// the prefix, and every parent to an unprefixed token, is shown as it is.
    @Test func aParentOfAnotherPrefixIsHiddenInEveryReply() throws {
        let setup = try childOfAnotherPrefix()
        let daemon = setup.daemon
        let teamA = setup.auth(setup.teamA)
        #expect(Self.parent(try setup.task("team-a.child")) == "team-b.root", "the admin sees the parent")
        #expect(Self.parent(try daemon.request("GET", "/v1/tasks/team-a.kid", headers: teamA).json) == "team-a.root")

        let get = try daemon.request("GET", "/v1/tasks/team-a.child", headers: teamA)
        #expect(get.status == 200 && Self.parent(get.json) == "null", "\(get.text)")
        #expect(!get.text.contains("team-b"))
        let list = try daemon.request("GET", "/v1/tasks?page_size=500", headers: teamA)
        let listed = (list.json["tasks"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "team-a.child" }
        #expect(Self.parent(listed) == "null", "\(list.text)")
        #expect(!list.text.contains("team-b"))

        for query in ["parent_id=team-b.root", "parent_id=team-b.none", "parent_id=team-b.root&state=running"] {
            let children = try daemon.request("GET", "/v1/tasks?\(query)", headers: teamA)
            #expect(children.status == 404 && children.problemCode == "not_found", "\(query): \(children.text)")
        }
        let own = try daemon.request("GET", "/v1/tasks?parent_id=team-a.root", headers: teamA)
        #expect(own.status == 200 && own.json["total_size"] as? Int == 1, "\(own.text)")
        #expect(try daemon.request("GET", "/v1/tasks?parent_id=team-b.root", headers: setup.auth(setup.admin))
                    .json["total_size"] as? Int == 1)

        // Changes: every reply shows the task as the token sees it.
        let replies = [
            try daemon.request("POST", "/v1/tasks", json: #"{"id":"team-a.child","name":"T","total":10,"stall_timeout_seconds":3600,"parent_id":"team-b.root"}"#,
                               headers: setup.auth(setup.admin)),  // the admin's own: unchanged
            try daemon.request("POST", "/v1/tasks/team-a.child/progress", json: #"{"completed":2}"#, headers: teamA),
            try daemon.request("POST", "/v1/tasks/team-a.child/progress", json: #"{"completed":2}"#, headers: teamA),  // unchanged
            try daemon.request("POST", "/v1/tasks/team-a.child/heartbeat", headers: teamA),
        ]
        #expect(Self.parent(replies[0].json) == "team-b.root", "\(replies[0].text)")
        for reply in replies.dropFirst() {
            #expect(reply.status == 200 && Self.parent(reply.json) == "null", "\(reply.text)")
        }
        let batch = try daemon.request("POST", "/v1/progress",
                                       json: #"{"updates":[{"task_id":"team-a.child","completed":3},{"task_id":"team-a.kid","completed":1}]}"#,
                                       headers: teamA)
        let results = batch.json["results"] as? [[String: Any]] ?? []
        #expect(results.count == 2, "\(batch.text)")
        #expect(Self.parent(results.first?["task"] as? [String: Any]) == "null", "\(batch.text)")
        #expect(Self.parent(results.last?["task"] as? [String: Any]) == "team-a.root", "\(batch.text)")
        #expect(!batch.text.contains("team-b"))
        let cancel = try daemon.request("POST", "/v1/tasks/team-a.child/cancel", headers: teamA)
        #expect(cancel.status == 202 && Self.parent(cancel.json) == "null", "\(cancel.text)")
        let finish = try daemon.request("POST", "/v1/tasks/team-a.child/finish", json: #"{"outcome":"canceled"}"#, headers: teamA)
        #expect(finish.status == 200 && Self.parent(finish.json) == "null", "\(finish.text)")
        let history = try daemon.request("GET", "/v1/tasks/team-a.child/history", headers: teamA)
        #expect(history.status == 200 && !history.text.contains("team-b"), "\(history.text)")
    }

    /// The event stream shows the parent of another prefix as null too: in the snapshot,
    /// in live events, in a replay and in a task held back by `min_duration`; a stream of
    /// that parent's children is 404; an unprefixed stream shows the parent.
    @Test func aParentOfAnotherPrefixIsHiddenInTheEventStream() throws {
        let setup = try childOfAnotherPrefix()
        let daemon = setup.daemon
        let teamA = setup.auth(setup.teamA)
        let refused = try daemon.subscribe("?parent_id=team-b.root", headers: teamA)
        #expect(refused.status == 404, "\(refused.errorBody)")
        #expect(refused.errorBody.contains("not_found"))
        #expect(try daemon.subscribe("?parent_id=team-a.root", headers: teamA).status == 200)

        let stream = try daemon.subscribe(headers: teamA)
        let admin = try daemon.subscribe(headers: setup.auth(setup.admin))
        let snapshot = try #require(try stream.nextEvent())
        #expect(snapshot.event == "snapshot")
        #expect(Self.parent(Self.task("team-a.child", in: snapshot)) == "null", "\(snapshot.data)")
        #expect(Self.parent(Self.task("team-a.kid", in: snapshot)) == "team-a.root")
        #expect(!snapshot.data.contains("team-b"))
        let adminSnapshot = try #require(try admin.nextEvent())
        #expect(Self.parent(Self.task("team-a.child", in: adminSnapshot)) == "team-b.root")
        let snapshotID = try #require(snapshot.id)

        // Live: the hidden frame and the shared ones in one round, both orders.
        #expect(try daemon.request("POST", "/v1/progress",
                                   json: #"{"updates":[{"task_id":"team-a.kid","completed":1},{"task_id":"team-a.child","completed":1},{"task_id":"team-a.kid","completed":2}]}"#,
                                   headers: teamA).status == 200)
        let live = try stream.events { Self.task("team-a.kid", in: $0)?["completed"] as? Int == 2 }
        let child = try #require(live.first { $0.json["id"] as? String == "team-a.child" })
        #expect(Self.parent(child.json) == "null", "\(child.data)")
        #expect(live.allSatisfy { !$0.data.contains("team-b") }, "\(live)")
        let adminLive = try admin.events { Self.task("team-a.kid", in: $0)?["completed"] as? Int == 2 }
        #expect(Self.parent(adminLive.first { $0.json["id"] as? String == "team-a.child" }?.json) == "team-b.root")

        // A replay from the snapshot's position.
        let resumed = try daemon.subscribe("?last_event_id=\(snapshotID)", headers: teamA)
        let replay = try resumed.events { Self.task("team-a.kid", in: $0)?["completed"] as? Int == 2 }
        #expect(replay.contains { $0.json["id"] as? String == "team-a.child" && Self.parent($0.json) == "null" }, "\(replay)")
        #expect(replay.allSatisfy { !$0.data.contains("team-b") }, "\(replay)")

        // Held back by min_duration, then shown.
        let patient = try daemon.subscribe("?min_duration=0.3", headers: teamA)
        _ = try patient.nextEvent()
        try setup.register("team-a.young", parent: "team-b.root")
        let held = try patient.events { $0.json["id"] as? String == "team-a.young" }
        #expect(Self.parent(held.last?.json) == "null", "\(held)")
    }

    /// `/metrics` counts every prefix's tasks and traffic: a token with a task prefix is
    /// refused it (403), one without is served.
    @Test func metricsAreRefusedToAPrefixedToken() throws {
        let setup = try childOfAnotherPrefix()
        let refused = try setup.daemon.request("GET", "/metrics", headers: setup.auth(setup.teamA))
        #expect(refused.status == 403 && refused.problemCode == "prefix_not_allowed", "\(refused.text)")
        #expect(refused.headers["content-type"] == "application/problem+json")
        #expect(!refused.text.contains("headway_tasks"))
        let reader = try setup.daemon.makeToken([.read], name: "prometheus")
        let served = try setup.daemon.request("GET", "/metrics", headers: setup.auth(reader))
        #expect(served.status == 200 && served.text.contains("headway_tasks"))
    }
}
