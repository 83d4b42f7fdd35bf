import Dispatch
import Foundation
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import Daemon

/// Parents that tell the truth and one clock (issue 46, items 1 and 2) through the real
/// daemon: `fraction` with failed and canceled children, `children`, `attention`, a
/// parent's estimate hidden while it needs attention, `last_signal_at` and
/// `stalled_since`, retention under a parent that never finishes, `--max-children`, and a
/// parent exact under concurrent updates of its children.
@Suite(.serialized) struct ParentTruthAPITests {
    private func time(_ text: Any?) -> Int64? {
        guard let text = text as? String else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
    }

    private func counts(_ task: [String: Any]) -> [String: Int]? {
        (task["children"] as? [String: Any])?.compactMapValues { $0 as? Int }
    }

    /// `children` as the API shows it.
    private func expectedCounts(total: Int, pending: Int = 0, running: Int = 0, stalled: Int = 0, succeeded: Int = 0,
                                failed: Int = 0, canceled: Int = 0) -> [String: Int] {
        ["total": total, "pending": pending, "running": running, "stalled": stalled, "succeeded": succeeded,
         "failed": failed, "canceled": canceled]
    }

    /// Issue 46's first falsehood: children at 1/10, one failed and one canceled, left
    /// the parent "running" at fraction 1.
    @Test(arguments: Transport.allCases) func aParentWithAFailedAndACanceledChildTellsTheTruth(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"p","name":"Parent"}"#)
        let leaf = try daemon.register(#"{"id":"a","name":"A","parent_id":"p","total":10}"#)
        #expect(leaf["children"] is NSNull && leaf["attention"] is NSNull, "not a parent")
        try daemon.register(#"{"id":"b","name":"B","parent_id":"p","total":10}"#)
        try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":1}"#)
        try daemon.request("POST", "/v1/tasks/b/progress", json: #"{"completed":1}"#)
        let running = try daemon.request("GET", "/v1/tasks/p").json
        #expect(counts(running) == expectedCounts(total: 2, running: 2))
        #expect(running["attention"] is NSNull)

        try daemon.request("POST", "/v1/tasks/a/finish", json: #"{"outcome":"failed","message":"disk full"}"#)
        try daemon.request("POST", "/v1/tasks/b/finish", json: #"{"outcome":"canceled"}"#)
        let parent = try daemon.request("GET", "/v1/tasks/p").json
        #expect(parent["state"] as? String == "running")
        #expect(parent["fraction"] as? Double == 0.1, "each child counts the 1/10 it had done")
        #expect(counts(parent) == expectedCounts(total: 2, failed: 1, canceled: 1))
        #expect(parent["attention"] as? String == "failed")
        #expect(parent["rate"] is NSNull && parent["eta_seconds"] is NSNull)

        // Even a child that failed having done everything, and the parent's own success,
        // leave a parent with a failed child below 1.
        try daemon.register(#"{"id":"q","name":"Q"}"#)
        try daemon.register(#"{"id":"q1","name":"Q1","parent_id":"q","total":1,"completed":1}"#)
        try daemon.request("POST", "/v1/tasks/q1/finish", json: #"{"outcome":"failed"}"#)
        let q = try daemon.request("POST", "/v1/tasks/q/finish", json: #"{"outcome":"succeeded"}"#).json
        let fraction = try #require(q["fraction"] as? Double)
        #expect(fraction < 1 && Int(fraction * 100) == 99)
    }

    /// A stall raised by the sweeper reaches every ancestor's counts and `attention`, each
    /// with its `task.updated`; a failure below wins over a stall; a recovery clears it.
    @Test func aStalledDescendantGivesEachAncestorAttention() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"root","name":"Root","stall_timeout_seconds":600}"#)
        try daemon.register(#"{"id":"mid","name":"Mid","parent_id":"root","stall_timeout_seconds":600}"#)
        try daemon.register(#"{"id":"leaf","name":"Leaf","parent_id":"mid","total":10,"stall_timeout_seconds":5}"#)
        try daemon.register(#"{"id":"other","name":"Other","parent_id":"mid","total":10,"stall_timeout_seconds":600}"#)
        let subscriber = try daemon.subscribe()
        _ = try subscriber.nextEvent()
        clock.advance(by: 2_000)
        try daemon.request("POST", "/v1/tasks/other/heartbeat")
        clock.advance(by: 3_000)
        #expect(daemon.application.sweepStalls() == 3, "the leaf's task.stalled, its ancestors' task.updated")
        let events = try subscriber.events { $0.json["id"] as? String == "root" && $0.json["attention"] as? String == "stalled" }
        let flagged = events.filter { $0.json["attention"] as? String == "stalled" }
        #expect(flagged.map { $0.json["id"] as? String } == ["mid", "root"])
        #expect(flagged.allSatisfy { $0.event == "task.updated" })
        let mid = try daemon.request("GET", "/v1/tasks/mid").json
        #expect(counts(mid)?["running"] == 2 && counts(mid)?["stalled"] == 1)
        #expect(mid["stalled"] as? Bool == false, "its other child keeps it alive")
        #expect(mid["rate"] is NSNull && mid["eta_seconds"] is NSNull)
        let root = try daemon.request("GET", "/v1/tasks/root").json
        #expect(root["attention"] as? String == "stalled")
        #expect(counts(root)?["stalled"] == 0, "the count is of direct children")

        try daemon.request("POST", "/v1/tasks/other/finish", json: #"{"outcome":"failed"}"#)
        #expect(try daemon.request("GET", "/v1/tasks/root").json["attention"] as? String == "failed", "a failure wins")

        try daemon.register(#"{"id":"r2","name":"Root 2","stall_timeout_seconds":600}"#)
        try daemon.register(#"{"id":"r2.c","name":"C","parent_id":"r2","stall_timeout_seconds":5}"#)
        clock.advance(by: 5_000)
        daemon.application.sweepStalls()
        #expect(try daemon.request("GET", "/v1/tasks/r2").json["attention"] as? String == "stalled")
        try daemon.request("POST", "/v1/tasks/r2.c/heartbeat")
        let recovered = try daemon.request("GET", "/v1/tasks/r2").json
        #expect(recovered["attention"] is NSNull)
        #expect(counts(recovered)?["stalled"] == 0)
    }

    /// One clock: `last_signal_at` is the last signal (a descendant's too), and
    /// `stalled_since` is when the current stall began, kept when its reason changes.
    @Test func lastSignalAtAndStalledSinceAreUnambiguous() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        let created = try daemon.register(
            #"{"id":"t","name":"T","total":100,"stall_timeout_seconds":20,"progress_timeout_seconds":5}"#)
        let start = try #require(time(created["created_at"]))
        #expect(time(created["last_signal_at"]) == start)
        clock.advance(by: 5_000)
        daemon.application.sweepStalls()
        let noProgress = try daemon.request("GET", "/v1/tasks/t").json
        #expect(noProgress["stall_reason"] as? String == "no_progress")
        #expect(time(noProgress["stalled_since"]) == start + 5_000)
        #expect(time(noProgress["last_signal_at"]) == start)
        clock.advance(by: 19_000)
        daemon.application.sweepStalls()
        let silent = try daemon.request("GET", "/v1/tasks/t").json
        #expect(silent["stall_reason"] as? String == "silent")
        #expect(time(silent["stalled_since"]) == start + 5_000, "the stall began at 5 s; its reason changed at 20 s")
        #expect(time(silent["last_signal_at"]) == start, "no signal for 24 s, from last_signal_at")

        // A descendant's signal is its ancestors' too, and shows on their events.
        try daemon.register(#"{"id":"p","name":"P"}"#)
        try daemon.register(#"{"id":"p.c","name":"C","parent_id":"p"}"#)
        let subscriber = try daemon.subscribe("?task=p")
        _ = try subscriber.nextEvent()
        clock.advance(by: 3_000)
        let beat = try daemon.request("POST", "/v1/tasks/p.c/heartbeat").json
        let parent = try daemon.request("GET", "/v1/tasks/p").json
        #expect(time(parent["last_signal_at"]) == time(beat["last_signal_at"]))
        let event = try #require(try subscriber.nextEvent())
        #expect(event.event == "task.updated")
        #expect(time(event.json["last_signal_at"]) == time(beat["last_signal_at"]))
    }

    /// A parent that never finishes (a service starting jobs forever): retention forgets
    /// its finished children, the parent keeps what they contributed, and
    /// `--max-children` counts only unfinished ones.
    @Test(arguments: Transport.allCases) func aLongLivedParentDoesNotFillUp(_ transport: Transport) throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(transport: transport, arguments: ["--retention", "1d", "--max-children", "2"], clock: clock)
        try daemon.register(#"{"id":"svc","name":"Service"}"#)
        for (id, outcome) in [("j1", "succeeded"), ("j2", "failed"), ("j3", "succeeded")] {
            try daemon.register(#"{"id":"\#(id)","name":"Job","parent_id":"svc","total":10}"#)
            try daemon.request("POST", "/v1/tasks/\(id)/progress", json: #"{"completed":3}"#)
            try daemon.request("POST", "/v1/tasks/\(id)/finish", json: #"{"outcome":"\#(outcome)"}"#)
        }
        try daemon.register(#"{"id":"j4","name":"Job","parent_id":"svc","total":10}"#)
        try daemon.register(#"{"id":"j5","name":"Job","parent_id":"svc","total":10}"#)
        let refused = try daemon.request("POST", "/v1/tasks", json: #"{"id":"j6","name":"Job","parent_id":"svc"}"#)
        #expect(refused.problemCode == "too_many_children", "two unfinished children are the most")
        let before = try daemon.request("GET", "/v1/tasks/svc").json

        clock.advance(by: 86_400_001)
        #expect(daemon.application.pruneOldTasks() == 3, "the finished children, though their parent runs")
        #expect(try daemon.request("GET", "/v1/tasks/j1").status == 404)
        #expect(try daemon.request("GET", "/v1/tasks?parent_id=svc").json["total_size"] as? Int == 2)
        let after = try daemon.request("GET", "/v1/tasks/svc").json
        #expect(counts(after) == expectedCounts(total: 5, running: 2, succeeded: 2, failed: 1))
        #expect(after["fraction"] as? Double == before["fraction"] as? Double)
        let expectedFraction: Double = (1 + 0.3 + 1 + 0 + 0) / 5
        #expect(after["fraction"] as? Double == expectedFraction)
        #expect(after["attention"] as? String == "failed", "a forgotten failure still counts")

        try daemon.request("POST", "/v1/tasks/j4/finish", json: #"{"outcome":"succeeded"}"#)
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"j6","name":"Job","parent_id":"svc"}"#).status == 201)
    }

    /// A database written before migration 10 (PostgreSQL: 5), with the old roll-up (every
    /// finished child counted 1) and no counts: the migration computes the counts, the
    /// attention and the roll-up of unfinished parents from the stored children.
    @Test func theMigrationBackfillsParentsFromTheirStoredChildren() throws {
        let daemon = try LiveDaemon(prepare: { location in
            let database = try Database(path: location)
            let postgres = isPostgresLocation(location)
            let earlier = (postgres ? EmbeddedMigrations.postgres : EmbeddedMigrations.all).filter { $0.version < (postgres ? 5 : 10) }
            try Migrator(earlier).migrate(database)
            // id, parent, weight, state, completed, total, stalled, finished, children_weight, children_done, depth, child_count
            let rows: [(String, String?, Double, String, Int, Int?, Int, Bool, Double, Double, Int, Int)] = [
                ("p", nil, 1, "running", 0, nil, 0, false, 4, 3.5, 1, 3),
                ("a", "p", 1, "failed", 1, 10, 0, true, 0, 0, 2, 0),
                ("b", "p", 1, "canceled", 0, nil, 0, true, 0, 0, 2, 0),
                ("m", "p", 2, "running", 0, nil, 0, false, 2, 1.5, 2, 2),
                ("m1", "m", 1, "running", 5, 10, 1, false, 0, 0, 3, 0),
                ("m2", "m", 1, "succeeded", 10, 10, 0, true, 0, 0, 3, 0),
            ]
            for (id, parent, weight, state, completed, total, stalled, finished, childrenWeight, childrenDone, depth, children) in rows {
                try database.execute("""
                    INSERT INTO tasks (id, name, parent_id, weight, state, completed, total, stalled, stall_reason,
                        stall_timeout_ms, created_at, updated_at, last_signal_at, finished_at, definition, is_root,
                        children_weight, children_done, depth, child_count)
                    VALUES ('\(id)', 'Task \(id)', \(parent.map { "'\($0)'" } ?? "NULL"), \(weight), '\(state)', \(completed),
                        \(total.map(String.init) ?? "NULL"), \(stalled), \(stalled == 1 ? "'silent'" : "NULL"), 30000,
                        1000, 1000, 1000, \(finished ? "2000" : "NULL"), '{}', \(parent == nil ? 1 : 0),
                        \(childrenWeight), \(childrenDone), \(depth), \(children))
                    """)
            }
        })
        let p = try daemon.request("GET", "/v1/tasks/p").json
        #expect(counts(p) == expectedCounts(total: 3, running: 1, failed: 1, canceled: 1))
        #expect(p["attention"] as? String == "failed")
        let expected: Double = (1 * 0.1 + 1 * 0 + 2 * 0.75) / 4
        #expect(abs((p["fraction"] as? Double ?? -1) - expected) < 1e-12, "\(p["fraction"] ?? "?")")
        let m = try daemon.request("GET", "/v1/tasks/m").json
        #expect(counts(m) == expectedCounts(total: 2, running: 1, stalled: 1, succeeded: 1))
        #expect(m["attention"] as? String == "stalled")
        #expect(m["fraction"] as? Double == 0.75)
        let leaf = try daemon.request("GET", "/v1/tasks/m1").json
        #expect(leaf["children"] is NSNull && leaf["attention"] is NSNull)
        #expect(leaf["last_signal_at"] as? String == "1970-01-01T00:00:01.000Z")
        // The counts go on from there.
        try daemon.request("POST", "/v1/tasks/m1/finish", json: #"{"outcome":"succeeded"}"#)
        let after = try daemon.request("GET", "/v1/tasks/p").json
        #expect(counts(try daemon.request("GET", "/v1/tasks/m").json) == expectedCounts(total: 2, succeeded: 2))
        #expect(after["attention"] as? String == "failed")
        #expect(abs((after["fraction"] as? Double ?? -1) - (0.1 + 2) / 4) < 1e-12)
    }

    /// Many clients update the children of one tree at once (single updates, heartbeats,
    /// batches, finishes with every outcome, new children, deletes); afterwards every
    /// parent equals what its stored children say.
    @Test func concurrentUpdatesOfSiblingsLeaveEveryParentExact() throws {
        let daemon = try LiveDaemon()
        let port = daemon.application.port
        try daemon.register(#"{"id":"top","name":"Top"}"#)
        let middles = ["m0", "m1", "m2"]
        for middle in middles {
            try daemon.register(#"{"id":"\#(middle)","name":"Mid","parent_id":"top","weight":2}"#)
        }
        let workers = 6, perWorker = 12
        for worker in 0..<workers {
            for index in 0..<perWorker {
                let parent = index % 4 == 3 ? "top" : middles[(worker + index) % middles.count]
                let state = index % 5 == 0 ? #","state":"pending""# : ""
                let total = index % 6 == 0 ? "" : #","total":100"#
                try daemon.register(
                    #"{"id":"w\#(worker)-\#(index)","name":"W","parent_id":"\#(parent)","weight":\#(1 + index % 3)\#(total)\#(state)}"#)
            }
        }
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do {
                let client = try TestHTTPClient(port: port)
                var random = SeededGenerator(seed: UInt64(worker + 1))
                for round in 0..<40 {
                    let index = Int(random.next() % UInt64(perWorker))
                    let id = "w\(worker)-\(index)"
                    switch random.next() % 7 {
                    case 0: _ = try client.request("POST", "/v1/tasks/\(id)/heartbeat")
                    case 1, 2: _ = try client.request("POST", "/v1/tasks/\(id)/progress", json: #"{"increment":\#(1 + round % 4)}"#)
                    case 3:
                        let items = (0..<4).map { offset in
                            #"{"id":"w\#(worker)-\#((index + offset) % perWorker)","increment":1}"#
                        }
                        _ = try client.request("POST", "/v1/progress", json: #"{"updates":[\#(items.joined(separator: ","))]}"#)
                    case 4:
                        let outcome = ["succeeded", "failed", "canceled"][Int(random.next() % 3)]
                        _ = try client.request("POST", "/v1/tasks/\(id)/finish", json: #"{"outcome":"\#(outcome)"}"#)
                    case 5:
                        _ = try client.request("POST", "/v1/tasks", json:
                            #"{"id":"\#(id).r\#(round)","name":"Sub","parent_id":"\#(id)","total":4,"completed":\#(round % 5)}"#)
                    default:
                        if round % 3 == 0 { _ = try client.request("DELETE", "/v1/tasks/\(id)") }
                        else { _ = try client.request("POST", "/v1/tasks/\(id)/heartbeat") }
                    }
                }
            } catch {
                failures.withLock { $0.append("worker \(worker): \(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        try expectExact("top", in: daemon)
    }

    /// Checks `id` and every parent below it against a recomputation from their stored
    /// children: counts by state, `attention`, and `fraction` (within rounding).
    private func expectExact(_ id: String, in daemon: LiveDaemon) throws {
        _ = try summary(id, in: daemon)
    }

    /// What `id` contributes to its parent (its weight, its share, whether it fails or
    /// stalls it), after checking it against its children.
    private func summary(_ id: String, in daemon: LiveDaemon) throws -> (weight: Double, share: Double, failing: Bool, stalling: Bool) {
        let task = try daemon.request("GET", "/v1/tasks/\(id)").json
        let children = try #require(try daemon.request("GET", "/v1/tasks?parent_id=\(id)&page_size=500").json["tasks"]
            as? [[String: Any]])
        var expected = expectedCounts(total: 0)
        var (weight, done, failing, stalling) = (0.0, 0.0, false, false)
        for child in children {
            let state = try #require(child["state"] as? String)
            expected[state, default: 0] += 1
            expected["total", default: 0] += 1
            if child["stalled"] as? Bool == true { expected["stalled", default: 0] += 1 }
            let below = try summary(try #require(child["id"] as? String), in: daemon)
            weight += below.weight
            done += below.weight * below.share
            failing = failing || below.failing
            stalling = stalling || below.stalling
        }
        let state = try #require(task["state"] as? String)
        let fraction = task["fraction"] as? Double
        if children.isEmpty {
            // Null, or all zeros for a finished parent whose children were deleted after it
            // finished (its fraction stays what it finished with).
            #expect(task["children"] is NSNull || counts(task) == expectedCounts(total: 0), "\(id)")
        } else {
            #expect(counts(task) == expected, "\(id)")
            let attention = failing ? "failed" : stalling ? "stalled" : nil
            #expect(task["attention"] as? String == attention, "\(id)")
            if attention != nil { #expect(task["rate"] is NSNull, "\(id)") }
            if !(state == "succeeded" || state == "failed" || state == "canceled") {
                // A finished parent keeps the fraction it finished with.
                var mean = done / weight
                if failing { mean = min(mean, TaskRecord.belowOne) }
                #expect(abs((fraction ?? -1) - mean) < 1e-9, "\(id): \(fraction ?? -1) against \(mean)")
            }
        }
        let share = state == "succeeded" ? 1 : fraction ?? 0
        return (try #require(task["weight"] as? Double), share,
                state == "failed" || task["attention"] as? String == "failed",
                (state == "running" && task["stalled"] as? Bool == true) || task["attention"] as? String == "stalled")
    }
}
