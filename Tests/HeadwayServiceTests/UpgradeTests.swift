import Foundation
import HeadwayStore
import HeadwayTestSupport
import Testing

/// A database written by the first schema (Tests/fixtures/schema-1.sqlite, made by the
/// headwayd of commit 4c5c656, whose only migration was 0001, through its API; its
/// tasks as that build listed them are in schema-1.tasks.json) opens in today's build,
/// migrates forward and keeps every task as it was; the new features then work on it.
@Suite(.serialized) struct UpgradeTests {
    /// The fields of a task that an upgrade must keep exactly (computed ones — rate, ETA,
    /// stall state, `updated_at` — may be computed anew).
    static let keptFields = ["id", "name", "label", "parent_id", "weight", "state", "mode", "completed", "total", "unit",
                             "fraction", "cancel_requested", "stall_timeout_seconds", "progress_timeout_seconds",
                             "created_at", "last_progress_at", "finished_at", "message", "metadata"]

    /// A JSON value as text with sorted keys ("absent" for a missing field).
    static func canonical(_ value: Any?) throws -> String {
        guard let value else { return "absent" }
        return String(decoding: try JSONSerialization.data(withJSONObject: [value], options: [.sortedKeys]), as: UTF8.self)
    }

    @Test func aFirstSchemaDatabaseMigratesForwardWithItsTasksIntact() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("upgraded.db")
        let fixture = packageRoot.appendingPathComponent("Tests/fixtures/schema-1.sqlite").path
        try FileManager.default.copyItem(atPath: fixture, toPath: path)
        #expect(try Migrator.recordedVersion(in: try Database(path: path, readOnly: true)) == 1)

        let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", path], logPath: directory.file("d.log"))
        defer { daemon.stop(SIGTERM) }
        #expect(daemon.log.contains("event=database.migrated versions=2,3,4,5"), "\(daemon.log)")
        let client = try TestHTTPClient(port: daemon.port)

        let expectedData = try Data(contentsOf: packageRoot.appendingPathComponent("Tests/fixtures/schema-1.tasks.json"))
        let expected = try #require(try JSONSerialization.jsonObject(with: expectedData) as? [String: Any])
        let listed = try client.request("GET", "/v1/tasks?page_size=500")
        #expect(listed.status == 200)
        #expect(listed.json["total_size"] as? Int == expected["total_size"] as? Int)
        let before = try #require(expected["tasks"] as? [[String: Any]])
        let after = try #require(listed.json["tasks"] as? [[String: Any]])
        #expect(after.map { $0["id"] as? String } == before.map { $0["id"] as? String }, "same tasks, same order")
        // Schema 1 rolled nothing up: an unfinished parent's roll-up is computed from its
        // stored children by migration 10 (deploy.build 6/8 weighing 3, deploy.push 0/8).
        let recomputed: [String: [String: Any]] = ["deploy": ["mode": "quantified", "fraction": (3 * 0.75 + 0) / 4]]
        for (old, new) in zip(before, after) {
            for field in Self.keptFields {
                let expected = recomputed[old["id"] as? String ?? ""]?[field] ?? old[field]
                let was = try Self.canonical(expected), now = try Self.canonical(new[field])
                #expect(was == now, "\(old["id"] ?? "?").\(field): \(was) became \(now)")
            }
        }
        let deploy = try client.request("GET", "/v1/tasks/deploy").json
        #expect((deploy["children"] as? [String: Any])?["running"] as? Int == 2)
        #expect(deploy["attention"] is NSNull)

        // What later schemas brought works on the old rows: counts by parent, a child
        // under an old parent, progress with history, the event stream's snapshot.
        #expect(try client.request("GET", "/v1/tasks?parent_id=deploy").json["total_size"] as? Int == 2)
        #expect(try client.request("POST", "/v1/tasks", json: #"{"id":"deploy.verify","name":"Verify","parent_id":"deploy"}"#)
            .status == 201)
        #expect(try client.request("POST", "/v1/tasks/backup-db-3/progress", json: #"{"completed":900}"#).status == 200)
        let history = try client.request("GET", "/v1/tasks/backup-db-3/history")
        #expect((history.json["points"] as? [Any])?.isEmpty == false, "\(history.text)")
        let events = try TestSSEClient(port: daemon.port)
        let snapshot = try #require(try events.next())
        #expect(snapshot.event == "snapshot")
        // The unfinished old tasks (the finished ones ended long before the last minute).
        #expect(snapshot.data.contains(#""id":"backup-db-3""#) && snapshot.data.contains(#""id":"unicode""#))
        #expect(try client.request("DELETE", "/v1/tasks/deploy").status == 204)
        #expect(try client.request("GET", "/v1/tasks/deploy.build").status == 404, "the old subtree goes with its root")

        #expect(daemon.stop(SIGTERM) == 0)
        let reopened = try Database(path: path, readOnly: true)
        #expect(try reopened.integrityProblems().isEmpty)
        #expect(try Migrator.recordedVersion(in: reopened) == Migrator().latestVersion)
    }
}
