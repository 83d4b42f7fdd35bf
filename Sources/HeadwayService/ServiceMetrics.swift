import Foundation
import HTTPServer
import Lifecycle
import HeadwayCore
import HeadwayStore
import Synchronization

/// What the daemon counts as it works, for `GET /metrics`. Each part is bumped where the
/// thing happens (the access-log middleware, the update handlers, the broker thread, the
/// writer's batch observer, retention); gauges (tasks, subscribers, queue depth, file
/// sizes) are read at scrape time instead.
final class ServiceMetrics: Sendable {
    /// HTTP exchanges by method, route pattern and status.
    let httpRequests = LabeledCounters<HTTPExchangeLabels>()
    /// How long exchanges took, by route pattern (an event stream: how long it lasted).
    let httpDuration = Histograms<RouteLabel>(bounds: secondsBuckets)
    /// Updates (progress, heartbeat, finish) stored, by kind.
    let updatesAccepted = LabeledCounters<UpdateKind>()
    /// Updates refused, by kind and problem code.
    let updatesRefused = LabeledCounters<[String]>()
    /// Counts of the event broker.
    let events = EventCounters()
    /// Jobs per committed batch of the writer.
    let batchSize = Histograms<NoLabels>(bounds: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    /// From `BEGIN IMMEDIATE` to the end of `COMMIT`, per batch.
    let commitDuration = Histograms<NoLabels>(bounds: secondsBuckets)
    /// Each WAL checkpoint the writer ran after a batch (SQLite).
    let checkpointDuration = Histograms<NoLabels>(bounds: secondsBuckets)
    /// Batches that could not be stored.
    let batchesFailed = MetricCounter()
    /// Rows forgotten by retention.
    let retentionPruned = MetricCounter()
    /// Webhook delivery attempts by result.
    let webhookAttempts = WebhookDispatcher.Counters()

    /// The series whose labels are known in advance start at 0, so `rate()` and alerts see
    /// them before the first event.
    init() {
        for kind in UpdateKind.allCases { updatesAccepted.add(kind, 0) }
        for reason in ["bytes", "pending_tasks", "stalled"] { events.cutOff.add([reason], 0) }
    }

    /// The writer's observer: one batch over.
    func observe(_ batch: GroupCommitWriter.BatchReport) {
        if batch.committed {
            batchSize.observe(Double(batch.jobs))
            commitDuration.observe(batch.seconds)
        } else {
            batchesFailed.add()
        }
    }

    /// The writer's observer: one checkpoint over, which took `seconds`.
    func observeCheckpoint(seconds: Double) {
        checkpointDuration.observe(seconds)
    }

    /// What is read at scrape time, beside the counters.
    struct Gauges {
        var tasks: [TaskCount] = []
        var subscribers = 0
        var catchUpBytes = 0
        var writerQueueDepth = 0
        var databaseBytes: Int64 = 0
        var walBytes: Int64 = 0
        var schemaVersion = 0
        var webhookDeliveriesPending: Int64 = 0
        var unsentReplyBytes = 0
    }

    /// The whole exposition.
    func render(_ gauges: Gauges) -> String {
        var out = PrometheusText()
        out.family("headway_build_info", .gauge, "Always 1; the labels name the build.")
        out.sample("headway_build_info", ["version": HeadwayVersion.current], 1)
        out.family("headway_schema_version", .gauge, "Schema version recorded in the database.")
        out.sample("headway_schema_version", [:], Double(gauges.schemaVersion))

        out.family("headway_tasks", .gauge, "Tasks stored, by state and mode (from the counts the triggers keep).")
        var byStateAndMode: [String: Int64] = [:]
        var stalledByReason: [StallReason: Int64] = [:]
        for row in gauges.tasks {
            byStateAndMode[row.state + " " + row.mode.rawValue, default: 0] += row.count
            if let reason = row.stallReason { stalledByReason[reason, default: 0] += row.count }
        }
        for state in TaskState.allCases {
            for mode in TaskMode.allCases {
                out.sample("headway_tasks", ["state": state.rawValue, "mode": mode.rawValue],
                           Double(byStateAndMode[state.rawValue + " " + mode.rawValue] ?? 0))
            }
        }
        out.family("headway_tasks_stalled", .gauge,
                   "Tasks flagged stalled now, by reason (silent: no signal; no_progress: signals but no progress).")
        for reason in StallReason.allCases {
            out.sample("headway_tasks_stalled", ["reason": reason.rawValue], Double(stalledByReason[reason] ?? 0))
        }

        out.counters("headway_updates_accepted_total", "Updates stored (progress, heartbeat, finish), by kind.",
                     labels: ["kind"], updatesAccepted.values)
        out.counters("headway_updates_refused_total", "Updates refused, by kind and problem code.",
                     labels: ["kind", "code"], updatesRefused.values)

        out.family("headway_event_subscribers", .gauge, "Event-stream subscribers connected.")
        out.sample("headway_event_subscribers", [:], Double(gauges.subscribers))
        out.family("headway_catch_up_bytes", .gauge,
                   "Bytes of event-stream catch-ups held in memory (--max-catch-up-bytes bounds them).")
        out.sample("headway_catch_up_bytes", [:], Double(gauges.catchUpBytes))
        out.family("headway_events_sent_total", .counter,
                   "Events carried by the broker's fan-out rounds (each once, however many subscribers).")
        out.sample("headway_events_sent_total", [:], Double(events.sent.value))
        out.family("headway_events_coalesced_total", .counter,
                   "Events replaced by a later event of their task before fan-out (the broker was behind).")
        out.sample("headway_events_coalesced_total", [:], Double(events.coalesced.value))
        out.counters("headway_event_subscribers_cut_off_total", "Subscribers disconnected for being too slow, by reason.",
                     labels: ["reason"], events.cutOff.values)

        out.counters("headway_http_requests_total", "HTTP exchanges over, by method, route pattern and status "
                     + "(route \"unmatched\" when none matched; status 0 when the client left first).",
                     labels: ["method", "route", "status"], httpRequests.values)
        out.histograms("headway_http_request_duration_seconds",
                       "From the request head to the end of the response (an event stream: its whole life), by route.",
                       labels: ["route"], httpDuration.snapshot)

        out.histograms("headway_writer_batch_size", "Jobs per committed batch of the group-commit writer.",
                       labels: [], batchSize.snapshot)
        out.histograms("headway_writer_commit_duration_seconds",
                       "Time from BEGIN IMMEDIATE to the end of COMMIT, per committed batch.",
                       labels: [], commitDuration.snapshot)
        out.histograms("headway_writer_checkpoint_duration_seconds",
                       "Time of each WAL checkpoint the writer runs after a batch whose commit left 1,000 pages in the WAL "
                       + "(SQLite; the next batch waits for it).",
                       labels: [], checkpointDuration.snapshotFromZero)
        out.family("headway_writer_batches_failed_total", .counter, "Batches that could not be stored.")
        out.sample("headway_writer_batches_failed_total", [:], Double(batchesFailed.value))
        out.family("headway_writer_queue_depth", .gauge, "Jobs waiting for the writer now.")
        out.sample("headway_writer_queue_depth", [:], Double(gauges.writerQueueDepth))

        out.family("headway_database_size_bytes", .gauge, "Size of the database file.")
        out.sample("headway_database_size_bytes", [:], Double(gauges.databaseBytes))
        out.family("headway_database_wal_size_bytes", .gauge, "Size of the write-ahead log (-wal) file.")
        out.sample("headway_database_wal_size_bytes", [:], Double(gauges.walBytes))
        out.family("headway_retention_pruned_rows_total", .counter, "Rows forgotten by retention.")
        out.sample("headway_retention_pruned_rows_total", [:], Double(retentionPruned.value))
        out.family("headway_webhook_attempts_total", .counter,
                   "Webhook delivery attempts, by result (delivered; retried later; failed: given up).")
        out.sample("headway_webhook_attempts_total", ["result": "delivered"], Double(webhookAttempts.delivered.value))
        out.sample("headway_webhook_attempts_total", ["result": "retried"], Double(webhookAttempts.retried.value))
        out.sample("headway_webhook_attempts_total", ["result": "failed"], Double(webhookAttempts.failed.value))
        out.family("headway_webhook_deliveries_pending", .gauge, "Webhook deliveries not delivered or given up yet.")
        out.sample("headway_webhook_deliveries_pending", [:], Double(gauges.webhookDeliveriesPending))
        out.family("headway_unsent_reply_bytes", .gauge,
                   "Bytes of replies that their clients have not taken yet (--max-unsent-reply-bytes).")
        out.sample("headway_unsent_reply_bytes", [:], Double(gauges.unsentReplyBytes))
        return out.text
    }

    /// The size of the file at `path`, 0 if there is none.
    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }
}

/// The kinds of update a runner sends, as counted.
enum UpdateKind: Int, CaseIterable, MetricLabels {
    case progress, heartbeat, finish

    var name: String { ["progress", "heartbeat", "finish"][rawValue] }
    var labelValues: [String] { [name] }
}

/// An HTTP method as labelled: one the router may serve, else `other` (a client may send
/// any token as a method; a label must not grow with what clients send).
enum MethodLabel: Int, MetricLabels {
    case get, head, post, put, delete, patch, options, other

    init(_ method: String) {
        switch method {
        case "GET": self = .get
        case "HEAD": self = .head
        case "POST": self = .post
        case "PUT": self = .put
        case "DELETE": self = .delete
        case "PATCH": self = .patch
        case "OPTIONS": self = .options
        default: self = .other
        }
    }

    var name: String { ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"][rawValue] }
    var labelValues: [String] { [name] }
}

/// The route pattern an exchange matched (`unmatched` when none did).
struct RouteLabel: MetricLabels {
    var route: RoutePattern?

    var labelValues: [String] { [route?.text ?? "unmatched"] }
}

/// One series of `headway_http_requests_total`: method, route pattern, status.
struct HTTPExchangeLabels: MetricLabels {
    var method: MethodLabel
    var route: RouteLabel
    var status: Int

    var labelValues: [String] { method.labelValues + route.labelValues + [String(status)] }
}

/// What the event broker counts (bumped on its thread).
final class EventCounters: Sendable {
    let sent = MetricCounter()
    let coalesced = MetricCounter()
    /// By reason (`bytes`, `pending_tasks`, `stalled`).
    let cutOff = LabeledCounters<[String]>()
}

/// Whether the database takes writes, as the latest probe found it: a probe is a writer
/// job that rewrites one header field with its own value (`Database.probeWrite`), run at
/// most once per `interval` however often `/readyz` is asked (group commit merges the
/// probes of one moment into one batch anyway).
final class WriteProbe: Sendable {
    /// Why a probe found the database taking no writes.
    enum Failure: Sendable, Equatable {
        /// Another process holds the write lock: the writer waits for it.
        case busy
        /// The write failed (a full disk, a read-only file…), as said.
        case failed(String)
    }

    private struct Outcome {
        var at: UInt64
        var failure: Failure?
    }

    let interval: UInt64 = 1_000_000_000
    /// Shared by the read threads answering `/readyz` and the writer's thread (a probe's outcome).
    private let latest = Locked<Outcome?>(nil)

    /// The latest outcome if it is recent enough (nil: probe again), as a failure or nil.
    func recent(now: UInt64) -> Failure?? {
        latest.withLock { outcome in
            guard let outcome, now &- outcome.at < interval else { return nil }
            return .some(outcome.failure)
        }
    }

    func record(_ failure: Failure?, now: UInt64) { latest.withLock { $0 = Outcome(at: now, failure: failure) } }
}

/// Passes on the first answer given, and drops the later ones.
private final class AnswerOnce: Sendable {
    private let responder: any Responder
    private let answered = Atomic<Bool>(false)

    init(_ responder: any Responder) { self.responder = responder }

    func respond(_ response: HTTPResponse) {
        if !answered.exchange(true, ordering: .acquiringAndReleasing) { responder.respond(response) }
    }
}

/// The routes operators' tools read: `GET /healthz` (alive: answers without touching the
/// database), `GET /readyz` (ready for traffic: the database answers, carries the schema
/// this build migrates to, and takes writes: `WriteProbe`) and `GET /metrics` (Prometheus
/// text, `read` scope).
struct OperationsAPI: Sendable {
    let metrics: ServiceMetrics
    let probe = WriteProbe()
    let writer: GroupCommitWriter
    let reads: ReadPool
    let broker: EventBroker
    let catchUpBudget: CatchUpBudget
    let databasePath: String
    let errors: ErrorReplies
    /// The replies not yet taken by their clients.
    let unreadReplies: UnreadReplies

    func register(in routes: inout ServiceRoutes) {
        routes.add("GET", "/healthz", .public) { _, _, responder in
            responder.respond(.json(200, #"{"status":"ok"}"#, headers: [HTTPField("Cache-Control", "no-store")]))
        }
        routes.add("GET", "/readyz", .public) { request, _, responder in ready(request, responder) }
        routes.add("GET", "/metrics", .scope(.read)) { request, grant, responder in
            // Every metric describes the whole daemon, every prefix's tasks and traffic:
            // a token limited to a prefix reads none of them.
            if let prefix = grant.taskPrefix { return responder.respond(Problem.metricsNeedAllPrefixes(prefix).response) }
            scrape(request, responder)
        }
    }

    private func ready(_ request: HTTPRequest, _ responder: any Responder) {
        read(request, responder) { [writer, probe] reader in
            let latest = Migrator(forLocation: databasePath).latestVersion
            let version: Int
            do {
                version = try reader.schemaVersion()
            } catch {
                return Problem.notReady("The database cannot be read: \(error).").response
            }
            guard version == latest else {
                return Problem.notReady("The database's schema version is \(version); this build needs \(latest).").response
            }
            let answer = { @Sendable (failure: WriteProbe.Failure?) -> HTTPResponse in
                switch failure {
                case nil:
                    .json(200, #"{"status":"ready","schema_version":\#(version)}"#, headers: [HTTPField("Cache-Control", "no-store")])
                case .busy: Problem.writeLockHeld.response
                case .failed(let failure): Problem.notReady("The database takes no writes: \(failure).").response
                }
            }
            if let recent = probe.recent(now: DispatchTime.now().uptimeNanoseconds) { return answer(recent) }
            // A probe does not wait out a lock another process holds (the writer waits up to
            // the busy timeout): while the writer has waited long for one, the answer is
            // known at once, and so it is when the probe's own batch has waited long.
            let once = AnswerOnce(responder)
            guard let listener = writer.lockWaits.whenAWaitIsLong({ once.respond(answer(.busy)) }) else {
                return answer(.busy)
            }
            writer.submit({ database in try database.probeWrite() }) { [writer] result in
                writer.lockWaits.forget(listener)
                var failure: WriteProbe.Failure?
                if case .failure(let error) = result {
                    failure = (error as? DatabaseError)?.isBusy == true ? .busy : .failed("\(error)")
                }
                probe.record(failure, now: DispatchTime.now().uptimeNanoseconds)
                once.respond(answer(failure))
            }
            return nil
        }
    }

    private func scrape(_ request: HTTPRequest, _ responder: any Responder) {
        read(request, responder) { [metrics, writer, broker, catchUpBudget, databasePath, unreadReplies] reader in
            var gauges = ServiceMetrics.Gauges()
            gauges.unsentReplyBytes = unreadReplies.totalBytes
            try reader.snapshot { database in
                gauges.tasks = try database.taskCountsByStateModeAndStall()
                gauges.schemaVersion = try Migrator.recordedVersion(in: database)
                gauges.webhookDeliveriesPending = try WebhookRepository.pendingCount(in: database)
                if database.isPostgres {
                    // The server's own count of the database's files; its WAL is the server's.
                    gauges.databaseBytes = try database.scalar("SELECT pg_database_size(current_database())") ?? 0
                }
            }
            gauges.subscribers = broker.subscriberCount
            gauges.catchUpBytes = catchUpBudget.usedBytes
            gauges.writerQueueDepth = writer.queueDepth
            if !isPostgresLocation(databasePath) {
                gauges.databaseBytes = ServiceMetrics.fileSize(databasePath)
                gauges.walBytes = ServiceMetrics.fileSize(databasePath + "-wal")
            }
            return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", PrometheusText.contentType),
                                                       HTTPField("Cache-Control", "no-store")],
                                body: Array(metrics.render(gauges).utf8))
        }
    }

    private func read(_ request: HTTPRequest, _ responder: any Responder,
                      _ body: @escaping @Sendable (DatabaseReader) throws -> HTTPResponse?) {
        reads.answer(request, responder, errors: errors, body)
    }
}

extension Problem {
    /// `/metrics` asked with a token limited to the task prefix `prefix`.
    static func metricsNeedAllPrefixes(_ prefix: String) -> Problem {
        Problem(status: 403, code: "prefix_not_allowed", title: "Task prefix not allowed",
                detail: "The metrics count every task and request of the daemon, of every prefix; this token may only see "
                    + "tasks whose id starts with '\(prefix)'. Scrape /metrics with a read token without a task prefix; "
                    + "count the prefix's tasks with GET /v1/tasks (total_size).")
    }
}
