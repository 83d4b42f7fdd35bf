import HeadwayCore
import Lifecycle
import Synchronization

/// SQL for the `webhooks` table and its outbox `webhook_deliveries` (migrations 0007, 0008, 0015).
/// Every function runs on the connection it is given; the caller decides about transactions.
public enum WebhookRepository {
    private static let webhookColumns = """
        id, url, events, task_prefix, outcomes, format, secret, created_at, chat_id, routing_key, mail_from, mail_to
        """
    private static let deliveryColumns = """
        webhook_id, event_id, event_type, body, state, attempts, created_at, next_attempt_at, last_attempt_at, \
        last_status, last_error, last_latency_ms, open_task_id, revision
        """

    /// The most webhooks stored at once.
    public static let maximumWebhooks = 100
    /// Finished (delivered or failed) deliveries kept per webhook by retention.
    public static let keptFinishedDeliveries = 100

    /// Stores a new webhook.
    public static func insert(_ webhook: WebhookRecord, in database: Database) throws(DatabaseError) {
        let destination = webhook.destination
        try database.run("INSERT INTO webhooks (\(webhookColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(webhook.id), .text(webhook.url),
            .text(webhook.filter.events.map(\.rawValue).sorted().joined(separator: ",")),
            webhook.filter.taskPrefix.map { .text($0) } ?? .null,
            webhook.filter.outcomes.map { .text($0.map(\.rawValue).sorted().joined(separator: ",")) } ?? .null,
            .text(webhook.format.rawValue), .text(webhook.secret), .integer(webhook.createdAt),
            destination.chatID.map { .text($0) } ?? .null, destination.routingKey.map { .text($0) } ?? .null,
            destination.mailFrom.map { .text($0) } ?? .null,
            destination.mailTo.isEmpty ? .null : .text(destination.mailTo.joined(separator: ",")),
        ])
    }

    /// Deletes the webhook `id` and every delivery of it left (pending ones are dropped;
    /// delete a long backlog first with `deleteDeliveries`); returns whether it existed.
    public static func delete(_ id: String, in database: Database) throws(DatabaseError) -> Bool {
        guard try database.scalar("SELECT count(*) FROM webhooks WHERE id = ?", [.text(id)]) == 1 else { return false }
        try database.run("DELETE FROM webhook_deliveries WHERE webhook_id = ?", [.text(id)])
        try database.run("DELETE FROM webhooks WHERE id = ?", [.text(id)])
        return true
    }

    /// Deletes at most `limit` deliveries of the webhook `id`, oldest first; returns how many.
    public static func deleteDeliveries(of id: String, limit: Int, in database: Database) throws(DatabaseError) -> Int {
        let before = database.totalChanges
        try database.run("""
            DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND event_id IN (
                SELECT event_id FROM webhook_deliveries WHERE webhook_id = ?1 ORDER BY event_id LIMIT ?2)
            """, [.text(id), .integer(Int64(limit))])
        return Int(database.totalChanges - before)
    }

    /// Every webhook, oldest first.
    public static func all(in database: Database) throws(DatabaseError) -> [WebhookRecord] {
        try database.rows("SELECT \(webhookColumns) FROM webhooks ORDER BY created_at, id") { row in
            let events = Set(row.text(2).split(separator: ",").compactMap { TaskEventKind(rawValue: String($0)) })
            let outcomes = row.optionalText(4).map { text in
                Set(text.split(separator: ",").compactMap { TaskState(rawValue: String($0)) })
            }
            return WebhookRecord(id: row.text(0), url: row.text(1),
                                 filter: WebhookFilter(events: events, taskPrefix: row.optionalText(3), outcomes: outcomes),
                                 format: WebhookFormat(rawValue: row.text(5)) ?? .json, secret: row.text(6),
                                 createdAt: row.int(7),
                                 destination: WebhookDestination(chatID: row.optionalText(8), routingKey: row.optionalText(9),
                                                                 mailFrom: row.optionalText(10),
                                                                 mailTo: row.optionalText(11)?.split(separator: ",").map(String.init) ?? []))
        }
    }

    /// How many webhooks are stored.
    public static func count(in database: Database) throws(DatabaseError) -> Int {
        Int(try database.scalar("SELECT count(*) FROM webhooks") ?? 0)
    }

    /// Writes a new pending delivery, due at once, unless its webhook is gone (deleted by
    /// another daemon of a shared database, whose list this daemon has not reloaded yet).
    public static func enqueue(_ delivery: WebhookDelivery, in database: Database) throws(DatabaseError) {
        try database.run("""
            INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, body, state, attempts, created_at, next_attempt_at,
                                            open_task_id)
            SELECT ?1, ?2, ?3, ?4, 'pending', 0, ?5, ?6, ?7 WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = ?1)
            """, [.text(delivery.webhookID), .integer(delivery.eventID), .text(delivery.eventType.rawValue),
                  .text(delivery.body), .integer(delivery.createdAt), .integer(delivery.nextAttemptAt),
                  delivery.openTaskID.map { .text($0) } ?? .null])
    }

    /// The open `task.updated` delivery of task `taskID` for the webhook `webhookID` — waiting
    /// unsent (pending, no attempt recorded) and the task's newest delivery for the webhook —
    /// if any: its event id and revision.
    public static func openUpdate(of taskID: String, for webhookID: String,
                                  in database: Database) throws(DatabaseError) -> (eventID: Int64, revision: Int)? {
        try database.rows("""
            SELECT event_id, revision FROM webhook_deliveries
            WHERE webhook_id = ? AND open_task_id = ? AND state = 'pending' AND attempts = 0
            LIMIT 1
            """, [.text(webhookID), .text(taskID)]) { ($0.int(0), Int($0.int(1))) }.first
    }

    /// Replaces the body of an open delivery with a newer update's, at `revision`, made at
    /// `createdAt` (the retry window counts from the newest update).
    public static func revise(webhookID: String, eventID: Int64, revision: Int, body: String, createdAt: EpochMilliseconds,
                              in database: Database) throws(DatabaseError) {
        try database.run("""
            UPDATE webhook_deliveries SET body = ?, revision = ?, created_at = ? WHERE webhook_id = ? AND event_id = ?
            """, [.text(body), .integer(Int64(revision)), .integer(createdAt), .text(webhookID), .integer(eventID)])
    }

    /// Closes the open `task.updated` delivery of task `taskID` for the webhook, if any: a
    /// later delivery of the task is being queued behind it, and a newer update written
    /// into it would overtake that one.
    public static func closeOpenUpdate(of taskID: String, for webhookID: String,
                                       in database: Database) throws(DatabaseError) {
        try database.run("""
            UPDATE webhook_deliveries SET open_task_id = NULL
            WHERE webhook_id = ? AND open_task_id = ? AND state = 'pending' AND attempts = 0
            """, [.text(webhookID), .text(taskID)])
    }

    /// The oldest pending delivery of the webhook `webhookID`, due or not.
    public static func oldestPending(of webhookID: String, in database: Database) throws(DatabaseError) -> WebhookDelivery? {
        try database.rows("""
            SELECT \(deliveryColumns) FROM webhook_deliveries
            WHERE webhook_id = ? AND state = 'pending' ORDER BY event_id LIMIT 1
            """, [.text(webhookID)], map: delivery).first
    }

    /// The webhook's latest deliveries, newest first (at most `limit`): its events' in the
    /// order of their events, its tests placed among them by time (`WebhookTest.merged`).
    public static func recent(of webhookID: String, limit: Int, in database: Database) throws(DatabaseError) -> [WebhookDelivery] {
        let events = try database.rows("""
            SELECT \(deliveryColumns) FROM webhook_deliveries WHERE webhook_id = ? AND event_id > 0
            ORDER BY event_id DESC LIMIT ?
            """, [.text(webhookID), .integer(Int64(limit))], map: delivery)
        // A test's event id is lower the newer it is (`WebhookTest.storedEventID`).
        let tests = try database.rows("""
            SELECT \(deliveryColumns) FROM webhook_deliveries WHERE webhook_id = ? AND event_id < 0
            ORDER BY event_id LIMIT ?
            """, [.text(webhookID), .integer(Int64(WebhookTest.keptTests))], map: delivery)
        return WebhookTest.merged(events, tests: tests, limit: limit)
    }

    /// Stores a test's outcome (`delivery`: its event id below zero, its state final)
    /// unless its webhook is gone, and deletes the webhook's tests beyond its latest
    /// `WebhookTest.keptTests`.
    public static func recordTest(_ delivery: WebhookDelivery, in database: Database) throws(DatabaseError) {
        guard try database.scalar("SELECT count(*) FROM webhooks WHERE id = ?", [.text(delivery.webhookID)]) == 1,
              try database.scalar("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = ? AND event_id = ?",
                                  [.text(delivery.webhookID), .integer(delivery.eventID)]) == 0 else { return }
        // VALUES, not SELECT: PostgreSQL takes each parameter's type from its column.
        try database.run("""
            INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, body, state, attempts, created_at, next_attempt_at,
                                            last_attempt_at, last_status, last_error, last_latency_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6, ?6, ?7, ?8, ?9)
            """, [.text(delivery.webhookID), .integer(delivery.eventID), .text(delivery.eventType.rawValue),
                  .text(delivery.body), .text(delivery.state.rawValue), .integer(delivery.createdAt),
                  delivery.lastStatus.map { .integer(Int64($0)) } ?? .null, delivery.lastError.map { .text($0) } ?? .null,
                  delivery.lastLatencyMilliseconds.map { .integer($0) } ?? .null])
        guard let oldestKept = try database.scalar("""
            SELECT event_id FROM webhook_deliveries WHERE webhook_id = ? AND event_id < 0
            ORDER BY event_id LIMIT 1 OFFSET ?
            """, [.text(delivery.webhookID), .integer(Int64(WebhookTest.keptTests - 1))]) else { return }
        try database.run("DELETE FROM webhook_deliveries WHERE webhook_id = ? AND event_id < 0 AND event_id > ?",
                         [.text(delivery.webhookID), .integer(oldestKept)])
    }

    /// Pending deliveries of every webhook.
    public static func pendingCount(in database: Database) throws(DatabaseError) -> Int64 {
        try database.scalar("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'") ?? 0
    }

    /// Writes the outcome of an attempt at `attemptAt` of the delivery's body at `revision`:
    /// the delivery becomes `state` (still pending: due again at `nextAttemptAt`). If a
    /// newer update replaced the body during the attempt, the newer body has not been sent:
    /// the delivery stays pending, due at `nextAttemptAt`, whatever the outcome. A delivery
    /// gone meanwhile (its webhook deleted) is left gone.
    public static func recordAttempt(webhookID: String, eventID: Int64, revision: Int = 0, state: WebhookDeliveryState,
                                     attemptAt: EpochMilliseconds, nextAttemptAt: EpochMilliseconds, status: Int?,
                                     error: String?, latencyMilliseconds: Int64,
                                     in database: Database) throws(DatabaseError) {
        try database.run("""
            UPDATE webhook_deliveries SET state = CASE WHEN revision = ?1 THEN ?2 ELSE 'pending' END,
                attempts = attempts + 1, last_attempt_at = ?3, next_attempt_at = ?4,
                last_status = ?5, last_error = ?6, last_latency_ms = ?7
            WHERE webhook_id = ?8 AND event_id = ?9 AND state = 'pending'
            """, [.integer(Int64(revision)), .text(state.rawValue), .integer(attemptAt), .integer(nextAttemptAt),
                  status.map { .integer(Int64($0)) } ?? .null, error.map { .text($0) } ?? .null,
                  .integer(latencyMilliseconds), .text(webhookID), .integer(eventID)])
    }

    /// Forgets the finished deliveries of events of each webhook beyond its latest `keep`; returns
    /// how many rows were deleted.
    public static func pruneFinished(keep: Int = keptFinishedDeliveries, in database: Database) throws(DatabaseError) -> Int {
        var deleted = 0
        let ids = try database.rows("SELECT id FROM webhooks") { $0.text(0) }
        for id in ids {
            guard let oldestKept = try database.scalar("""
                SELECT event_id FROM webhook_deliveries WHERE webhook_id = ? AND state <> 'pending' AND event_id > 0
                ORDER BY event_id DESC LIMIT 1 OFFSET ?
                """, [.text(id), .integer(Int64(keep - 1))]) else { continue }
            let before = database.totalChanges
            // Tests (event ids below zero) are thinned out apart, as each is stored (`recordTest`).
            try database.run("""
                DELETE FROM webhook_deliveries WHERE webhook_id = ? AND state <> 'pending' AND event_id > 0 AND event_id < ?
                """, [.text(id), .integer(oldestKept)])
            deleted += Int(database.totalChanges - before)
        }
        return deleted
    }

    private static func delivery(_ row: any ResultRow) -> WebhookDelivery {
        WebhookDelivery(webhookID: row.text(0), eventID: row.int(1), eventType: TaskEventKind(rawValue: row.text(2)) ?? .updated,
                        body: row.text(3), state: WebhookDeliveryState(rawValue: row.text(4)) ?? .pending,
                        attempts: Int(row.int(5)), createdAt: row.int(6), nextAttemptAt: row.int(7),
                        lastAttemptAt: row.optionalInt(8), lastStatus: row.optionalInt(9).map { Int($0) },
                        lastError: row.optionalText(10), lastLatencyMilliseconds: row.optionalInt(11),
                        openTaskID: row.optionalText(12), revision: Int(row.int(13)))
    }
}

/// The webhooks as the writer knows them, in memory, and the outbox rows each change
/// writes for them in its own transaction. Loaded at start and again whenever a webhook is
/// made or deleted (on a database other daemons share, also when the maintenance thread
/// sees the table change), so a change with no webhook to tell costs one uncontended lock.
/// Changes that wrote deliveries raise a flag that the writer's batch observer takes
/// after the commit, to wake the delivery thread (`takeWritten`).
public final class WebhookOutbox: Sendable {
    /// Written by the writer's thread (a webhook made or deleted); read by the dispatcher's and the API's threads.
    private let webhooks = Locked<[WebhookRecord]>([])
    private let wroteDeliveries = Atomic(false)
    /// The first `--public-url`, if any: alerts link to the task's page under it.
    public let site: String?

    public init(site: String? = nil) { self.site = site }

    /// Replaces the webhooks known (as read in the transaction of their change, or at start).
    public func load(_ webhooks: [WebhookRecord]) { self.webhooks.withLock { $0 = webhooks } }

    /// The webhooks known now.
    public var current: [WebhookRecord] { webhooks.withLock { $0 } }

    /// Whether any webhook is known now.
    public var hasWebhooks: Bool { webhooks.withLock { !$0.isEmpty } }

    /// Stops writing deliveries for the webhook `id` (its deletion has begun).
    public func forget(_ id: String) { webhooks.withLock { $0.removeAll { $0.id == id } } }

    /// Whether a change wrote deliveries since the last call (the writer's batch observer
    /// asks after each batch, then wakes the delivery thread).
    public func takeWritten() -> Bool {
        wroteDeliveries.load(ordering: .relaxed) && wroteDeliveries.exchange(false, ordering: .acquiringAndReleasing)
    }

    /// Writes one pending delivery per event and matching webhook, in the caller's
    /// transaction; `now` is when the change happened. A `task.updated` whose task's newest
    /// delivery for the webhook is a `task.updated` waiting unsent replaces that one's body
    /// instead (`WebhookRepository.openUpdate`): updates coalesce, so a receiver slower than
    /// them does not grow the outbox without bound. Any other delivery of the task closes
    /// that open one first, so that no later update overtakes it. An alert's delivery
    /// (`AlertContext.applies`) carries its context, read here, in the transaction of the
    /// change (`context`): `task` gives a task as the change left it (the writer's cache),
    /// by default as stored.
    public func record(_ events: [TaskEvent], now: EpochMilliseconds, in database: Database,
                       task: (String) throws -> TaskRecord? = { _ in nil }) throws {
        let webhooks = self.webhooks.withLock { $0 }
        guard !webhooks.isEmpty, !events.isEmpty else { return }
        var wrote = false
        for event in events {
            var state: TaskState?? = .none
            var context: AlertContext?? = .none
            for webhook in webhooks where webhook.filter.mayMatch(kind: event.kind, taskID: event.taskID) {
                if event.kind == .finished, webhook.filter.outcomes != nil {
                    if state == nil { state = .some(Self.state(of: event)) }
                    guard webhook.filter.matches(kind: event.kind, taskID: event.taskID, state: state!) else { continue }
                }
                if context == nil {
                    context = .some(AlertContext.applies(to: event)
                        ? try self.context(of: event, now: now, in: database, task: task) : nil)
                }
                let shownContext = context!.map { $0.visible(within: webhook.filter.taskPrefix) }
                // A webhook limited to a prefix shows a task's parent outside it as null,
                // as a token with that prefix sees the task.
                let shown = event.hidingParent(outside: webhook.filter.taskPrefix)
                if event.kind == .updated,
                   let open = try WebhookRepository.openUpdate(of: event.taskID, for: webhook.id, in: database) {
                    let revision = open.revision + 1
                    let id = WebhookDelivery.id(webhookID: webhook.id, eventID: open.eventID, revision: revision)
                    guard let body = WebhookBody.render(for: webhook, deliveryID: id, event: shown, occurredAt: now,
                                                        context: shownContext, site: site) else { continue }
                    try WebhookRepository.revise(webhookID: webhook.id, eventID: open.eventID, revision: revision,
                                                 body: body, createdAt: now, in: database)
                } else {
                    let id = WebhookDelivery.id(webhookID: webhook.id, eventID: event.changeNumber)
                    guard let body = WebhookBody.render(for: webhook, deliveryID: id, event: shown, occurredAt: now,
                                                        context: shownContext, site: site) else { continue }
                    if event.kind != .updated {
                        try WebhookRepository.closeOpenUpdate(of: event.taskID, for: webhook.id, in: database)
                    }
                    try WebhookRepository.enqueue(WebhookDelivery(webhookID: webhook.id, eventID: event.changeNumber,
                                                                  eventType: event.kind, body: body, state: .pending,
                                                                  attempts: 0, createdAt: now, nextAttemptAt: now,
                                                                  openTaskID: event.kind == .updated ? event.taskID : nil),
                                                  in: database)
                }
                wrote = true
            }
        }
        if wrote { wroteDeliveries.store(true, ordering: .releasing) }
    }

    /// The most ancestors an alert names (the tree's depth is bounded lower: `TreeLimits`).
    static let maximumAncestors = 64

    /// The context of an alert about the event's task: its ancestors (through `task`, else
    /// as stored), its last output lines, how long it ran, its page under `site`.
    private func context(of event: TaskEvent, now: EpochMilliseconds, in database: Database,
                         task: (String) throws -> TaskRecord?) throws -> AlertContext {
        var parents: [AlertContext.Ancestor] = []
        var next = event.parentID
        while let id = next, parents.count < Self.maximumAncestors,
              let ancestor = try task(id) ?? TaskRepository.find(id, in: database) {
            parents.append(AlertContext.Ancestor(id: ancestor.id, name: ancestor.name))
            next = ancestor.parentID
        }
        return AlertContext(parents: parents.reversed(),
                            output: try TaskOutput.lastLines(of: event.taskID, count: AlertContext.outputLines, in: database),
                            ranSeconds: Double((event.finishedAt ?? now) - event.createdAt) / 1000,
                            link: site.map { AlertContext.link(base: $0, taskID: event.taskID) })
    }

    /// The state of the task in an event's data.
    private static func state(of event: TaskEvent) -> TaskState? {
        guard case .object(let task)? = JSONValue.parse(event.data.utf8), case .string(let state)? = task["state"] else {
            return nil
        }
        return TaskState(rawValue: state)
    }
}
