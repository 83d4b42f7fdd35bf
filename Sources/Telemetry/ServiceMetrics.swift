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
package final class ServiceMetrics: Sendable {
    /// HTTP exchanges by method, route pattern and status.
    let httpRequests = LabeledCounters<HTTPExchangeLabels>()
    /// How long exchanges took, by route pattern (an event stream: how long it lasted).
    let httpDuration = Histograms<RouteLabel>(bounds: secondsBuckets)
    /// Updates (progress, heartbeat, finish) stored, by kind.
    package let updatesAccepted = LabeledCounters<UpdateKind>()
    /// Updates refused, by kind and problem code.
    package let updatesRefused = LabeledCounters<[String]>()
    /// Counts of the event broker.
    package let events = EventCounters()
    /// Jobs per committed batch of the writer.
    let batchSize = Histograms<NoLabels>(bounds: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    /// From `BEGIN IMMEDIATE` to the end of `COMMIT`, per batch.
    let commitDuration = Histograms<NoLabels>(bounds: secondsBuckets)
    /// Each WAL checkpoint the writer ran after a batch (SQLite).
    let checkpointDuration = Histograms<NoLabels>(bounds: secondsBuckets)
    /// Batches that could not be stored.
    let batchesFailed = MetricCounter()
    /// Rows forgotten by retention.
    package let retentionPruned = MetricCounter()
    /// Webhook delivery attempts by result.
    package let webhookAttempts = WebhookAttemptCounters()
    /// Run-time flags raised by this daemon (`overdue`, `too_quick`), by flag.
    package let tasksFlagged = LabeledCounters<[String]>()

    /// The series whose labels are known in advance start at 0, so `rate()` and alerts see
    /// them before the first event.
    package init() {
        for kind in UpdateKind.allCases { updatesAccepted.add(kind, 0) }
        for reason in ["bytes", "pending_tasks", "stalled"] { events.cutOff.add([reason], 0) }
        for flag in Self.runTimeFlags.values { tasksFlagged.add([flag], 0) }
    }

    /// The flag each run-time event raises, as `headway_tasks_flagged_total` labels it.
    private static let runTimeFlags: [TaskEventKind: String] = [.overdue: "overdue", .tooQuick: "too_quick"]

    /// Counts the run-time flags among the events of changes this daemon committed (its
    /// sweeps and finishes; not other daemons' changes it relays).
    package func countFlags(_ events: [TaskEvent]) {
        for event in events { if let flag = Self.runTimeFlags[event.kind] { tasksFlagged.add([flag]) } }
    }

    /// The writer's observer: one batch over.
    package func observe(_ batch: GroupCommitWriter.BatchReport) {
        if batch.committed {
            batchSize.observe(Double(batch.jobs))
            commitDuration.observe(batch.seconds)
        } else {
            batchesFailed.add()
        }
    }

    /// The writer's observer: one checkpoint over, which took `seconds`.
    package func observeCheckpoint(seconds: Double) {
        checkpointDuration.observe(seconds)
    }

    /// What is read at scrape time, beside the counters.
    package struct Gauges {
        package var tasks: [TaskCount] = []
        package var subscribers = 0
        package var catchUpBytes = 0
        package var writerQueueDepth = 0
        package var databaseBytes: Int64 = 0
        package var walBytes: Int64 = 0
        package var schemaVersion = 0
        package var webhookDeliveriesPending: Int64 = 0
        /// Unfinished tasks flagged overdue.
        package var overdueTasks: Int64 = 0
        package var unsentReplyBytes = 0
        /// Whether the gauges read from the database (tasks, schema version, sizes, pending
        /// deliveries) were read: not while the database is unavailable, when they are left
        /// out rather than shown as zeros.
        package var readFromDatabase = true
        /// Whether the writer reached the database the last time it tried.
        package var databaseAvailable = true
        /// Seconds the writer found the database unavailable, in all.
        package var databaseUnavailableSeconds = 0.0
        /// Connections to the database made again after the server dropped them.
        package var databaseReconnects = 0
        /// Seconds the writer's batches held the lock that orders all writers' batches, in
        /// all (PostgreSQL only: nil leaves the counter out).
        package var orderingLockSeconds: Double?
        /// Batches run again because another daemon wrote a task they read before they
        /// took their place in the order (PostgreSQL only: nil leaves the counter out).
        package var orderingReruns: Int?

        package init() {}
    }

    /// The whole exposition.
    package func render(_ gauges: Gauges) -> String {
        var out = PrometheusText()
        out.family("headway_build_info", .gauge, "Always 1; the labels name the build.")
        out.sample("headway_build_info", ["version": HeadwayVersion.current], 1)
        if gauges.readFromDatabase { renderTaskCounts(gauges, into: &out) }
        renderActivity(gauges, into: &out)
        return out.text
    }

    /// The schema version and the counts of tasks, read from the database.
    private func renderTaskCounts(_ gauges: Gauges, into out: inout PrometheusText) {
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
        out.family("headway_tasks_overdue", .gauge,
                   "Unfinished tasks flagged overdue now (past expected_seconds from their start, or past their deadline).")
        out.sample("headway_tasks_overdue", [:], Double(gauges.overdueTasks))
    }

    /// Everything counted in memory, and the gauges of the database's size and deliveries
    /// (when they were read).
    private func renderActivity(_ gauges: Gauges, into out: inout PrometheusText) {
        out.counters("headway_tasks_flagged_total",
                     "Run-time flags raised (overdue: past the due moment unfinished; too_quick: succeeded sooner than "
                     + "min_seconds), by flag.", labels: ["flag"], tasksFlagged.values)

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
        out.family("headway_event_fanout_laps_total", .counter,
                   "Fan-out laps ended (a lap hands every subscriber, in one write, what it has not had).")
        out.sample("headway_event_fanout_laps_total", [:], Double(events.laps.value))
        out.family("headway_event_fanout_lap_seconds_total", .counter,
                   "Time the fan-out laps took, from their first subscriber to their last.")
        out.sample("headway_event_fanout_lap_seconds_total", [:], Double(events.lapNanoseconds.value) / 1e9)
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

        if gauges.readFromDatabase {
            out.family("headway_database_size_bytes", .gauge, "Size of the database file.")
            out.sample("headway_database_size_bytes", [:], Double(gauges.databaseBytes))
            out.family("headway_database_wal_size_bytes", .gauge, "Size of the write-ahead log (-wal) file.")
            out.sample("headway_database_wal_size_bytes", [:], Double(gauges.walBytes))
        }
        out.family("headway_database_available", .gauge,
                   "1 when the writer reached the database the last time it tried, 0 while it cannot (PostgreSQL "
                   + "down or restarting: writes are answered 503 database_unavailable).")
        out.sample("headway_database_available", [:], gauges.databaseAvailable ? 1 : 0)
        out.family("headway_database_unavailable_seconds_total", .counter,
                   "Seconds the writer found the database unavailable, the episode under way included.")
        out.sample("headway_database_unavailable_seconds_total", [:], gauges.databaseUnavailableSeconds)
        out.family("headway_database_reconnects_total", .counter,
                   "Connections to the database made again after the server dropped them (a restart, "
                   + "pg_terminate_backend), of every part of the daemon.")
        out.sample("headway_database_reconnects_total", [:], Double(gauges.databaseReconnects))
        if let orderingLockSeconds = gauges.orderingLockSeconds {
            out.family("headway_ordering_lock_seconds_total", .counter,
                       "Seconds the writer's batches held the lock that orders all daemons' changes (PostgreSQL), "
                       + "from taking it to the end of COMMIT.")
            out.sample("headway_ordering_lock_seconds_total", [:], orderingLockSeconds)
        }
        if let orderingReruns = gauges.orderingReruns {
            out.family("headway_ordering_reruns_total", .counter,
                       "Writer batches run again, taking the order first, because another daemon wrote a task "
                       + "they had read before taking their place in the order (PostgreSQL).")
            out.sample("headway_ordering_reruns_total", [:], Double(orderingReruns))
        }
        out.family("headway_retention_pruned_rows_total", .counter, "Rows forgotten by retention.")
        out.sample("headway_retention_pruned_rows_total", [:], Double(retentionPruned.value))
        out.family("headway_webhook_attempts_total", .counter,
                   "Webhook delivery attempts, by result (delivered; retried later; failed: given up).")
        out.sample("headway_webhook_attempts_total", ["result": "delivered"], Double(webhookAttempts.delivered.value))
        out.sample("headway_webhook_attempts_total", ["result": "retried"], Double(webhookAttempts.retried.value))
        out.sample("headway_webhook_attempts_total", ["result": "failed"], Double(webhookAttempts.failed.value))
        if gauges.readFromDatabase {
            out.family("headway_webhook_deliveries_pending", .gauge, "Webhook deliveries not delivered or given up yet.")
            out.sample("headway_webhook_deliveries_pending", [:], Double(gauges.webhookDeliveriesPending))
        }
        out.family("headway_unsent_reply_bytes", .gauge,
                   "Bytes of replies that their clients have not taken yet (--max-unsent-reply-bytes).")
        out.sample("headway_unsent_reply_bytes", [:], Double(gauges.unsentReplyBytes))
    }
}

/// The kinds of update a runner sends, as counted.
package enum UpdateKind: Int, CaseIterable, MetricLabels {
    case progress, heartbeat, finish

    package var name: String { ["progress", "heartbeat", "finish"][rawValue] }
    package var labelValues: [String] { [name] }
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
package final class EventCounters: Sendable {
    package let sent = MetricCounter()
    package let coalesced = MetricCounter()
    /// Fan-out laps ended, and their time in nanoseconds (a lap visits every subscriber).
    package let laps = MetricCounter()
    package let lapNanoseconds = MetricCounter()
    /// By reason (`bytes`, `pending_tasks`, `stalled`).
    package let cutOff = LabeledCounters<[String]>()

    package init() {}
}

/// Webhook delivery attempts by result (bumped by the webhook dispatcher).
package struct WebhookAttemptCounters: Sendable {
    package let delivered = MetricCounter()
    package let retried = MetricCounter()
    package let failed = MetricCounter()

    package init() {}
}
