import Testing
@testable import HeadwayCore

/// A webhook's test (`WebhookTest`, `WebhookTestLimit`): the sample event it sends for each
/// kind of webhook, where a test is stored and listed among the deliveries, and how often
/// tests may be sent, with the time given.
struct WebhookTestTests {
    private func webhook(_ events: Set<TaskEventKind>, prefix: String? = nil, outcomes: Set<TaskState>? = nil) -> WebhookRecord {
        WebhookRecord(id: "whk_0123456789abcdef", url: "https://hooks.example.com/x",
                      filter: WebhookFilter(events: events, taskPrefix: prefix, outcomes: outcomes), format: .json,
                      secret: "whsec_x", createdAt: 0)
    }

    private func task(_ event: TaskEvent) throws -> JSONObject {
        guard case .object(let task)? = JSONValue.parse(event.data.utf8) else { throw TaskError.malformedJSON("not an object") }
        return task
    }

    @Test func aFailureWebhookGetsAFailedSampleTaskSaidToBeATest() throws {
        let event = WebhookTest.sampleEvent(for: webhook([.stalled, .finished], outcomes: [.failed, .succeeded]), now: 1_000_000)
        #expect(event.kind == .finished && event.changeNumber == 0)
        let task = try task(event)
        #expect(task["id"] == .string("headway-test") && task["name"] == .string("Headway test delivery"))
        #expect(task["state"] == .string("failed") && task["message"] == .string(WebhookTest.sampleMessage))
        #expect(task["metadata"] == .object(["headway_test": .bool(true)]))
        #expect(WebhookBody.slackText(event) == "Headway test delivery failed: \(WebhookTest.sampleMessage) — 64%, 64 of 100 items")
    }

    @Test func theSampleFollowsTheWebhooksOutcomesKindAndPrefix() throws {
        #expect(try task(WebhookTest.sampleEvent(for: webhook([.finished], outcomes: [.succeeded]), now: 5))["state"]
            == .string("succeeded"))
        let stalled = WebhookTest.sampleEvent(for: webhook([.stalled, .created], prefix: "nightly-"), now: 100_000)
        #expect(stalled.kind == .stalled && stalled.taskID == "nightly-headway-test")
        #expect(try task(stalled)["stalled"] == .bool(true))
        #expect(WebhookBody.slackText(stalled).hasPrefix("Headway test delivery stalled: no signal for "))
        let deleted = WebhookTest.sampleEvent(for: webhook([.deleted]), now: 5)
        #expect(deleted.kind == .deleted && deleted.data == #"{"id":"headway-test"}"#)
        #expect(WebhookTest.sampleEvent(for: webhook([.updated]), now: 5).kind == .updated)
    }

    @Test func aTestIsStoredBelowZeroAndSaysSoInItsID() {
        let id = WebhookTest.storedEventID(startedAt: 1_733_389_000_123)
        #expect(id == -1_733_389_000_123 && WebhookTest.storedEventID(startedAt: 1_733_389_000_124) < id)
        #expect(WebhookDelivery.id(webhookID: "whk_1", eventID: id) == "whk_1-test-1733389000123")
        #expect(WebhookDelivery.id(webhookID: "whk_1", eventID: 42) == "whk_1-42")
    }

    @Test func testsAreListedAmongTheDeliveriesByTime() {
        func delivery(_ eventID: Int64, at time: EpochMilliseconds) -> WebhookDelivery {
            WebhookDelivery(webhookID: "w", eventID: eventID, eventType: .finished, body: "", state: .delivered, attempts: 1,
                            createdAt: time, nextAttemptAt: time)
        }
        let events = [delivery(30, at: 3_000), delivery(20, at: 2_000), delivery(10, at: 1_000)]
        let tests = [delivery(-2_500, at: 2_500), delivery(-500, at: 500)]
        #expect(WebhookTest.merged(events, tests: tests, limit: 10).map(\.eventID) == [30, -2_500, 20, 10, -500])
        #expect(WebhookTest.merged(events, tests: [delivery(-9_000, at: 9_000)], limit: 2).map(\.eventID) == [-9_000, 30])
        #expect(WebhookTest.merged([], tests: tests, limit: 1).map(\.eventID) == [-2_500])
    }

    @Test func oneTestPerWebhookEveryTenSecondsAndEightAtOnce() throws {
        var limit = WebhookTestLimit()
        try limit.start("a", now: 0)
        #expect(throws: WebhookTestLimit.Refusal.tooSoon(retryAfterSeconds: 10)) { try limit.start("a", now: 1) }
        limit.finish("a")
        #expect(throws: WebhookTestLimit.Refusal.tooSoon(retryAfterSeconds: 7)) { try limit.start("a", now: 3_000) }
        try limit.start("a", now: 10_000)
        // Under way longer than the interval (a slow receiver, a long --webhook-timeout): still one at a time.
        #expect(throws: WebhookTestLimit.Refusal.tooSoon(retryAfterSeconds: 10)) { try limit.start("a", now: 60_000) }
        for index in 1..<8 { try limit.start("w\(index)", now: 60_000) }
        #expect(throws: WebhookTestLimit.Refusal.busy(retryAfterSeconds: 1)) { try limit.start("b", now: 60_000) }
        limit.finish("w1")
        try limit.start("b", now: 60_001)
    }
}
