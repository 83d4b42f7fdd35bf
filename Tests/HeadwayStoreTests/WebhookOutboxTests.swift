import Foundation
import HeadwayCore
import Testing
@testable import HeadwayStore

/// The outbox: each change writes one pending delivery per matching webhook in its own
/// transaction (rolled back with it), the stall sweeper's changes included; the in-memory
/// list decides; the repository keeps order, records attempts and prunes.
@Suite struct WebhookOutboxTests {
    private struct Refused: Error {}

    private static func webhook(_ id: String, _ events: Set<TaskEventKind>, prefix: String? = nil,
                                outcomes: Set<TaskState>? = nil, format: WebhookFormat = .json) -> WebhookRecord {
        WebhookRecord(id: id, url: "https://example.com/\(id)", filter: WebhookFilter(events: events, taskPrefix: prefix,
                                                                                      outcomes: outcomes),
                      format: format, secret: "whsec_x", createdAt: 1)
    }

    private static func pending(_ fixture: StoreFixture) throws -> [(String, String, String)] {
        try fixture.read { database in
            try database.rows("SELECT webhook_id, event_type, body FROM webhook_deliveries ORDER BY webhook_id, event_id") {
                ($0.text(0), $0.text(1), $0.text(2))
            }
        }
    }

    @Test func eachChangeWritesTheDeliveriesOfTheWebhooksThatWantIt() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        // No webhook yet: nothing written.
        _ = try fixture.write { try store.register(Registration(id: "before", name: "B"), now: 1, in: $0) }
        #expect(try Self.pending(fixture).isEmpty)
        let webhooks = [Self.webhook("a", [.created, .finished], prefix: "db-", outcomes: [.failed]),
                        Self.webhook("b", [.created], format: .slack)]
        try fixture.write { database in for webhook in webhooks { try WebhookRepository.insert(webhook, in: database) } }
        store.webhooks.load(webhooks)
        _ = try fixture.write { try store.register(Registration(id: "db-1", name: "Backup"), now: 2, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "web-1", name: "Web"), now: 3, in: $0) }
        _ = try fixture.write { try store.finish("db-1", Finish(outcome: .succeeded), now: 4, in: $0) }
        _ = try fixture.write { try store.finish("web-1", Finish(outcome: .failed), now: 5, in: $0) }
        let rows = try Self.pending(fixture)
        #expect(rows.map { "\($0.0) \($0.1)" } == ["a task.created", "b task.created", "b task.created"])
        #expect(rows[1].2 == #"{"text":"Backup started"}"#)
        #expect(store.webhooks.takeWritten() && !store.webhooks.takeWritten())
        let first = try fixture.read { try WebhookRepository.oldestPending(of: "b", in: $0) }
        #expect(first?.body.contains("Backup") == true && first?.attempts == 0 && first?.state == .pending)
    }

    /// A webhook limited to a prefix shows a task's parent outside it as null, as a token
    /// with that prefix sees the task; an unlimited webhook shows the parent.
    @Test func aWebhookWithAPrefixSeesNoParentOutsideIt() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let webhooks = [Self.webhook("a", [.created], prefix: "team-a."), Self.webhook("b", [.created])]
        try fixture.write { database in for webhook in webhooks { try WebhookRepository.insert(webhook, in: database) } }
        store.webhooks.load(webhooks)
        _ = try fixture.write { try store.register(Registration(id: "team-b.root", name: "R"), now: 1, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "team-a.child", name: "C", parentID: "team-b.root"), now: 2, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "team-a.kid", name: "K", parentID: "team-a.child"), now: 3, in: $0) }
        let rows = try Self.pending(fixture)
        let bodies = rows.filter { $0.0 == "a" }.map(\.2)
        #expect(bodies.count == 2)
        #expect(bodies.allSatisfy { !$0.contains("team-b") }, "\(bodies)")
        #expect(bodies.first?.contains(#""parent_id":null"#) == true, "\(bodies)")
        #expect(bodies.last?.contains(#""parent_id":"team-a.child""#) == true, "\(bodies)")
        #expect(rows.filter { $0.0 == "b" }.contains { $0.2.contains(#""parent_id":"team-b.root""#) })
    }

    /// A failure's delivery carries its context, read in the change's transaction: the
    /// ancestors as the batch left them (a parent made in the same transaction), the last
    /// 20 output lines, how long it ran, the page under the site; a webhook limited to a
    /// prefix sees only the ancestors inside it. The per-format fields are stored and read back.
    @Test func aFailureCarriesItsContextReadInItsTransaction() throws {
        let fixture = try StoreFixture()
        let outbox = WebhookOutbox(site: "https://headway.example.com")
        let store = TaskStore(changeCounter: fixture.store.changeCounter, cache: fixture.store.cache, webhooks: outbox)
        let mail = WebhookRecord(id: "m", url: "smtp://mail.example.com", filter: WebhookFilter(events: [.finished]),
                                 format: .email, secret: "whsec_x", createdAt: 1,
                                 destination: WebhookDestination(mailFrom: "h@example.com", mailTo: ["a@example.com", "b@example.com"]))
        let webhooks = [Self.webhook("a", [.finished]), Self.webhook("b", [.finished], prefix: "job-"), mail]
        try fixture.write { database in for webhook in webhooks { try WebhookRepository.insert(webhook, in: database) } }
        #expect(try fixture.read { try WebhookRepository.all(in: $0) } == webhooks)
        outbox.load(webhooks)
        try fixture.write { database in
            _ = try store.register(Registration(id: "nightly", name: "Nightly"), now: 1_000, in: database)
            _ = try store.register(Registration(id: "job-1", name: "Job", parentID: "nightly"), now: 2_000, in: database)
            _ = try store.progress("job-1", ProgressUpdate(output: (0..<25).map { "line \($0)" }), now: 3_000, in: database)
            _ = try store.finish("job-1", Finish(outcome: .failed), now: 9_500, in: database)
        }
        let bodies = Dictionary(uniqueKeysWithValues: try Self.pending(fixture).filter { $0.1 == "task.finished" && $0.0 != "m" }
            .map { ($0.0, $0.2) })
        for (id, parents) in [("a", #"[{"id":"nightly","name":"Nightly"}]"#), ("b", "[]")] {
            guard case .object(let body)? = JSONValue.parse((bodies[id] ?? "").utf8), case .object(let context)? = body["context"] else {
                Issue.record("no context for \(id): \(bodies)")
                continue
            }
            #expect(context["parents"] == JSONValue.parse(parents.utf8))
            #expect(context["output"] == .array((5..<25).map { .string("line \($0)") }))
            #expect(context["ran_seconds"] == .number(7.5) && context["url"] == .string("https://headway.example.com/#task=job-1"))
        }
    }

    @Test func aChangeRolledBackTakesItsDeliveriesWithIt() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let webhook = Self.webhook("a", [.created, .updated])
        try fixture.write { try WebhookRepository.insert(webhook, in: $0) }
        store.webhooks.load([webhook])
        #expect(throws: Refused.self) {
            try fixture.write { database in
                _ = try store.register(Registration(id: "t", name: "T"), now: 1, in: database)
                throw Refused()
            }
        }
        // A change the rules refuse writes nothing either.
        #expect(throws: TaskError.self) {
            try fixture.write { try store.progress("missing", ProgressUpdate(completed: 1), now: 2, in: $0) }
        }
        #expect(try Self.pending(fixture).isEmpty)
        // A webhook still in the list but deleted from the table (by another daemon): none.
        store.webhooks.load([Self.webhook("gone", [.created])])
        _ = try fixture.write { try store.register(Registration(id: "u", name: "U"), now: 3, in: $0) }
        #expect(try Self.pending(fixture).isEmpty)
    }

    @Test func theStallSweeperWritesDeliveriesToo() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let webhook = Self.webhook("a", [.stalled])
        try fixture.write { try WebhookRepository.insert(webhook, in: $0) }
        store.webhooks.load([webhook])
        _ = try fixture.write {
            try store.register(Registration(id: "t", name: "T", stallTimeoutSeconds: 1), now: 1_000, in: $0)
        }
        let swept = try fixture.write { try store.sweep(now: 60_000, limit: 10, in: $0) }
        #expect(swept.events.map(\.kind) == [.stalled])
        #expect(try Self.pending(fixture).map(\.1) == ["task.stalled"])
    }

    /// A batch request's items and the ancestors it moves once write their deliveries too.
    @Test func aBatchOfProgressWritesTheDeliveriesOfItsItemsAndAncestors() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "P"), now: 1_000, in: $0) }
        _ = try fixture.write {
            try store.register(Registration(id: "c", name: "C", parentID: "p", total: 10, stallTimeoutSeconds: 1), now: 1_000, in: $0)
        }
        _ = try fixture.write { try store.sweep(now: 60_000, limit: 10, in: $0) }
        let webhook = Self.webhook("a", [.updated, .recovered])
        try fixture.write { try WebhookRepository.insert(webhook, in: $0) }
        store.webhooks.load([webhook])
        let items = [ProgressItem(id: "c", update: ProgressUpdate(completed: 5))]
        let results = try fixture.write { try store.progress(each: items, now: 61_000, in: $0) }
        let events = try results[0].get().events.map { "\($0.kind.rawValue) \($0.taskID)" }
        #expect(events == ["task.recovered c", "task.recovered p"])
        #expect(try Self.pending(fixture).map(\.1) == ["task.recovered", "task.recovered"])
    }

    /// A task's updates coalesce while one of them waits unsent: the row keeps its place and
    /// takes the newest body, its revision in the delivery id; an update whose delivery was
    /// attempted, or an event of another kind, adds a row. An attempt during which the body
    /// was replaced leaves the delivery pending, due again: the newer body was not sent.
    @Test func aTasksUpdatesCoalesceWhileOneWaitsUnsent() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let webhook = Self.webhook("a", [.created, .updated])
        try fixture.write { try WebhookRepository.insert(webhook, in: $0) }
        store.webhooks.load([webhook])
        for id in ["t", "u"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id.uppercased(), total: 10), now: 1, in: $0) }
        }
        for (id, completed) in [("t", 1), ("u", 1), ("t", 2), ("t", 3)] {
            _ = try fixture.write { try store.progress(id, ProgressUpdate(completed: Int64(completed)), now: 2, in: $0) }
        }
        func queue() throws -> [WebhookDelivery] {
            try fixture.read { try WebhookRepository.recent(of: "a", limit: 100, in: $0) }.reversed()
        }
        var rows = try queue()
        #expect(rows.map { "\($0.eventType.rawValue) \($0.openTaskID ?? "-") \($0.revision)" }
                == ["task.created - 0", "task.created - 0", "task.updated t 2", "task.updated u 0"])
        let update = rows[2]
        #expect(update.body.contains(#""completed":3"#) && update.body.contains(#""id":"\#(update.id)""#))
        #expect(update.id == "a-\(update.eventID)-2")
        // Its attempt starts; meanwhile a newer update replaces the body.
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 4), now: 3, in: $0) }
        try fixture.write { database in
            try WebhookRepository.recordAttempt(webhookID: "a", eventID: update.eventID, revision: update.revision,
                                                state: .delivered, attemptAt: 3, nextAttemptAt: 4, status: 200, error: nil,
                                                latencyMilliseconds: 1, in: database)
        }
        rows = try queue()
        #expect(rows[2].state == .pending && rows[2].revision == 3 && rows[2].attempts == 1 && rows[2].nextAttemptAt == 4)
        #expect(rows[2].body.contains(#""completed":4"#))
        // Attempted once, it no longer takes newer updates: the next one is a row of its own.
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 5), now: 5, in: $0) }
        rows = try queue()
        #expect(rows.count == 5 && rows[4].openTaskID == "t" && rows[4].revision == 0 && rows[4].body.contains(#""completed":5"#))
        try fixture.write { database in
            try WebhookRepository.recordAttempt(webhookID: "a", eventID: update.eventID, revision: 3, state: .delivered,
                                                attemptAt: 6, nextAttemptAt: 6, status: 200, error: nil,
                                                latencyMilliseconds: 1, in: database)
        }
        #expect(try queue()[2].state == .delivered)
    }

    /// Another event of the task closes its open update: a later update is a row of its own,
    /// behind that event, and never overtakes it. A replaced body takes the newest update's
    /// time (the retry window counts from it).
    @Test func anUpdateAfterAnotherEventOfItsTaskDoesNotOvertakeIt() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let webhook = Self.webhook("a", [.updated, .cancelRequested])
        try fixture.write { try WebhookRepository.insert(webhook, in: $0) }
        store.webhooks.load([webhook])
        _ = try fixture.write { try store.register(Registration(id: "t", name: "T", total: 10), now: 1, in: $0) }
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 1), now: 2, in: $0) }
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 2), now: 9, in: $0) }
        _ = try fixture.write { try store.cancel("t", now: 10, in: $0) }
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 3), now: 11, in: $0) }
        _ = try fixture.write { try store.progress("t", ProgressUpdate(completed: 4), now: 12, in: $0) }
        let rows = Array(try fixture.read { try WebhookRepository.recent(of: "a", limit: 100, in: $0) }.reversed())
        #expect(rows.map { "\($0.eventType.rawValue) \($0.revision)" }
                == ["task.updated 1", "task.cancel_requested 0", "task.updated 1"])
        #expect(rows[0].body.contains(#""completed":2"#) && rows[0].createdAt == 9 && rows[0].openTaskID == nil)
        #expect(rows[2].body.contains(#""completed":4"#) && rows[2].openTaskID == "t")
    }

    @Test func attemptsAreRecordedAndOldDeliveriesPruned() throws {
        let fixture = try StoreFixture()
        let webhook = Self.webhook("a", [.created])
        try fixture.write { database in
            try WebhookRepository.insert(webhook, in: database)
            for event in 1...150 {
                try WebhookRepository.enqueue(WebhookDelivery(webhookID: "a", eventID: Int64(event), eventType: .created,
                                                              body: "{}", state: .pending, attempts: 0, createdAt: 1,
                                                              nextAttemptAt: 1), in: database)
            }
        }
        try fixture.write { database in
            try WebhookRepository.recordAttempt(webhookID: "a", eventID: 1, state: .pending, attemptAt: 2, nextAttemptAt: 9,
                                                status: 503, error: "HTTP 503", latencyMilliseconds: 7, in: database)
        }
        let retried = try fixture.read { try WebhookRepository.oldestPending(of: "a", in: $0) }
        #expect(retried?.eventID == 1 && retried?.attempts == 1 && retried?.nextAttemptAt == 9 && retried?.lastStatus == 503)
        try fixture.write { database in
            for event in 1...140 {
                try WebhookRepository.recordAttempt(webhookID: "a", eventID: Int64(event), state: .delivered, attemptAt: 3,
                                                    nextAttemptAt: 3, status: 200, error: nil, latencyMilliseconds: 1,
                                                    in: database)
            }
        }
        #expect(try fixture.write { try WebhookRepository.pruneFinished(in: $0) } == 40)
        let left = try fixture.read { try WebhookRepository.recent(of: "a", limit: 1000, in: $0) }
        #expect(left.count == 110 && left.filter { $0.state == .pending }.count == 10 && left.last?.eventID == 41)
        // A deletion in steps: the oldest first, at most as many as asked.
        #expect(try fixture.write { try WebhookRepository.deleteDeliveries(of: "a", limit: 100, in: $0) } == 100)
        let rest = try fixture.read { try WebhookRepository.recent(of: "a", limit: 1000, in: $0) }
        #expect(rest.map(\.eventID) == Array(141...150).reversed().map { Int64($0) })
        #expect(try fixture.write { try WebhookRepository.delete("a", in: $0) })
        #expect(try fixture.read { try WebhookRepository.recent(of: "a", limit: 1000, in: $0) }.isEmpty)
        #expect(try !fixture.write { try WebhookRepository.delete("a", in: $0) })
    }

    /// Tests are stored apart from the queue: never pending, never a change's place, the
    /// latest 10 kept, listed among the events' deliveries by time, and left alone by the
    /// retention of events' deliveries; a test of a webhook gone is not stored.
    @Test func testsAreKeptApartFromTheQueueAndListedByTime() throws {
        let fixture = try StoreFixture()
        try fixture.write { database in
            try WebhookRepository.insert(Self.webhook("a", [.created]), in: database)
            for event in 1...3 {
                try WebhookRepository.enqueue(WebhookDelivery(webhookID: "a", eventID: Int64(event), eventType: .created,
                                                              body: "{}", state: .pending, attempts: 0,
                                                              createdAt: Int64(event) * 1_000, nextAttemptAt: 0), in: database)
                try WebhookRepository.recordAttempt(webhookID: "a", eventID: Int64(event), state: .delivered, attemptAt: 1,
                                                    nextAttemptAt: 1, status: 200, error: nil, latencyMilliseconds: 1,
                                                    in: database)
            }
        }
        @Sendable func test(at time: EpochMilliseconds, webhook: String = "a") -> WebhookDelivery {
            WebhookDelivery(webhookID: webhook, eventID: WebhookTest.storedEventID(startedAt: time), eventType: .finished,
                            body: "{}", state: .failed, attempts: 1, createdAt: time, nextAttemptAt: time, lastAttemptAt: time,
                            lastError: "HTTP 500", lastLatencyMilliseconds: 3)
        }
        try fixture.write { database in
            for time in stride(from: Int64(1_500), through: 12_500, by: 1_000) {
                try WebhookRepository.recordTest(test(at: time), in: database)
            }
            try WebhookRepository.recordTest(test(at: 99_000, webhook: "gone"), in: database)
        }
        let listed = try fixture.read { try WebhookRepository.recent(of: "a", limit: 100, in: $0) }
        // 12 tests made, the latest 10 kept (3,500 … 12,500), placed by time among the events (1,000, 2,000, 3,000).
        #expect(listed.map(\.createdAt) == [12_500, 11_500, 10_500, 9_500, 8_500, 7_500, 6_500, 5_500, 4_500, 3_500,
                                             3_000, 2_000, 1_000])
        #expect(listed.first?.isTest == true && listed.first?.id == "a-test-12500" && listed.first?.lastError == "HTTP 500")
        #expect(try fixture.read { try WebhookRepository.oldestPending(of: "a", in: $0) } == nil)
        #expect(try fixture.write { try WebhookRepository.pruneFinished(keep: 1, in: $0) } == 2)
        let pruned = try fixture.read { try WebhookRepository.recent(of: "a", limit: 100, in: $0) }
        #expect(pruned.filter(\.isTest).count == 10 && pruned.filter { !$0.isTest }.map(\.eventID) == [3])
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = 'gone'") } == 0)
    }
}
