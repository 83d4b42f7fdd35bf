import Foundation
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import Access
@testable import Daemon
@testable import Telemetry

extension LiveDaemon {
    /// Makes a token offline, as `headwayd token create` does, and has the daemon look at
    /// the table at once; returns the secret.
    func makeToken(_ scopes: Set<Scope>, name: String = "test", prefix: String? = nil,
                   expiresInSeconds: Double? = nil, clock: any WallClock = SystemClock()) throws -> String {
        let secret = try TokenCommand.create(TokenRequest(name: name, scopes: scopes, taskPrefix: prefix),
                                             expiresInSeconds: expiresInSeconds,
                                             databasePath: application.configuration.databasePath, clock: clock)
        application.refreshTokens()
        return secret
    }

    /// The id of the token listed under `name` (as `secret` sees the list).
    func tokenID(named name: String, admin secret: String) throws -> String {
        let list = try request("GET", "/v1/tokens", headers: [("Authorization", "Bearer \(secret)")])
        let tokens = list.json["tokens"] as? [[String: Any]] ?? []
        guard let id = tokens.first(where: { $0["name"] as? String == name })?["id"] as? String else {
            throw TestHTTPError("no token named \(name): \(list.text)")
        }
        return id
    }
}

/// A request and what it should get when its token is let through: every probe that
/// passes the gate ends in a refusal of the handler (a task that does not exist, a body
/// that is not valid), so the matrix changes nothing even where it is allowed.
private struct Probe {
    var method: String
    var path: String
    var body: String?
    var passStatus: Int
}

@Suite(.serialized) struct TokenTests {
    /// What a refused request may not change: every task, every token but its last use.
    private static func state(of daemon: LiveDaemon, admin: String) throws -> String {
        let headers = [("Authorization", "Bearer \(admin)")]
        let tasks = try daemon.request("GET", "/v1/tasks", headers: headers).text
        let listed = try daemon.request("GET", "/v1/tokens", headers: headers).json["tokens"] as? [[String: Any]]
        let tokens = (listed ?? []).map { token in
            token.filter { $0.key != "last_used_at" }.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ",")
        }
        let webhooks = try daemon.request("GET", "/v1/webhooks", headers: headers).text
        return tasks + "\n" + tokens.joined(separator: "\n") + "\n" + webhooks
    }

    /// Without any token the daemon serves everything as before.
    @Test func withoutTokensEverythingIsAllowed() throws {
        let daemon = try LiveDaemon()
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"a","name":"A"}"#).status == 201)
        #expect(try daemon.request("GET", "/v1/tasks").status == 200)
        #expect(try daemon.request("GET", "/v1/tokens").status == 200)
        #expect(try daemon.request("POST", "/v1/tasks/a/cancel").status == 202)
    }

    /// Every route of the application's table × every kind of credential: the status, the
    /// code, the challenge on 401, and on every refusal nothing changed.
    @Test func everyRouteRefusesOrAdmitsEveryCredentialAsItsAccessSays() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let auth = { (secret: String) in [("Authorization", "Bearer \(secret)")] }
        for id in ["team-a.t1", "team-b.t1"] {
            let reply = try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"T","total":10,"stall_timeout_seconds":3600}"#,
                                           headers: auth(admin))
            #expect(reply.status == 201)
        }
        var secrets: [String: String] = [:]
        for (name, scopes, prefix) in [("report", [Scope.report], nil), ("read", [.read], nil), ("control", [.control], nil),
                                       ("prefixed", [.report, .read, .control], "team-a."), ("revoked", [.admin], nil),
                                       ("victim", [.read], nil)] as [(String, Set<Scope>, String?)] {
            let made = try daemon.request("POST", "/v1/tokens", json: #"{"name":"\#(name)","scopes":[\#(scopes.map { "\"\($0.rawValue)\"" }.joined(separator: ","))]\#(prefix.map { #","task_prefix":"\#($0)""# } ?? "")}"#,
                                          headers: auth(admin))
            #expect(made.status == 201, "\(made.text)")
            secrets[name] = made.json["secret"] as? String
        }
        let revokedID = try daemon.tokenID(named: "revoked", admin: admin)
        #expect(try daemon.request("DELETE", "/v1/tokens/\(revokedID)", headers: auth(admin)).status == 204)
        let victimID = try daemon.tokenID(named: "victim", admin: admin)
        let webhook = try daemon.request("POST", "/v1/webhooks", json: #"{"url":"http://93.184.216.34/hook","events":["task.recovered"]}"#,
                                         headers: auth(admin))
        #expect(webhook.status == 201, "\(webhook.text)")
        let webhookID = webhook.json["id"] as? String ?? "whk_missing"
        // Made an hour ago, for a second.
        let expired = try daemon.makeToken([.admin], name: "expired", expiresInSeconds: 1,
                                           clock: ManualClock(SystemClock().now() - 3_600_000))

        let state = { try Self.state(of: daemon, admin: admin) }

        // A request that would change something (or show another prefix's task) if it
        // were let through, and a harmless one that shows it was.
        let task = "team-b.t1"
        let effect: [String: (method: String, path: String, body: String?)] = [
            "GET /healthz": ("GET", "/healthz", nil),
            "GET /readyz": ("GET", "/readyz", nil),
            "GET /metrics": ("GET", "/metrics", nil),
            "POST /v1/tasks": ("POST", "/v1/tasks", #"{"id":"team-b.new","name":"N"}"#),
            "GET /v1/tasks": ("GET", "/v1/tasks", nil),
            "GET /v1/tasks/{id}": ("GET", "/v1/tasks/\(task)", nil),
            "DELETE /v1/tasks/{id}": ("DELETE", "/v1/tasks/\(task)", nil),
            "GET /v1/tasks/{id}/history": ("GET", "/v1/tasks/\(task)/history", nil),
            "GET /v1/tasks/summary": ("GET", "/v1/tasks/summary", nil),
            "GET /v1/tasks/{id}/output": ("GET", "/v1/tasks/\(task)/output", nil),
            "POST /v1/tasks/{id}/terminate": ("POST", "/v1/tasks/\(task)/terminate", nil),
            "POST /v1/tasks/{id}/progress": ("POST", "/v1/tasks/\(task)/progress", #"{"completed":5}"#),
            "POST /v1/tasks/{id}/heartbeat": ("POST", "/v1/tasks/\(task)/heartbeat", nil),
            "POST /v1/tasks/{id}/finish": ("POST", "/v1/tasks/\(task)/finish", #"{"outcome":"succeeded"}"#),
            "POST /v1/tasks/{id}/cancel": ("POST", "/v1/tasks/\(task)/cancel", nil),
            "POST /v1/progress": ("POST", "/v1/progress", #"{"updates":[{"task_id":"\(task)","completed":5}]}"#),
            "GET /v1/events": ("GET", "/v1/events", nil),
            "POST /v1/tokens": ("POST", "/v1/tokens", #"{"name":"new","scopes":["admin"]}"#),
            "GET /v1/tokens": ("GET", "/v1/tokens", nil),
            "DELETE /v1/tokens/{id}": ("DELETE", "/v1/tokens/\(victimID)", nil),
            "POST /v1/webhooks": ("POST", "/v1/webhooks", #"{"url":"http://93.184.216.34/new","events":["task.stalled"]}"#),
            "GET /v1/webhooks": ("GET", "/v1/webhooks", nil),
            "DELETE /v1/webhooks/{id}": ("DELETE", "/v1/webhooks/\(webhookID)", nil),
            "GET /v1/webhooks/{id}/deliveries": ("GET", "/v1/webhooks/\(webhookID)/deliveries", nil),
            "POST /v1/webhooks/{id}/test": ("POST", "/v1/webhooks/\(webhookID)/test", nil),
            "GET /": ("GET", "/", nil),
            "GET /assets/{name}": ("GET", "/assets/app.js", nil),
            "GET /v1/token": ("GET", "/v1/token", nil),
        ]
        let pass: [String: Probe] = [
            "GET /healthz": Probe(method: "GET", path: "/healthz", passStatus: 200),
            "GET /readyz": Probe(method: "GET", path: "/readyz", passStatus: 200),
            "GET /metrics": Probe(method: "GET", path: "/metrics", passStatus: 200),
            "POST /v1/tasks": Probe(method: "POST", path: "/v1/tasks", body: "{}", passStatus: 400),
            "GET /v1/tasks": Probe(method: "GET", path: "/v1/tasks?page_size=0", passStatus: 400),
            "GET /v1/tasks/{id}": Probe(method: "GET", path: "/v1/tasks/team-a.none", passStatus: 404),
            "DELETE /v1/tasks/{id}": Probe(method: "DELETE", path: "/v1/tasks/team-a.none", passStatus: 404),
            "GET /v1/tasks/{id}/history": Probe(method: "GET", path: "/v1/tasks/team-a.none/history", passStatus: 404),
            "GET /v1/tasks/summary": Probe(method: "GET", path: "/v1/tasks/summary", passStatus: 200),
            "GET /v1/tasks/{id}/output": Probe(method: "GET", path: "/v1/tasks/team-a.none/output", passStatus: 404),
            "POST /v1/tasks/{id}/terminate": Probe(method: "POST", path: "/v1/tasks/team-a.none/terminate", passStatus: 404),
            "POST /v1/tasks/{id}/progress": Probe(method: "POST", path: "/v1/tasks/team-a.none/progress", body: #"{"completed":1}"#, passStatus: 404),
            "POST /v1/tasks/{id}/heartbeat": Probe(method: "POST", path: "/v1/tasks/team-a.none/heartbeat", passStatus: 404),
            "POST /v1/tasks/{id}/finish": Probe(method: "POST", path: "/v1/tasks/team-a.none/finish", body: #"{"outcome":"succeeded"}"#, passStatus: 404),
            "POST /v1/tasks/{id}/cancel": Probe(method: "POST", path: "/v1/tasks/team-a.none/cancel", passStatus: 404),
            "POST /v1/progress": Probe(method: "POST", path: "/v1/progress", body: "{}", passStatus: 400),
            "GET /v1/events": Probe(method: "GET", path: "/v1/events?min_duration=soon", passStatus: 400),
            "POST /v1/tokens": Probe(method: "POST", path: "/v1/tokens", body: "{}", passStatus: 400),
            "GET /v1/tokens": Probe(method: "GET", path: "/v1/tokens", passStatus: 200),
            "DELETE /v1/tokens/{id}": Probe(method: "DELETE", path: "/v1/tokens/tok_none", passStatus: 404),
            "POST /v1/webhooks": Probe(method: "POST", path: "/v1/webhooks", body: "{}", passStatus: 400),
            "GET /v1/webhooks": Probe(method: "GET", path: "/v1/webhooks", passStatus: 200),
            "DELETE /v1/webhooks/{id}": Probe(method: "DELETE", path: "/v1/webhooks/whk_none", passStatus: 404),
            "GET /v1/webhooks/{id}/deliveries": Probe(method: "GET", path: "/v1/webhooks/whk_none/deliveries", passStatus: 404),
            "POST /v1/webhooks/{id}/test": Probe(method: "POST", path: "/v1/webhooks/whk_none/test", passStatus: 404),
            "GET /": Probe(method: "GET", path: "/", passStatus: 200),
            "GET /assets/{name}": Probe(method: "GET", path: "/assets/none.js", passStatus: 404),
            "GET /v1/token": Probe(method: "GET", path: "/v1/token", passStatus: 200),
        ]

        enum Expected { case pass, refused(Int, String) }
        let credentials: [(name: String, headers: [(String, String)], grant: Grant?)] = [
            ("none", [], nil),
            ("malformed", [("Authorization", "Bearer not-a-token")], nil),
            ("not bearer", [("Authorization", "Basic YWRtaW46YWRtaW4=")], nil),
            ("unknown", auth(TokenSecret.make(randomBytes: Array(repeating: 7, count: 32))), nil),
            ("expired", auth(expired), nil),
            ("revoked", auth(secrets["revoked"]!), nil),
            ("report", auth(secrets["report"]!), Grant(tokenID: nil, tokenName: nil, scopes: [.report])),
            ("read", auth(secrets["read"]!), Grant(tokenID: nil, tokenName: nil, scopes: [.read])),
            ("control", auth(secrets["control"]!), Grant(tokenID: nil, tokenName: nil, scopes: [.control])),
            ("admin", auth(admin), Grant(tokenID: nil, tokenName: nil, scopes: [.admin])),
            ("prefixed", auth(secrets["prefixed"]!),
             Grant(tokenID: nil, tokenName: nil, scopes: [.report, .read, .control], taskPrefix: "team-a.")),
        ]
        let routes = daemon.application.routes
        #expect(routes.count == effect.count, "a route without a probe: \(routes.map { "\($0.method) \($0.pattern)" })")
        var before = try state()
        var (passed, refused) = (0, 0)
        for route in routes {
            let key = "\(route.method) \(route.pattern)"
            guard let refusedProbe = effect[key], let passProbe = pass[key] else {
                Issue.record("no probe for \(key): add one")
                continue
            }
            for credential in credentials {
                let expected: Expected
                switch (route.access, credential.grant) {
                case (.public, _): expected = .pass
                case (.scope(let scope), nil):
                    let code = ["none": "token_missing", "expired": "token_expired", "revoked": "token_revoked"][credential.name]
                        ?? "token_invalid"
                    expected = .refused(401, code)
                    _ = scope
                case (.scope(let scope), let grant?) where key == "GET /metrics" && grant.taskPrefix != nil && grant.holds(scope):
                    expected = .refused(403, "prefix_not_allowed")   // every prefix's counts
                case (.scope(let scope), let grant?):
                    expected = grant.holds(scope) ? .pass : .refused(403, "insufficient_scope")
                case (.anyToken, nil) where credential.name == "none":
                    expected = .pass   // served as anonymous: no scope, tokens required
                case (.anyToken, nil):
                    expected = .refused(401, ["expired": "token_expired", "revoked": "token_revoked"][credential.name]
                                        ?? "token_invalid")
                case (.anyToken, _?): expected = .pass
                }
                let context = "\(key) with \(credential.name)"
                switch expected {
                case .pass:
                    passed += 1
                    let reply = try daemon.request(passProbe.method, passProbe.path, json: passProbe.body, headers: credential.headers)
                    #expect(reply.status == passProbe.passStatus, "\(context): \(reply.status) \(reply.text)")
                case .refused(let status, let code):
                    refused += 1
                    let reply = try daemon.request(refusedProbe.method, refusedProbe.path, json: refusedProbe.body,
                                                   headers: credential.headers)
                    #expect(reply.status == status, "\(context): \(reply.status) \(reply.text)")
                    #expect(reply.problemCode == code, "\(context): \(reply.text)")
                    #expect(reply.headers["content-type"] == "application/problem+json", "\(context)")
                    let challenge = reply.headers["www-authenticate"] ?? ""
                    if status == 401 {
                        #expect(challenge.hasPrefix("Bearer realm=\"headway\""), "\(context): \(challenge)")
                        #expect(credential.name == "none" ? !challenge.contains("error=") : challenge.contains("error=\"invalid_token\""),
                                "\(context): \(challenge)")
                    } else if code == "insufficient_scope" {
                        #expect(challenge.contains("error=\"insufficient_scope\""), "\(context): \(challenge)")
                    }
                    let after = try state()
                    #expect(after == before, "\(context) changed something")
                    before = after
                }
            }
        }

        #expect(passed + refused == routes.count * credentials.count)
        #expect(refused > 100)

        // The prefixed token: another prefix's task is 404 everywhere, absent from lists
        // and may not be registered, directly or as a parent; nothing changes.
        let prefixed = auth(secrets["prefixed"]!)
        for key in ["GET /v1/tasks/{id}", "DELETE /v1/tasks/{id}", "GET /v1/tasks/{id}/history", "POST /v1/tasks/{id}/progress",
                    "POST /v1/tasks/{id}/heartbeat", "POST /v1/tasks/{id}/finish", "POST /v1/tasks/{id}/cancel"] {
            let probe = effect[key]!
            let reply = try daemon.request(probe.method, probe.path, json: probe.body, headers: prefixed)
            #expect(reply.status == 404 && reply.problemCode == "not_found", "\(key): \(reply.text)")
            #expect(try state() == before, "\(key) with the wrong prefix changed something")
        }
        for (body, field) in [(#"{"id":"team-b.new","name":"N"}"#, "id"), (#"{"name":"no id"}"#, "id"),
                              (#"{"id":"team-a.child","name":"C","parent_id":"team-b.t1"}"#, "parent_id")] {
            let reply = try daemon.request("POST", "/v1/tasks", json: body, headers: prefixed)
            #expect(reply.status == 403 && reply.problemCode == "prefix_not_allowed", "\(body): \(reply.text)")
            #expect((reply.json["errors"] as? [[String: Any]])?.first?["field"] as? String == field)
            #expect(try state() == before)
        }
        let listed = try daemon.request("GET", "/v1/tasks", headers: prefixed)
        #expect((listed.json["tasks"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["team-a.t1"])
        #expect(listed.json["total_size"] as? Int == 1)
        // The right prefix: registered, changed, seen.
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"team-a.child","name":"C","parent_id":"team-a.t1"}"#,
                                   headers: prefixed).status == 201)
        #expect(try daemon.request("POST", "/v1/tasks/team-a.t1/progress", json: #"{"completed":2}"#, headers: prefixed).status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/team-a.t1", headers: prefixed).json["completed"] as? Int == 2)
        // access_token= is for the event stream only.
        let query = try daemon.request("GET", "/v1/tasks?access_token=\(admin)")
        #expect(query.status == 400 && query.problemCode == "access_token_not_allowed")
    }

    /// A token made, listed without its secret (with its last use), revoked: gone from
    /// the list, refused at once; a revoked id cannot be revoked again.
    @Test func tokensAreMadeListedAndRevoked() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "root")
        let auth = [("Authorization", "Bearer \(admin)")]
        let made = try daemon.request("POST", "/v1/tokens", json: #"{"name":"ci","scopes":["read","report"],"task_prefix":"ci.","expires_at":"2099-01-01T00:00:00Z"}"#,
                                      headers: auth)
        #expect(made.status == 201)
        let secret = try #require(made.json["secret"] as? String)
        #expect(TokenSecret.isWellFormed(secret))
        #expect(made.json["scopes"] as? [String] == ["report", "read"])
        #expect(made.json["task_prefix"] as? String == "ci.")
        #expect(made.json["expires_at"] as? String == "2099-01-01T00:00:00.000Z")
        #expect(made.headers["cache-control"] == "no-store")
        let id = try #require(made.json["id"] as? String)
        #expect(try daemon.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer \(secret)")]).status == 200)
        let list = try daemon.request("GET", "/v1/tokens", headers: auth)
        #expect(!list.text.contains(secret))
        #expect(!list.text.contains("secret"))
        let tokens = try #require(list.json["tokens"] as? [[String: Any]])
        #expect(tokens.map { $0["name"] as? String } == ["root", "ci"])
        #expect(tokens[1]["last_used_at"] is String)
        #expect(try daemon.request("DELETE", "/v1/tokens/\(id)", headers: auth).status == 204)
        let refused = try daemon.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer \(secret)")])
        #expect(refused.status == 401 && refused.problemCode == "token_revoked")
        #expect(try daemon.request("GET", "/v1/tokens", headers: auth).json["tokens"].map { ($0 as? [Any])?.count } == 1)
        let again = try daemon.request("DELETE", "/v1/tokens/\(id)", headers: auth)
        #expect(again.status == 404 && again.problemCode == "token_not_found")
        // Revoking every token keeps tokens required.
        let rootID = try daemon.tokenID(named: "root", admin: admin)
        #expect(try daemon.request("DELETE", "/v1/tokens/\(rootID)", headers: auth).status == 204)
        #expect(try daemon.request("GET", "/v1/tasks").problemCode == "token_missing")
    }

    /// `--max-tokens` bounds the tokens neither revoked nor expired: one past it is 422
    /// `too_many_tokens` and makes nothing; tokens expired (made offline, long ago) take no
    /// place, and a revocation frees one.
    @Test func tokenCreationIsBoundedByMaxTokens() throws {
        let daemon = try LiveDaemon(arguments: ["--max-tokens", "3"])
        let admin = try daemon.makeToken([.admin], name: "admin")
        let auth = [("Authorization", "Bearer \(admin)")]
        for name in ["old-1", "old-2"] {
            _ = try daemon.makeToken([.read], name: name, expiresInSeconds: 60, clock: ManualClock(SystemClock().now() - 3_600_000))
        }
        let create = { (name: String) in
            try daemon.request("POST", "/v1/tokens", json: #"{"name":"\#(name)","scopes":["read"]}"#, headers: auth)
        }
        #expect(try create("one").status == 201)
        #expect(try create("two").status == 201)
        let database = try Database(path: daemon.application.configuration.databasePath)
        defer { database.close() }
        let rows = { try database.scalar("SELECT count(*) FROM tokens") }
        let before = try Self.state(of: daemon, admin: admin)
        let rowsBefore = try rows()
        let refused = try create("three")
        #expect(refused.status == 422 && refused.problemCode == "too_many_tokens", "\(refused.text)")
        #expect(refused.headers["content-type"] == "application/problem+json")
        #expect((refused.json["detail"] as? String)?.contains("--max-tokens") == true, "\(refused.text)")
        #expect((refused.json["detail"] as? String)?.contains("3") == true)
        #expect(try Self.state(of: daemon, admin: admin) == before)
        #expect(try rows() == rowsBefore, "nothing made")
        // A prefixed admin is bound by the same count.
        let teamAdmin = try daemon.request("POST", "/v1/tokens", json: #"{"name":"team","scopes":["admin"],"task_prefix":"team-a."}"#,
                                           headers: auth)
        #expect(teamAdmin.status == 422 && teamAdmin.problemCode == "too_many_tokens")

        let oneID = try daemon.tokenID(named: "one", admin: admin)
        #expect(try daemon.request("DELETE", "/v1/tokens/\(oneID)", headers: auth).status == 204)
        #expect(try create("three").status == 201)
        #expect(try create("four").status == 422)
        #expect(try TokenRepository.usableCount(at: SystemClock().now(), in: database) == 3)
    }

    /// The count of usable tokens kept in `token_state` follows every change, those made
    /// by hand included (an update, a delete, the state row deleted), so the bound holds
    /// without reading the table; `changes(since:)` gives only the rows changed since,
    /// or every row after a delete.
    @Test func theCountOfUsableTokensFollowsEveryChange() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let postgres = TestPostgresDatabase.isSelected ? try TestPostgresDatabase() : nil
        defer { postgres?.drop() }
        let path = postgres?.uri ?? directory.file("headway.db")
        _ = try DatabaseSetup.open(path: path)
        let database = try Database(path: path)
        defer { database.close() }
        var now: EpochMilliseconds = 1_800_000_000_000
        func make(_ name: String, expiresIn: Int64? = nil) throws -> TokenRecord {
            let (token, _) = try TokenCrypto.newToken(TokenRequest(name: name, scopes: [.read],
                                                                   expiresAt: expiresIn.map { now + $0 }), now: now)
            return token
        }
        func insert(_ token: TokenRecord, limit: Int = 5) throws -> Int64? {
            try database.inTransaction(.immediate) { try TokenRepository.insert(token, limit: limit, now: now, in: database) }
        }
        let live = { try database.scalar("SELECT live FROM token_state WHERE id = 1") }
        let a = try make("a"), b = try make("b", expiresIn: 60_000), c = try make("c")
        let generationA = try #require(try insert(a))
        #expect(try insert(b) == generationA + 1)
        #expect(try insert(c) != nil)
        #expect(try live() == 3)
        var changes = try TokenRepository.changes(since: generationA, in: database)
        #expect(!changes.isComplete && changes.tokens.map(\.name) == ["b", "c"])
        #expect(try TokenRepository.changes(since: changes.generation, in: database).tokens.isEmpty)

        try database.run("UPDATE tokens SET revoked_at = ? WHERE id = ?", [.integer(now), .text(c.id)])
        #expect(try live() == 2)
        changes = try TokenRepository.changes(since: changes.generation, in: database)
        #expect(changes.tokens.map(\.name) == ["c"] && changes.tokens.first?.revokedAt == now)
        // b expires: taken off the count by the next insert's check, for good.
        now += 60_000
        #expect(try insert(make("d"), limit: 2) != nil, "b no longer counts")
        #expect(try live() == 2)
        #expect(try insert(make("e"), limit: 2) == nil)
        #expect(try live() == 2)
        // A revocation of the expired b changes nothing more.
        try database.run("UPDATE tokens SET revoked_at = ? WHERE id = ?", [.integer(now), .text(b.id)])
        #expect(try live() == 2)
        // A delete by hand: counted, and the next read is complete.
        let beforeDelete = try TokenRepository.generation(in: database)
        try database.run("DELETE FROM tokens WHERE id = ?", [.text(a.id)])
        #expect(try live() == 1)
        changes = try TokenRepository.changes(since: beforeDelete, in: database)
        #expect(changes.isComplete && Set(changes.tokens.map(\.name)) == ["b", "c", "d"])
        // The state row deleted by hand: made again with the count unknown, counted once.
        try database.run("DELETE FROM token_state", [])
        #expect(try insert(make("f"), limit: 3) != nil)
        #expect(try live() == nil)
        #expect(try insert(make("g"), limit: 3) != nil)
        #expect(try live() == 3)
        #expect(try insert(make("h"), limit: 3) == nil)
        #expect(try TokenRepository.usableCount(at: now, in: database) == 3)
        #expect(try TokenRepository.changes(since: 50, in: database).isComplete, "the generation went back")
    }

    /// Two daemons sharing one PostgreSQL database: creates racing on both make no more
    /// than `--max-tokens` in all (the count and the insert are one step under the
    /// writers' lock), and each daemon learns of the other's tokens and revocations.
    @Test(.enabled(if: TestPostgresDatabase.isSelected, "several daemons share only a PostgreSQL database"))
    func theBoundHoldsAcrossDaemonsSharingPostgreSQL() throws {
        let first = try LiveDaemon(arguments: ["--max-tokens", "4"])
        let uri = try #require(first.postgresDatabase?.uri)
        let second = try LiveDaemon(arguments: ["--db", uri, "--max-tokens", "4"])
        let admin = try first.makeToken([.admin], name: "admin")
        second.application.refreshTokens()
        let statuses = Locked<[Int]>([])
        let ports = [first.application.port, second.application.port]
        let threads = (0..<10).map { index in
            Thread {
                let status = (try? TestHTTPClient(port: ports[index % 2])
                    .request("POST", "/v1/tokens", json: #"{"name":"race-\#(index)","scopes":["read"]}"#,
                             headers: [("Authorization", "Bearer \(admin)"), ("Content-Type", "application/json")]).status) ?? 0
                statuses.withLock { $0.append(status) }
            }
        }
        threads.forEach { $0.start() }
        for _ in 0..<3_000 where statuses.withLock({ $0.count }) < threads.count { usleep(10_000) }
        let seen = statuses.withLock { $0 }
        #expect(seen.filter { $0 == 201 }.count == 3, "\(seen)")
        #expect(seen.filter { $0 == 422 }.count == 7, "\(seen)")
        let database = try Database(path: uri)
        defer { database.close() }
        #expect(try TokenRepository.usableCount(at: SystemClock().now(), in: database) == 4)

        let made = try first.request("POST", "/v1/tokens", json: #"{"name":"late","scopes":["read"]}"#,
                                     headers: [("Authorization", "Bearer \(admin)")])
        #expect(made.status == 422)
        first.application.refreshTokens()  // the tokens made on the other daemon
        let listed = try first.request("GET", "/v1/tokens", headers: [("Authorization", "Bearer \(admin)")])
        #expect((listed.json["tokens"] as? [[String: Any]])?.count == 4, "\(listed.text)")
        let raceID = try #require((listed.json["tokens"] as? [[String: Any]])?
            .first { ($0["name"] as? String)?.hasPrefix("race-") == true }?["id"] as? String)
        #expect(try first.request("DELETE", "/v1/tokens/\(raceID)", headers: [("Authorization", "Bearer \(admin)")]).status == 204)
        let late = try second.request("POST", "/v1/tokens", json: #"{"name":"late","scopes":["read"]}"#,
                                      headers: [("Authorization", "Bearer \(admin)")])
        #expect(late.status == 201, "\(late.text)")
        let secret = try #require(late.json["secret"] as? String)
        first.application.refreshTokens()
        #expect(try first.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer \(secret)")]).status == 200)
        let lateID = try #require(late.json["id"] as? String)
        #expect(try first.request("DELETE", "/v1/tokens/\(lateID)", headers: [("Authorization", "Bearer \(admin)")]).status == 204)
        second.application.refreshTokens()
        #expect(try second.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer \(secret)")]).problemCode == "token_revoked")
    }

    /// A token revoked by another process (or daemon) is refused once the daemon has
    /// looked at the table: it reads only the rows changed since.
    @Test func aRevocationByAnotherProcessIsApplied() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let reader = try daemon.makeToken([.read], name: "reader")
        let auth = [("Authorization", "Bearer \(reader)")]
        #expect(try daemon.request("GET", "/v1/tasks", headers: auth).status == 200)
        let readerID = try daemon.tokenID(named: "reader", admin: admin)
        let database = try Database(path: daemon.application.configuration.databasePath)
        try database.run("UPDATE tokens SET revoked_at = ? WHERE id = ?", [.integer(SystemClock().now()), .text(readerID)])
        database.close()
        daemon.application.refreshTokens()
        let refused = try daemon.request("GET", "/v1/tasks", headers: auth)
        #expect(refused.status == 401 && refused.problemCode == "token_revoked", "\(refused.text)")
        #expect(daemon.application.tokens.heldCount == 1)
    }

    /// Last uses are kept in memory and written back (at the latest at stop).
    /// A prefixed admin manages only tokens inside its prefix: it makes only tokens whose
    /// prefix starts with its own, lists only those, and any other token is not found to it.
    @Test func aPrefixedAdminManagesOnlyTokensInsideItsPrefix() throws {
        let daemon = try LiveDaemon()
        let root = try daemon.makeToken([.admin], name: "root")
        let teamA = try daemon.makeToken([.admin], name: "team-a-admin", prefix: "team-a.")
        let auth = { (secret: String) in [("Authorization", "Bearer \(secret)")] }
        let before = try Self.state(of: daemon, admin: root)
        for body in [#"{"name":"escape","scopes":["admin"]}"#, #"{"name":"escape","scopes":["read"],"task_prefix":"team-b."}"#,
                     #"{"name":"escape","scopes":["read"],"task_prefix":"team-"}"#,
                     #"{"name":"escape","scopes":["admin"],"task_prefix":null}"#] {
            let refused = try daemon.request("POST", "/v1/tokens", json: body, headers: auth(teamA))
            #expect(refused.status == 403, "\(body): \(refused.text)")
            #expect(refused.problemCode == "prefix_not_allowed", "\(body)")
        }
        #expect(try Self.state(of: daemon, admin: root) == before)
        let inside = try daemon.request("POST", "/v1/tokens", json: #"{"name":"ci","scopes":["report"],"task_prefix":"team-a.ci."}"#,
                                        headers: auth(teamA))
        #expect(inside.status == 201, "\(inside.text)")
        #expect(inside.json["task_prefix"] as? String == "team-a.ci.")
        let listed = try daemon.request("GET", "/v1/tokens", headers: auth(teamA)).json["tokens"] as? [[String: Any]] ?? []
        #expect(Set(listed.compactMap { $0["name"] as? String }) == ["team-a-admin", "ci"])
        let everything = try daemon.request("GET", "/v1/tokens", headers: auth(root)).json["tokens"] as? [[String: Any]] ?? []
        #expect(everything.count == 3)
        let rootID = try daemon.tokenID(named: "root", admin: root)
        let notFound = try daemon.request("DELETE", "/v1/tokens/\(rootID)", headers: auth(teamA))
        #expect(notFound.status == 404 && notFound.problemCode == "token_not_found", "\(notFound.text)")
        #expect(try daemon.request("GET", "/v1/tokens", headers: auth(root)).status == 200, "the root admin still works")
        let ciID = try daemon.tokenID(named: "ci", admin: teamA)
        #expect(try daemon.request("DELETE", "/v1/tokens/\(ciID)", headers: auth(teamA)).status == 204)
    }

    /// A token never makes one that outlives it; every expiry lies 1 minute to 100 years ahead.
    @Test func aTokensExpiryIsBoundedAndNeverOutlivesItsMaker() throws {
        let daemon = try LiveDaemon()
        let root = try daemon.makeToken([.admin], name: "root")
        let shortLived = try daemon.makeToken([.admin], name: "short", expiresInSeconds: 3600)
        let auth = { (secret: String) in [("Authorization", "Bearer \(secret)")] }
        let now = SystemClock().now()
        let at = { (milliseconds: Int64) in Timestamp.rfc3339(milliseconds) }
        for expiry in [nil, at(now + 7_200_000), "2099-01-01T00:00:00Z"] as [String?] {
            let body = #"{"name":"longer","scopes":["read"]\#(expiry.map { #","expires_at":"\#($0)""# } ?? "")}"#
            let refused = try daemon.request("POST", "/v1/tokens", json: body, headers: auth(shortLived))
            #expect(refused.status == 400, "\(body): \(refused.text)")
            #expect(refused.text.contains("expires_at"), "\(refused.text)")
        }
        let within = try daemon.request("POST", "/v1/tokens", json: #"{"name":"shorter","scopes":["read"],"expires_at":"\#(at(now + 1_800_000))"}"#,
                                        headers: auth(shortLived))
        #expect(within.status == 201, "\(within.text)")
        for expiry in [at(now + 10_000), at(now + 101 * 365 * 86_400_000), "9999-12-31T23:59:59Z"] {
            let refused = try daemon.request("POST", "/v1/tokens", json: #"{"name":"x","scopes":["read"],"expires_at":"\#(expiry)"}"#,
                                             headers: auth(root))
            #expect(refused.status == 400 && refused.text.contains("expires_at"), "\(expiry): \(refused.text)")
        }
        let listed = try daemon.request("GET", "/v1/tokens", headers: auth(root)).json["tokens"] as? [[String: Any]] ?? []
        #expect(listed.count == 3)
    }

    /// Deleting every row of the tokens table (on the live database) never reopens the
    /// daemon: that tokens are required is a flag of its own, set by the first token.
    @Test func deletingTheTokenRowsNeverReopensTheDaemon() throws {
        let daemon = try LiveDaemon()
        _ = try daemon.makeToken([.admin], name: "admin")
        #expect(try daemon.request("GET", "/v1/tasks").problemCode == "token_missing")
        let database = try Database(path: daemon.application.configuration.databasePath)
        let generation = try TokenRepository.generation(in: database)
        try database.run("DELETE FROM tokens", [])
        #expect(try TokenRepository.generation(in: database) > generation, "a delete moves the generation")
        database.close()
        daemon.application.refreshTokens()
        #expect(try daemon.request("GET", "/v1/tasks").problemCode == "token_missing")
        // Nor does deleting the state row: a missing row reads as required, and the next
        // token made writes the row again.
        let again = try Database(path: daemon.application.configuration.databasePath)
        try again.run("DELETE FROM token_state", [])
        #expect(try TokenRepository.required(in: again))
        _ = try TokenCommand.create(TokenRequest(name: "later", scopes: [.read]), expiresInSeconds: nil,
                                    databasePath: daemon.application.configuration.databasePath)
        try again.run("DELETE FROM tokens", [])
        #expect(try again.scalar("SELECT required FROM token_state WHERE id = 1") == 1)
        again.close()
        daemon.application.refreshTokens()
        #expect(try daemon.request("GET", "/v1/tasks").problemCode == "token_missing")
    }

    @Test func lastUseIsWrittenBack() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("headway.db")
        let secret = try TokenCommand.create(TokenRequest(name: "runner", scopes: [.read]), expiresInSeconds: nil,
                                             databasePath: path)
        do {
            let daemon = try LiveDaemon(arguments: ["--db", path])
            #expect(try daemon.request("GET", "/v1/tasks", headers: [("Authorization", "Bearer \(secret)")]).status == 200)
        }
        let database = try HeadwayStore.Database(path: path)
        defer { database.close() }
        let token = try #require(try HeadwayStore.TokenRepository.all(in: database).first)
        #expect(token.lastUsedAt != nil)
        #expect(token.secretHash == TokenCrypto.sha256(secret))
    }

    /// A prefixed token's stream shows only its prefix's tasks, in the snapshot and live;
    /// `access_token=` works on the stream.
    @Test func aPrefixedStreamNeverSeesAnotherPrefix() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin])
        let reader = try daemon.makeToken([.read], prefix: "team-a.")
        let auth = [("Authorization", "Bearer \(admin)")]
        for id in ["team-a.1", "team-b.1"] {
            #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"T"}"#, headers: auth).status == 201)
        }
        let stream = try daemon.subscribe("?access_token=\(reader)")
        #expect(stream.status == 200)
        let snapshot = try #require(try stream.nextEvent())
        #expect(snapshot.event == "snapshot")
        #expect(snapshot.data.contains("team-a.1") && !snapshot.data.contains("team-b"))
        for id in ["team-b.1", "team-a.1"] {
            #expect(try daemon.request("POST", "/v1/tasks/\(id)/progress", json: #"{"completed":1}"#, headers: auth).status == 200)
        }
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"team-b.2","name":"T"}"#, headers: auth).status == 201)
        #expect(try daemon.request("DELETE", "/v1/tasks/team-b.1", headers: auth).status == 204)
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"team-a.2","name":"T"}"#, headers: auth).status == 201)
        let live = try stream.events { $0.data.contains("team-a.2") }
        #expect(live.allSatisfy { !$0.data.contains("team-b") }, "\(live)")
        #expect(live.contains { $0.data.contains("team-a.1") })
        // A replay from before the changes: the same.
        let resumed = try daemon.subscribe("?last_event_id=1", headers: [("Authorization", "Bearer \(reader)")])
        let replay = try resumed.events { $0.data.contains("team-a.2") }
        #expect(replay.allSatisfy { !$0.data.contains("team-b") }, "\(replay)")
    }

    /// Revoking a token closes its open streams within about a second; others stay open.
    @Test func revokingATokenClosesItsStreams() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let doomed = try daemon.makeToken([.read], name: "doomed")
        let stream = try daemon.subscribe(headers: [("Authorization", "Bearer \(doomed)")])
        let other = try daemon.subscribe(headers: [("Authorization", "Bearer \(admin)")])
        #expect(try stream.nextEvent()?.event == "snapshot")
        #expect(try other.nextEvent()?.event == "snapshot")
        let id = try daemon.tokenID(named: "doomed", admin: admin)
        let revokedAt = Date()
        #expect(try daemon.request("DELETE", "/v1/tokens/\(id)", headers: [("Authorization", "Bearer \(admin)")]).status == 204)
        _ = try stream.remainingEvents()
        #expect(Date().timeIntervalSince(revokedAt) < 5)
        var subscribers = daemon.application.subscriberCount
        for _ in 0..<500 where subscribers != 1 {
            usleep(10_000)
            subscribers = daemon.application.subscriberCount
        }
        #expect(subscribers == 1)
        let again = try daemon.subscribe(headers: [("Authorization", "Bearer \(doomed)")])
        #expect(again.status == 401)
    }

    /// An expired token's open stream is closed by the periodic check.
    @Test func anExpiringTokensStreamIsClosed() throws {
        let daemon = try LiveDaemon()
        _ = try daemon.makeToken([.admin])
        let brief = try daemon.makeToken([.read], expiresInSeconds: 1.5)
        let stream = try daemon.subscribe(headers: [("Authorization", "Bearer \(brief)")])
        #expect(stream.status == 200)
        _ = try stream.remainingEvents()  // the stream ends (the client times out after 5 s otherwise)
        #expect(daemon.application.tokens.newlyDead(now: SystemClock().now()).isEmpty)
        let refused = try daemon.subscribe(headers: [("Authorization", "Bearer \(brief)")])
        #expect(refused.status == 401)
    }

    /// `access_token` never reaches a log line: not the access log, not the library's
    /// messages, not the gate's refusals.
    @Test func accessTokensAreRedactedInLogs() throws {
        let lines = Locked<[String]>([])
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let command = try Configuration.parse(arguments: ["--listen", "127.0.0.1:0", "--db", directory.file("h.db"),
                                                          "--log-level", "debug"], environment: [:])
        guard case .run(let configuration) = command else { return }
        let logger = Logger(minimumLevel: .debug, sink: { line in lines.withLock { $0.append(line) } })
        let secret: String
        do {
            let application = try buildApplication(configuration, logger: logger)
            try application.start()
            defer { application.shutdown() }
            secret = try TokenCommand.create(TokenRequest(name: "reader", scopes: [.read]), expiresInSeconds: nil,
                                             databasePath: configuration.databasePath)
            application.refreshTokens()
            let stream = try TestSSEClient(port: application.port, path: "/v1/events?access_token=\(secret)")
            #expect(stream.status == 200)
            stream.disconnect()
            let client = try TestHTTPClient(port: application.port)
            #expect(try client.request("GET", "/v1/tasks?access_token=\(secret)").status == 400)
            // A request the library itself complains about, with the secret in its target.
            let raw = try TestHTTPClient(port: application.port)
            try raw.send("GET /v1/events?access_token=\(secret)&x=\(String(repeating: "y", count: 9000)) HTTP/1.1\r\nHost: a\r\n\r\n")
            _ = try? raw.readResponse()
            // Admin actions are logged with the acting token's id and name, never a secret.
            let admin = try TokenCommand.create(TokenRequest(name: "boss", scopes: [.admin]), expiresInSeconds: nil,
                                                databasePath: configuration.databasePath)
            application.refreshTokens()
            let auth = [("Authorization", "Bearer \(admin)")]
            let made = try client.request("POST", "/v1/tokens", json: #"{"name":"temp","scopes":["read"]}"#, headers: auth)
            let madeSecret = made.json["secret"] as? String ?? ""
            let madeID = made.json["id"] as? String ?? ""
            #expect(try client.request("DELETE", "/v1/tokens/\(madeID)", headers: auth).status == 204)
            #expect(try client.request("POST", "/v1/tasks", json: #"{"id":"t","name":"T"}"#, headers: auth).status == 201)
            #expect(try client.request("POST", "/v1/tasks/t/cancel", headers: auth + [("Content-Type", "application/json")]).status == 202)
            #expect(try client.request("DELETE", "/v1/tasks/t", headers: auth).status == 204)
            let logged = lines.withLock { $0 }
            for event in ["audit.token_create", "audit.token_revoke", "audit.task_cancel", "audit.task_delete"] {
                let line = logged.first { $0.contains("event=\(event) ") } ?? ""
                #expect(line.contains("token_name=boss") && line.contains("token_id=tok_"), "\(event): \(line)")
            }
            #expect(!logged.joined().contains(String(madeSecret.dropFirst(3))))
            #expect(!logged.joined().contains(String(admin.dropFirst(3))))
            let unused = try TestHTTPClient(port: application.port)
            try unused.send("GET /v1/tasks?access_token=\(secret) HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")

            usleep(200_000)
        }
        // Whatever the library's messages hold, they are values of a log line, and every
        // value is redacted.
        logger.log(.warn, "http.library", ["message": "bad request GET /v1/events?task=a&access_token=\(secret) HTTP/1.1"])
        #expect(lines.withLock { $0 }.last?.contains("access_token=[REDACTED] HTTP/1.1") == true)
        let all = lines.withLock { $0 }.joined()
        #expect(!all.isEmpty)
        #expect(!all.contains(String(secret.dropFirst(3))), "\(all)")
        #expect(Redaction.redact("GET /v1/events?access_token=\(secret)&task=a") == "GET /v1/events?access_token=[REDACTED]&task=a")
        #expect(Redaction.redact("token \(secret).") == "token hw_[REDACTED].")
        #expect(Redaction.redact("plain text") == "plain text")
    }
}
