/// A test of a webhook (`POST /v1/webhooks/{id}/test`): one event about a sample task,
/// sent at once in the webhook's format and signed like every delivery, so a person can
/// see that the receiver takes it, without waiting for a real task to fail.
public enum WebhookTest {
    /// The id of the sample task (after the webhook's task prefix, if it has one, so that
    /// a receiver routing on the prefix routes the test too).
    public static let sampleTaskID = "headway-test"
    /// The sample task's name: says, in whatever format shows it, that this is a test.
    public static let sampleTaskName = "Headway test delivery"
    /// The sample task's message.
    public static let sampleMessage = "This is a test sent from Headway; no task ran."

    /// The kinds of event a test stands for, most telling first: a test sends the first of
    /// them the webhook is told about (else its first kind in the order of `TaskEventKind`).
    static let preferredKinds: [TaskEventKind] = [.finished, .stalled, .recovered, .cancelRequested, .created, .updated,
                                                  .deleted]

    /// The sample event a test of `webhook` sends at `now`: an event of a kind the webhook
    /// is told about, about a sample task in the state that event reports (for
    /// `task.finished`, the first of failed, succeeded, canceled its outcomes allow). Its
    /// change number is 0: no change happened.
    public static func sampleEvent(for webhook: WebhookRecord, now: EpochMilliseconds) -> TaskEvent {
        let filter = webhook.filter
        let kind = preferredKinds.first(where: filter.events.contains)
            ?? TaskEventKind.allCases.first(where: filter.events.contains) ?? .finished
        let id = String(((filter.taskPrefix ?? "") + sampleTaskID).prefix(Limits.idLength))
        let startedAt = now - 754_000
        var task = TaskRecord(id: id, name: sampleTaskName, completed: 64, total: 100, unit: "items",
                              createdAt: startedAt, updatedAt: now, lastSignalAt: now, lastProgressAt: now,
                              metadata: #"{"headway_test":true}"#)
        task.startedAt = startedAt
        task.changeNumber = 0
        switch kind {
        case .finished:
            let outcome = [TaskState.failed, .succeeded, .canceled].first { filter.outcomes?.contains($0) ?? true } ?? .failed
            task.state = outcome
            if outcome == .succeeded { task.completed = 100 }
            task.finishedAt = now
            task.message = sampleMessage
        case .stalled:
            task.stalled = true
            task.stallReason = .silent
            task.lastSignalAt = now - 42_000
            task.stalledSince = now - 12_000
        case .cancelRequested:
            task.cancelRequested = true
        default:
            task.message = sampleMessage
        }
        if kind == .deleted {
            return TaskEvent.deleted(changeNumber: 0, taskID: id, parentID: nil, createdAt: startedAt)
        }
        return TaskEvent(kind, task)
    }

    /// The event id under which a test started at `startedAt` is stored among the
    /// webhook's deliveries: below zero (change numbers start at 1), so a test never takes
    /// a real event's place in the queue, and the newer the test, the lower.
    public static func storedEventID(startedAt: EpochMilliseconds) -> Int64 { -max(1, startedAt) }

    /// Tests kept per webhook (older ones are deleted when a new one is stored).
    public static let keptTests = 10

    /// The latest `limit` of a webhook's deliveries, newest first: `events`, its real
    /// deliveries in their listing order (newest event first), with `tests` (newest first)
    /// each placed before the first real delivery made before it.
    public static func merged(_ events: [WebhookDelivery], tests: [WebhookDelivery], limit: Int) -> [WebhookDelivery] {
        var merged: [WebhookDelivery] = []
        merged.reserveCapacity(min(limit, events.count + tests.count))
        var waiting = tests[...]
        for delivery in events {
            while let test = waiting.first, test.createdAt >= delivery.createdAt {
                merged.append(test)
                waiting = waiting.dropFirst()
            }
            merged.append(delivery)
        }
        merged.append(contentsOf: waiting)
        return Array(merged.prefix(limit))
    }
}

extension WebhookDelivery {
    /// Whether this is a test (`POST /v1/webhooks/{id}/test`), not an event's delivery.
    public var isTest: Bool { eventID < 0 }
}

/// How often tests may be sent: one test of a webhook at a time and at most one per
/// `interval`, and at most `maximumInFlight` tests of all webhooks under way at once, so
/// that a test cannot be used to flood a receiver, nor (its outcome and duration being
/// shown) to probe a network at a rate. Pure: the caller gives the time and keeps it
/// under a lock.
public struct WebhookTestLimit: Sendable {
    /// Why a test may not start now.
    public enum Refusal: Error, Equatable, Sendable {
        /// A test of this webhook is under way, or started less than `interval` ago: the
        /// next may start in `retryAfterSeconds`.
        case tooSoon(retryAfterSeconds: Int)
        /// `maximumInFlight` tests of other webhooks are under way.
        case busy(retryAfterSeconds: Int)
    }

    /// The least time between two tests of a webhook, in milliseconds.
    public var intervalMilliseconds: Int64
    /// The most tests under way at once.
    public var maximumInFlight: Int
    /// When each webhook's latest test started (entries older than the interval are dropped).
    private var startedAt: [String: EpochMilliseconds] = [:]
    /// The webhooks with a test under way.
    private var underWay: Set<String> = []

    public init(intervalMilliseconds: Int64 = 10_000, maximumInFlight: Int = 8) {
        self.intervalMilliseconds = intervalMilliseconds
        self.maximumInFlight = maximumInFlight
    }

    /// Starts a test of the webhook `id` at `now`, or says why it may not start.
    public mutating func start(_ id: String, now: EpochMilliseconds) throws(Refusal) {
        startedAt = startedAt.filter { now - $0.value < intervalMilliseconds || underWay.contains($0.key) }
        let intervalSeconds = Int((intervalMilliseconds + 999) / 1000)
        if underWay.contains(id) { throw .tooSoon(retryAfterSeconds: intervalSeconds) }
        if let last = startedAt[id] {
            throw .tooSoon(retryAfterSeconds: max(1, Int((last + intervalMilliseconds - now + 999) / 1000)))
        }
        guard underWay.count < maximumInFlight else { throw .busy(retryAfterSeconds: 1) }
        startedAt[id] = now
        underWay.insert(id)
    }

    /// The test of the webhook `id` has ended (its outcome is known).
    public mutating func finish(_ id: String) { underWay.remove(id) }
}
