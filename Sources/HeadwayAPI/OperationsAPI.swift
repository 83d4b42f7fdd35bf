import Dispatch
import EventStream
import HTTPServer
import HeadwayCore
import HeadwayStore
import Lifecycle
import Synchronization
import Telemetry

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
package struct OperationsAPI: Sendable {
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

    package func register(in routes: inout ServiceRoutes) {
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
        read(request, responder) { [metrics, writer, broker, catchUpBudget, unreadReplies] reader in
            var gauges = ServiceMetrics.Gauges()
            gauges.unsentReplyBytes = unreadReplies.totalBytes
            do {
                try reader.snapshot { database in
                    gauges.tasks = try database.taskCountsByStateModeAndStall()
                    gauges.schemaVersion = try Migrator.recordedVersion(in: database)
                    gauges.webhookDeliveriesPending = try WebhookRepository.pendingCount(in: database)
                    gauges.overdueTasks = try TaskRepository.overdueUnfinishedCount(in: database)
                    let sizes = try database.storageSizes()
                    gauges.databaseBytes = sizes.databaseBytes
                    gauges.walBytes = sizes.writeAheadLogBytes
                }
            } catch let error as DatabaseError where error.isUnavailable {
                // While PostgreSQL is down the scrape still answers, so that what says it is
                // down (`headway_database_available`) reaches the monitoring.
                gauges = ServiceMetrics.Gauges()
                gauges.readFromDatabase = false
                gauges.unsentReplyBytes = unreadReplies.totalBytes
            }
            gauges.databaseAvailable = writer.availability.isAvailable
            gauges.databaseUnavailableSeconds = writer.availability.unavailableSeconds
            gauges.databaseReconnects = DatabaseAvailability.reconnects
            gauges.orderingLockSeconds = writer.orderingLockSeconds
            gauges.orderingReruns = writer.orderingReruns
            gauges.subscribers = broker.subscriberCount
            gauges.catchUpBytes = catchUpBudget.usedBytes
            gauges.writerQueueDepth = writer.queueDepth
            return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", PrometheusText.contentType),
                                                       HTTPField("Cache-Control", "no-store")],
                                body: Array(metrics.render(gauges).utf8))
        }
    }

    private func read(_ request: HTTPRequest, _ responder: any Responder,
                      _ body: @escaping @Sendable (DatabaseReader) throws -> HTTPResponse?) {
        reads.answer(request, responder, errors: errors, body)
    }

    package init(metrics: ServiceMetrics, writer: GroupCommitWriter, reads: ReadPool, broker: EventBroker,
                 catchUpBudget: CatchUpBudget, databasePath: String, errors: ErrorReplies,
                 unreadReplies: UnreadReplies) {
        self.metrics = metrics
        self.writer = writer
        self.reads = reads
        self.broker = broker
        self.catchUpBudget = catchUpBudget
        self.databasePath = databasePath
        self.errors = errors
        self.unreadReplies = unreadReplies
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
