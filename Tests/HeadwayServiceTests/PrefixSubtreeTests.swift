import Foundation
import Testing
import HeadwayCore
import HeadwayTestSupport
@testable import HeadwayService

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
}
