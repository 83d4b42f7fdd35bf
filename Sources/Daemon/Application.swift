import Access
import EventStream
import Foundation
import HeadwayAPI
import HeadwayCore
import HeadwayStore
import HTTPServer
import Lifecycle
import Telemetry
import Webhooks

/// The assembled daemon: database (migrated), writer, reader, routes and HTTP server.
/// The executable and the tests build it the same way, with `buildApplication`.
///
/// Its long-running parts are services of one group, started in this order and stopped in
/// the reverse one (`start`): the log flusher (last to stop, so the stop's own lines are
/// written), the event broker, the writer, on PostgreSQL the change listener, maintenance
/// (stall sweeper and retention), the webhooks' host lookups, transfers and dispatcher,
/// and the HTTP server (first to stop: no new connections, every event stream ended,
/// requests under way answered; then the webhooks and maintenance stop, the writer
/// commits what is queued, the broker ends).
public final class HeadwayApplication: Sendable {
    public let configuration: Configuration
    public let logger: Logger
    let writer: GroupCommitWriter
    /// Where API reads run (`GET /v1/tasks…`, `/readyz`, `/metrics`).
    let apiReads: ReadPool
    /// Where event-stream catch-ups are read, with connections of their own.
    let catchUpReads: ReadPool
    let broker: EventBroker
    let maintenance: Maintenance
    let server: MicroHTTPServer
    /// The catch-ups event-stream subscribers shared lately.
    let recentCatchUps: CatchUpCache
    /// What the catch-ups cost.
    let catchUpStatistics: CatchUpStatistics
    /// The bound on catch-up bytes held in memory (`--max-catch-up-bytes`).
    let catchUpBudget: CatchUpBudget
    /// Every route served, with the access it needs (tests build their matrix from it).
    public let routes: [RouteEntry]
    /// The tokens, in memory.
    let tokens: TokenRegistry
    /// Keeps `tokens` current (the maintenance thread calls it about once a second).
    let tokenKeeper: TokenKeeper
    /// What the server does with each request (tests may hand requests to it directly).
    let pipeline: HTTPPipeline
    /// What `GET /metrics` shows.
    let metrics: ServiceMetrics
    /// The services, once started.
    /// Set by `start` (the main thread), taken by `shutdown` (a test's thread, or main again).
    private let services = Locked<ServiceGroup?>(nil)
    /// On PostgreSQL: wakes the writer for other daemons' changes.
    let changeListener: ChangeListener?
    /// Sends webhook deliveries.
    let webhookDispatcher: WebhookDispatcher
    /// Where large batches of `POST /v1/progress` are parsed, off the server's thread.
    let batchParsing: DispatchQueue

    init(configuration: Configuration, writer: GroupCommitWriter, apiReads: ReadPool, catchUpReads: ReadPool,
         broker: EventBroker, maintenance: Maintenance, server: MicroHTTPServer, pipeline: HTTPPipeline,
         recentCatchUps: CatchUpCache, catchUpStatistics: CatchUpStatistics, catchUpBudget: CatchUpBudget,
         logger: Logger, routes: [RouteEntry], tokens: TokenRegistry, tokenKeeper: TokenKeeper, metrics: ServiceMetrics,
         webhookDispatcher: WebhookDispatcher, changeListener: ChangeListener? = nil,
         batchParsing: DispatchQueue = DispatchQueue(label: "headway.batches")) {
        self.batchParsing = batchParsing
        self.webhookDispatcher = webhookDispatcher
        self.changeListener = changeListener
        self.metrics = metrics
        self.tokens = tokens
        self.tokenKeeper = tokenKeeper
        self.maintenance = maintenance
        self.recentCatchUps = recentCatchUps
        self.catchUpStatistics = catchUpStatistics
        self.catchUpBudget = catchUpBudget
        self.configuration = configuration
        self.writer = writer
        self.apiReads = apiReads
        self.catchUpReads = catchUpReads
        self.broker = broker
        self.server = server
        self.logger = logger
        self.routes = routes
        self.pipeline = pipeline
    }

    /// The port served (useful with port 0).
    public var port: Int { server.port }

    /// Starts every service; listening once this returns. Without `listening` (tests that
    /// hand requests to the pipeline in process) the HTTP server is left out.
    public func start(listening: Bool = true) throws {
        var members = [
            ServiceGroup.Member("headway-log", logger.flusher),
            ServiceGroup.Member("headway-events", broker),
            ServiceGroup.Member("headway-writer", writer),
            ServiceGroup.Member("headway-sweeper", maintenance),
            // Before the dispatcher and the HTTP server (a new webhook's check), which use them.
            ServiceGroup.Member("headway-lookups", webhookDispatcher.lookups.threads),
            ServiceGroup.Member("headway-webhook", webhookDispatcher.transfers),
            ServiceGroup.Member("headway-webhooks", webhookDispatcher),
        ]
        if let changeListener { members.insert(ServiceGroup.Member("headway-listen", changeListener), at: 3) }
        if listening { members.append(ServiceGroup.Member("headway-accept", server)) }
        let group = ServiceGroup(members)
        try group.start()
        services.withLock { $0 = group }
        guard listening else { return }
        logger.log(.info, "server.listening", [
            "address": configuration.host.contains(":") ? "[\(configuration.host)]:\(port)" : "\(configuration.host):\(port)",
            "socket": configuration.inheritedListenFD == nil ? "bound" : "inherited",
            "db": redactedLocation(configuration.databasePath), "durability": configuration.durability.rawValue,
            "tls": server.isTLS ? "on" : "off", "certificate_sha256": server.certificateFingerprint ?? "-",
            "max_subscribers": "\(broker.settings.maximumSubscribers)", "version": HeadwayVersion.current,
        ])
        warnIfCertificateIsNotValidNow()
    }

    /// Logs `tls.certificate_expired` or `tls.certificate_not_yet_valid` (with its dates) if
    /// the certificate served is outside its validity dates now. It is served all the same:
    /// an operator may be in the middle of a renewal.
    private func warnIfCertificateIsNotValidNow() {
        guard let validity = server.certificateValidity, let problem = validity.problem(at: Date()) else { return }
        let dates = ISO8601DateFormatter()
        logger.log(.warn, problem.rawValue, [
            "cert": configuration.tlsCertificatePath ?? "", "not_before": dates.string(from: validity.notBefore),
            "not_after": dates.string(from: validity.notAfter), "certificate_sha256": server.certificateFingerprint ?? "",
            "detail": "served anyway: clients that check dates will refuse it",
        ])
    }

    /// Reloads the TLS certificate and key from their files (SIGHUP): new connections get
    /// the new certificate, open ones keep going; a file that cannot serve keeps the old
    /// certificate. Logs what happened (`tls.reloaded`, `tls.reload_failed`, or
    /// `tls.reload_skipped` without TLS) and returns whether a new certificate is served.
    @discardableResult
    public func reloadCertificate() -> Bool {
        guard let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath else {
            logger.log(.info, "tls.reload_skipped", ["reason": "TLS is off (no --tls-cert): nothing to reload"])
            return false
        }
        do {
            let fingerprint = try server.reloadCertificate() ?? ""
            logger.log(.info, "tls.reloaded", ["cert": certificatePath, "key": keyPath, "certificate_sha256": fingerprint])
            warnIfCertificateIsNotValidNow()
            return true
        } catch {
            logger.log(.error, "tls.reload_failed", [
                "error": "\(error)", "kept_certificate_sha256": server.certificateFingerprint ?? "",
            ])
            return false
        }
    }

    /// Event-stream subscribers connected now.
    public var subscriberCount: Int { broker.subscriberCount }

    /// Makes the event stream look at the clock now (for tests that move a manual clock).
    func wakeEventStream() { broker.wake() }

    /// Holds or releases the event broker's queue (for tests of a broker that is behind).
    func pauseEventStream(_ paused: Bool) { broker.setPaused(paused) }

    /// Runs the stall sweeper now and waits for its commit; returns the events it raised.
    @discardableResult
    func sweepStalls() -> Int { maintenance.sweepNow() }

    /// Looks at the tokens table now, as the maintenance thread does about once a second,
    /// and waits (for tests: a token made by `headwayd token create`, one that expired).
    func refreshTokens() { tokenKeeper.refresh() }

    /// Runs one retention pass now; returns the rows forgotten.
    @discardableResult
    func pruneOldTasks() -> Int { maintenance.pruneNow() }

    /// Every reader connection (for tests of reads that fail).
    var readers: [DatabaseReader] { apiReads.readers + catchUpReads.readers }

    /// Stops every service in order (see the type), waits for the reads still running or
    /// waiting (catch-ups, API reads), then closes the readers and writes the last log
    /// lines (the flusher has stopped). `processEnds`: the process exits next, so no
    /// connection to the database server is opened any more (`DatabaseAvailability.stopConnecting`):
    /// on a server that does not answer, the parts stopped one after the other would each
    /// wait out a connection attempt.
    public func shutdown(processEnds: Bool = false) {
        if processEnds { DatabaseAvailability.stopConnecting() }
        logger.log(.info, "server.stopping", ["subscribers": "\(broker.subscriberCount)"])
        // Reads still waiting are answered 503 now: the drain below waits for the reads
        // running, not for a queue that one client may have filled with heavy pages.
        apiReads.refuseWaiting()
        services.withLock { $0 }?.stop()
        catchUpReads.close()
        apiReads.close()
        logger.log(.info, "server.stopped", ["batches": "\(writer.statistics.batches)", "writes": "\(writer.statistics.jobs)"])
        logger.flush()
    }
}

/// Opens and migrates the database and assembles the daemon (not yet listening), in steps:
/// refuse what cannot start before touching the database, open it, load the tokens and
/// webhooks, build the services, register the routes, make the HTTP server.
public func buildApplication(_ configuration: Configuration, clock: any WallClock = SystemClock(),
                             logger: Logger? = nil) throws -> HeadwayApplication {
    let logger = logger ?? Logger(minimumLevel: configuration.logLevel)
    try refuseBeforeOpening(configuration, logger: logger)
    let database = try openDatabase(configuration, logger: logger)
    let (tokens, webhookOutbox) = try loadTokensAndWebhooks(configuration, clock: clock)
    if let refusal = StartRefusal.check(configuration, tokensRequired: tokens.authenticationRequired) { throw refusal }
    logSettingWarnings(configuration, tokensRequired: tokens.authenticationRequired, logger: logger)
    let openFiles = OpenFileBudget.obtain(forSubscribers: configuration.broker.maximumSubscribers)
    logOpenFiles(openFiles, given: configuration.maximumSubscribersGiven, logger: logger)
    // The broker serves as many streams as the files allow; `configuration` stays as given
    // (a reload compares the settings with it).
    var served = configuration
    served.broker.maximumSubscribers = openFiles.subscribers
    let connectionLimit = openFiles.subscribers + openFiles.apiConnections
    let services = try buildServices(served, changeCounter: database.changeCounter, storage: database.storage,
                                     tokens: tokens, webhookOutbox: webhookOutbox, clock: clock, logger: logger)
    let routes = registerRoutes(configuration, services: services, tokens: tokens, webhookOutbox: webhookOutbox,
                                clock: clock, logger: logger)
    let (server, pipeline) = try buildHTTPServer(configuration, routes: routes, tokens: tokens, metrics: services.metrics,
                                                 connectionLimit: connectionLimit, clock: clock, logger: logger)
    return HeadwayApplication(configuration: configuration, writer: services.writer, apiReads: services.apiReads,
                              catchUpReads: services.catchUpReads, broker: services.broker,
                              maintenance: services.maintenance, server: server, pipeline: pipeline,
                              recentCatchUps: routes.recentCatchUps, catchUpStatistics: routes.catchUpStatistics,
                              catchUpBudget: routes.catchUpBudget,
                              logger: logger, routes: routes.serviceRoutes.table, tokens: tokens, tokenKeeper: services.tokenKeeper,
                              metrics: services.metrics, webhookDispatcher: services.webhookDispatcher,
                              changeListener: services.changeListener, batchParsing: routes.batchParsing)
}

/// Refuses, before anything is created, TLS files that cannot serve (a mistyped
/// --tls-cert leaves no new database behind); waits for a PostgreSQL server still
/// starting; then refuses the start refusals that need tokens, looked for without creating
/// or migrating the database (a missing file has no tokens; `buildApplication` looks again
/// once the table is loaded).
private func refuseBeforeOpening(_ configuration: Configuration, logger: Logger) throws {
    if let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath {
        try TLSCertificateFiles(certificatePath: certificatePath, keyPath: keyPath).check()
    }
    DatabaseAvailability.limitStatements(toMilliseconds: Int((configuration.databaseTimeoutSeconds * 1000).rounded()))
    // A PostgreSQL server still starting (or down a moment: a restart, a host booting) is
    // waited for, with a line now and then, rather than failing the start: a supervisor
    // restarting the daemon every few seconds would give up on it after a few tries.
    try waitForDatabaseServer(configuration.databasePath, upTo: configuration.databaseStartWaitSeconds) { waited, finding in
        logger.log(.warn, "database.waiting", [
            "location": redactedLocation(configuration.databasePath), "finding": finding,
            "waited_seconds": "\(Int(waited))", "gives_up_after_seconds": "\(Int(configuration.databaseStartWaitSeconds))",
        ])
    }
    if let refusal = StartRefusal.check(configuration, tokensRequired: TokenRepository.requiredWithoutCreating(
        path: configuration.databasePath)) {
        throw refusal
    }
}

/// Opens the database, creating and migrating it as needed (logging the migrations
/// applied), and warns when its file is open to others than its owner.
private func openDatabase(_ configuration: Configuration,
                          logger: Logger) throws -> (changeCounter: ChangeCounter, storage: any StorageEngine) {
    let setup = try setUpDatabase(configuration.databasePath)
    if !setup.appliedMigrations.isEmpty {
        logger.log(.info, "database.migrated", ["versions": setup.appliedMigrations.map(String.init).joined(separator: ",")])
    }
    let storage = storageEngine(for: configuration.databasePath)
    if let mode = storage.fileModeOpenToOthers() {
        // Made before database files were created 0600, or opened up by hand: its -wal and
        // -shm get the same mode.
        logger.log(.warn, "security.database_mode", [
            "path": configuration.databasePath, "mode": "0" + String(mode, radix: 8),
            "detail": "the database holds webhook secrets and token hashes, and others than its owner may read or "
                + "write it: chmod 600 it (and its -wal and -shm)",
        ])
    }
    return (setup.changeCounter, storage)
}

/// The tokens and the webhooks as stored, read in one transaction into the registry and
/// the outbox the daemon keeps in memory.
private func loadTokensAndWebhooks(_ configuration: Configuration,
                                   clock: any WallClock) throws -> (tokens: TokenRegistry, outbox: WebhookOutbox) {
    let tokens = TokenRegistry()
    let tokenDatabase = try Database(path: configuration.databasePath)
    defer { tokenDatabase.close() }
    let (storedTokens, storedWebhooks) = try tokenDatabase.inTransaction {
        (try TokenRepository.changes(since: -1, in: tokenDatabase), try WebhookRepository.all(in: tokenDatabase))
    }
    // Alerts link to the task's page under the first --public-url.
    let webhookOutbox = WebhookOutbox(site: configuration.publicOrigins.first?.description)
    webhookOutbox.load(storedWebhooks)
    tokens.apply(storedTokens, now: clock.now())
    return (tokens, webhookOutbox)
}

/// The daemon's long-running parts and what they share, built before the routes that use them.
private struct Services {
    let metrics: ServiceMetrics
    let broker: EventBroker
    let writer: GroupCommitWriter
    /// API reads (`GET /v1/tasks…`, `/readyz`, `/metrics`).
    let apiReads: ReadPool
    /// Event-stream catch-ups, on connections of their own.
    let catchUpReads: ReadPool
    /// On PostgreSQL: wakes the writer for other daemons' changes.
    let changeListener: ChangeListener?
    let store: TaskStore
    let tokenKeeper: TokenKeeper
    let maintenance: Maintenance
    let webhookDispatcher: WebhookDispatcher
    /// Rung when webhook deliveries were written or a webhook changed: the dispatcher looks again.
    let webhookDoorbell: Doorbell
}

/// Builds the broker, the writer (with, on PostgreSQL, its share of the database with other
/// daemons), the read pools, the task store, maintenance and the webhook dispatcher.
private func buildServices(_ configuration: Configuration, changeCounter: ChangeCounter, storage: any StorageEngine,
                           tokens: TokenRegistry, webhookOutbox: WebhookOutbox, clock: any WallClock,
                           logger: Logger) throws -> Services {
    let webhookDoorbell = Doorbell()
    let metrics = ServiceMetrics()
    let storageAlarm = StorageAlarm(logger: logger, clock: clock)
    let broker = EventBroker(settings: configuration.broker, clock: clock, logger: logger, counters: metrics.events)
    // On PostgreSQL other daemons may write the same database: each batch takes the
    // writers' lock, continues their numbering and delivers their changes (`SharedWriting`).
    let taskCache = TaskCache()
    let isShared = storage.isShared
    let sharedWriting = isShared ? SharedWriting(changeCounter: changeCounter, cache: taskCache) : nil
    // The writer hands the events of every committed change to the broker (other daemons'
    // changes too, through `SharedWriting`); a change's webhook deliveries are written in
    // its own transaction, and the dispatcher is rung after each batch that wrote some.
    let availability = DatabaseAvailability(report: { change in
        switch change {
        case .unavailable(let error): logger.log(.warn, "database.unavailable", ["error": error])
        case .available(let seconds):
            logger.log(.info, "database.available", ["unavailable_seconds": String(format: "%.3f", seconds)])
        }
    })
    let writer = try GroupCommitWriter(path: configuration.databasePath, durability: configuration.durability,
                                       walSizeLimit: configuration.walSizeLimitBytes, coordinator: sharedWriting,
                                       heldWrites: taskCache, events: broker, availability: availability,
                                       observeBatch: { batch in
                                           metrics.observe(batch)
                                           storageAlarm.observe(batch)
                                           if webhookOutbox.takeWritten() { webhookDoorbell.ring() }
                                       },
                                       observeCheckpoint: { metrics.observeCheckpoint(seconds: $0) })
    let apiReads = try ReadPool(path: configuration.databasePath, connections: configuration.readConnections,
                                maximumWaiting: configuration.maximumQueuedReads, label: "headway.reads")
    // Every waiting catch-up holds a subscriber's place, so the subscriber limit bounds them.
    let catchUpReads = try ReadPool(path: configuration.databasePath, connections: configuration.readConnections,
                                    maximumWaiting: max(1, configuration.broker.maximumSubscribers), label: "headway.events.catch-up")
    let listener = sharedWriting.map { sharedWriting in
        ChangeListener(location: configuration.databasePath, writer: writer, sharedWriting: sharedWriting,
                       reportFailure: { error in logger.log(.warn, "database.listen_failed", ["error": error]) },
                       reportListening: { logger.log(.info, "database.listening", ["detail": "listening again on a new connection"]) })
    }
    let leadership = isShared ? Leadership(location: configuration.databasePath) { leading, detail in
        switch (leading, detail) {
        case (true, _):
            logger.log(.info, "leadership.acquired", ["detail": "this daemon now sweeps stalls and applies retention"])
        case (false, let error?): logger.log(.warn, "leadership.lost", ["error": error])
        case (false, nil): logger.log(.info, "leadership.released", [:])
        }
    } : nil
    let store = TaskStore(changeCounter: changeCounter, defaultStallTimeoutSeconds: configuration.stallTimeoutSeconds,
                          graceStart: clock.now(), cache: taskCache, limits: configuration.treeLimits,
                          webhooks: webhookOutbox)
    let keeper = TokenKeeper(registry: tokens, writer: writer, broker: broker, clock: clock, logger: logger)
    let maintenance = Maintenance(settings: configuration.maintenance, writer: writer, store: store,
                                  clock: clock, logger: logger, tokens: keeper, prunedRows: metrics.retentionPruned,
                                  leadership: leadership, countFlags: { metrics.countFlags($0) })
    let webhookDispatcher = WebhookDispatcher(settings: configuration.webhooks, location: configuration.databasePath,
                                              writer: writer, outbox: webhookOutbox, clock: clock, logger: logger,
                                              leadership: leadership, counters: metrics.webhookAttempts,
                                              doorbell: webhookDoorbell)
    return Services(metrics: metrics, broker: broker, writer: writer, apiReads: apiReads, catchUpReads: catchUpReads,
                    changeListener: listener, store: store, tokenKeeper: keeper, maintenance: maintenance,
                    webhookDispatcher: webhookDispatcher, webhookDoorbell: webhookDoorbell)
}

/// Every route, and what the routes share with the HTTP server and the application.
private struct RegisteredRoutes {
    let serviceRoutes: ServiceRoutes
    /// How every error becomes a reply.
    let errors: ErrorReplies
    /// The bound on reply bytes waiting for their clients, shared with the HTTP server.
    let unreadReplies: UnreadReplies
    /// Where large batches of `POST /v1/progress` are parsed.
    let batchParsing: DispatchQueue
    let catchUpBudget: CatchUpBudget
    let recentCatchUps: CatchUpCache
    let catchUpStatistics: CatchUpStatistics
}

/// Registers the routes of every API (operations, tasks, tokens, webhooks, the dashboard,
/// the event stream) on the services.
private func registerRoutes(_ configuration: Configuration, services: Services, tokens: TokenRegistry,
                            webhookOutbox: WebhookOutbox, clock: any WallClock, logger: Logger) -> RegisteredRoutes {
    let (metrics, writer, apiReads, broker) = (services.metrics, services.writer, services.apiReads, services.broker)
    var routes = ServiceRoutes(gate: AccessGate(registry: tokens, clock: clock, queryTokenPath: EventsAPI.path))
    let errors = ErrorReplies(logger: logger)
    let unreadReplies = UnreadReplies(limitBytes: configuration.maximumUnsentReplyBytes)
    let batchParsing = DispatchQueue(label: "headway.batches")
    let catchUpBudget = CatchUpBudget(limitBytes: configuration.maximumCatchUpBytes)
    OperationsAPI(metrics: metrics, writer: writer, reads: apiReads, broker: broker, catchUpBudget: catchUpBudget,
                  databasePath: configuration.databasePath, errors: errors, unreadReplies: unreadReplies)
        .register(in: &routes)
    TaskAPI(writer: writer, reads: apiReads, store: services.store, clock: clock, logger: logger, errors: errors,
            metrics: metrics, maximumBatchItems: configuration.maximumBatchItems,
            unreadReplies: unreadReplies, batchParsing: batchParsing)
        .register(in: &routes)
    TokensAPI(writer: writer, registry: tokens, broker: broker, clock: clock, logger: logger, errors: errors,
              maximumTokens: configuration.maximumTokens)
        .register(in: &routes)
    let checkWebhookURL: WebhookURLCheck = { [allowPrivate = configuration.webhooks.allowPrivate,
                                              seconds = configuration.webhooks.timeoutSeconds,
                                              lookups = services.webhookDispatcher.lookups.checks] url, then in
        WebhookTransport.check(url, allowPrivate: allowPrivate, within: seconds, lookups: lookups) { check in
            if case .refused(let reason, _) = check { then(reason) } else { then(nil) }
        }
    }
    let webhookDoorbell = services.webhookDoorbell, webhookDispatcher = services.webhookDispatcher
    WebhooksAPI(writer: writer, reads: apiReads, outbox: webhookOutbox, checkURL: checkWebhookURL, clock: clock,
                logger: logger, errors: errors, changed: { webhookDoorbell.ring() },
                sendTest: { webhook, then in webhookDispatcher.sendTest(webhook, then: then) })
        .register(in: &routes)
    DashboardAPI(registry: tokens).register(in: &routes)
    let recentCatchUps = CatchUpCache(budget: catchUpBudget)
    let catchUpStatistics = CatchUpStatistics()
    EventsAPI(broker: broker, reads: services.catchUpReads, clock: clock, logger: logger, errors: errors,
              recentCatchUps: recentCatchUps, statistics: catchUpStatistics, budget: catchUpBudget)
        .register(in: &routes)
    return RegisteredRoutes(serviceRoutes: routes, errors: errors, unreadReplies: unreadReplies, batchParsing: batchParsing,
                            catchUpBudget: catchUpBudget, recentCatchUps: recentCatchUps,
                            catchUpStatistics: catchUpStatistics)
}

/// The HTTP server in front of `routes`: its configuration with the hooks that need the
/// rest of the daemon (tokens, the log, the reply budget), and the pipeline every request
/// passes (browser checks, then the router).
private func buildHTTPServer(_ configuration: Configuration, routes: RegisteredRoutes, tokens: TokenRegistry,
                             metrics: ServiceMetrics, connectionLimit: Int, clock: any WallClock,
                             logger: Logger) throws -> (server: MicroHTTPServer, pipeline: HTTPPipeline) {
    let router = routes.serviceRoutes.router
    let errors = routes.errors
    var serverConfiguration = configuration.httpServer(connectionLimit: connectionLimit)
    serverConfiguration.unreadReplies = routes.unreadReplies
    // Only a request whose token may report sends the batch route's larger body: another,
    // refused once read, is held to the usual limit before any of it is read.
    let batchGate = AccessGate(registry: tokens, clock: clock, queryTokenPath: EventsAPI.path)
    serverConfiguration.mayTakeLargerBody = { request in
        if case .success = batchGate.admit(request, .scope(.report)) { return true }
        return false
    }
    // A batch's reply bytes are reserved from its head: a client past its share is refused
    // before its body is read or parsed.
    let maximumBatchItems = configuration.maximumBatchItems
    serverConfiguration.largerBodyReplyBytes = { announced in
        TaskAPI.replyBytesReserved(announcedBodyBytes: announced, maximumItems: maximumBatchItems)
    }
    // What connection floods get refused is logged as counts, at most once a second.
    serverConfiguration.connectionsRefused = { counts in
        logger.log(.warn, "http.connections_refused", [
            ConnectionRefusal.headTimeout.rawValue: "\(counts[.headTimeout] ?? 0)",
            ConnectionRefusal.bodyTimeout.rawValue: "\(counts[.bodyTimeout] ?? 0)",
            ConnectionRefusal.waitingFull.rawValue: "\(counts[.waitingFull] ?? 0)",
            ConnectionRefusal.tooManyFromAddress.rawValue: "\(counts[.tooManyFromAddress] ?? 0)",
            ConnectionRefusal.notTLS.rawValue: "\(counts[.notTLS] ?? 0)",
            ConnectionRefusal.malformedHead.rawValue: "\(counts[.malformedHead] ?? 0)",
        ])
    }
    // Every request gets an id and, once over, a log line and its count from the HTTP layer
    // (`AccessLog`); it passes the middleware, and the HTTP layer's refusals look like every
    // other problem. What browsers may do (Host, Origin, Content-Type, CORS) is checked
    // before anything else, with the port the server binds.
    let servedPort = ServedPort(configured: configuration.port)
    let accessLog = AccessLog(logger: logger, metrics: metrics)
    let browserChecks = BrowserChecks(listenHost: configuration.host, publicOrigins: configuration.publicOrigins,
                                      allowedOrigins: configuration.corsOrigins, router: router, servedPort: servedPort,
                                      errors: errors, tokensRequired: { tokens.authenticationRequired })
    let pipeline = HTTPPipeline(middleware: [browserChecks],
                                router: router, renderRefusal: errors.response(for:_:),
                                requestIDs: RequestIDs(), observeExchange: accessLog.record)
    let server = try MicroHTTPServer(configuration: serverConfiguration, pipeline: pipeline, libraryLog: { message, clientGone in
        // The library's messages may quote a request target: `access_token=` is redacted
        // (the logger redacts it in every value too).
        logger.log(clientGone ? .debug : .warn, "http.library", ["message": Redaction.redact(message)])
    })
    servedPort.follow(server)
    return (server, pipeline)
}

/// Logs what the settings allow but an operator should know at start: CORS origins trusted
/// while no token exists, and deprecated settings given.
private func logSettingWarnings(_ configuration: Configuration, tokensRequired: Bool, logger: Logger) {
    let exactCORSOrigins = configuration.corsOrigins.compactMap { origin -> String? in
        if case .exact(let exact) = origin { return exact.description }
        return nil
    }
    if !tokensRequired && !exactCORSOrigins.isEmpty {
        // Trusted explicitly by the operator, but while no token exists its pages may do
        // everything, making the first admin token included.
        logger.log(.warn, "security.cors_without_tokens", [
            "cors_origins": exactCORSOrigins.joined(separator: ","),
            "detail": "no access token exists: pages of these origins may do everything, create tokens included; "
                + "create one with: headwayd token create --scope admin --db \(configuration.databasePath)",
        ])
    }
    if let concurrency = configuration.webhookConcurrency {
        logger.log(.warn, "config.deprecated", [
            "setting": "webhook-concurrency", "value": "\(concurrency)",
            "detail": "ignored: every webhook has its own delivery attempt in flight, all on one thread; "
                + "remove the setting",
        ])
    }
}

/// SIGTERM or SIGINT came while the start waited (for the database server): the daemon
/// exits, as asked, without serving.
public struct StartInterrupted: Error, CustomStringConvertible {
    public var description: String { "stopped by a signal while waiting for the database server" }
}

/// The database's server took no connections for as long as the start would wait: the
/// start gives up with what it found last, and connects no more (each try could take a
/// whole `connect_timeout` again on a host that does not answer).
public struct DatabaseServerUnreachable: Error, CustomStringConvertible {
    let location: String
    let waitedSeconds: Double
    let finding: String

    public var description: String {
        "the database server at \(redactedLocation(location)) takes no connections"
            + (waitedSeconds > 0 ? " after a wait of \(Setting.plain(waitedSeconds)) s (--db-start-wait)" : "")
            + ": \(finding)"
    }
}

/// Waits up to `seconds` for the server of the database at `location` (none for a file),
/// telling `waiting` now and then (`StorageEngine.waitForServer`). Signals are blocked
/// (`main`): SIGTERM or SIGINT meanwhile ends the wait with `StartInterrupted`; a server
/// that still takes no connections after it, with `DatabaseServerUnreachable`.
func waitForDatabaseServer(_ location: String, upTo seconds: Double,
                           waiting: (_ waitedSeconds: Double, _ finding: String) -> Void) throws {
    let finding = storageEngine(for: location).waitForServer(upTo: seconds, stopRequested: stopSignalPending,
                                                             waiting: waiting)
    if stopSignalPending() { throw StartInterrupted() }
    if let finding { throw DatabaseServerUnreachable(location: location, waitedSeconds: seconds, finding: finding) }
}

/// `DatabaseSetup.open` of `location`, whose waits without a time limit (a PostgreSQL
/// migration, or another daemon's) SIGTERM or SIGINT ends, with `StartInterrupted`.
func setUpDatabase(_ location: String) throws -> DatabaseSetup {
    do {
        return try DatabaseSetup.open(path: location, stopRequested: stopSignalPending)
    } catch where stopSignalPending() {
        throw StartInterrupted()
    }
}

/// Whether SIGTERM or SIGINT is pending (blocked until the daemon runs, they wait for
/// `sigwait`; blocked for good in `headwayd token create`).
func stopSignalPending() -> Bool {
    var pending = sigset_t()
    sigpending(&pending)
    return sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1
}

/// Why the daemon refuses to start.
public enum StartRefusal: Error, CustomStringConvertible {
    /// Listening beyond loopback while no token exists.
    case noTokens(host: String, port: Int, databasePath: String)
    /// `--cors-origin '*'` while no token exists: any page could make the first admin token.
    case anyCORSOriginWithoutTokens(databasePath: String)

    /// Why `configuration` may not start, given whether tokens are required, or nil.
    static func check(_ configuration: Configuration, tokensRequired: Bool) -> StartRefusal? {
        guard !tokensRequired else { return nil }
        if !Configuration.isLoopback(configuration.host) {
            return .noTokens(host: configuration.host, port: configuration.port, databasePath: configuration.databasePath)
        }
        if configuration.corsOrigins.contains(.any) { return .anyCORSOriginWithoutTokens(databasePath: configuration.databasePath) }
        return nil
    }

    public var description: String {
        switch self {
        case .anyCORSOriginWithoutTokens(let databasePath):
            return "--cors-origin '*': no access token exists in \(databasePath), so any web page anyone opens could "
                + "use the API, and make the first admin token. Create the first token with: "
                + "headwayd token create --scope admin --db \(databasePath) (or name the dashboard's exact origin, "
                + "e.g. --cors-origin https://dash.example.com)"
        case .noTokens(let host, let port, let databasePath):
            let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            return "--listen \(address): no access token exists in \(databasePath), so Headway serves only on "
                + "loopback (127.0.0.0/8, ::1, localhost). Create the first token with: "
                + "headwayd token create --scope admin --db \(databasePath)"
        }
    }
}

/// Says at start, as `limits.open_files`, when the open-file limit holds fewer event
/// streams than `--max-subscribers` (those past it get 503 `too_many_subscribers`): at warn
/// with what to change when the number was `given`; at info when it is the default, which
/// the daemon lowers to what the limit holds (a newcomer's machine, whose limit it did not
/// set, has nothing to change).
private func logOpenFiles(_ budget: OpenFileBudget, given: Bool, logger: Logger) {
    guard !budget.holdsConfiguredSubscribers else { return }
    let holds = "the open-file limit holds \(budget.subscribers) event streams beside \(budget.apiConnections) API "
        + "connections and \(OpenFileBudget.otherFiles) other files; more subscribers get 503 too_many_subscribers"
    let detail = given
        ? holds + ": raise the hard limit to \(budget.wanted) (LimitNOFILE= in the systemd unit, ulimit -Hn) "
            + "or lower --max-subscribers"
        : "--max-subscribers is not set, so its default is lowered: " + holds + " (a hard limit of "
            + "\(budget.wanted) holds the default)"
    logger.log(given ? .warn : .info, "limits.open_files", [
        "open_files": "\(budget.openFiles)", "max_subscribers": "\(budget.configuredSubscribers)",
        "subscribers_served": "\(budget.subscribers)",
        "wanted": "\(budget.wanted)",
        "detail": detail,
    ])
}

extension Configuration {
    /// The HTTP server's configuration these settings give: the address, the limits and
    /// deadlines of requests and connections, the TLS files. The hooks that need the rest
    /// of the daemon (tokens, the log, the reply budget) are `buildApplication`'s.
    fileprivate func httpServer(connectionLimit: Int) -> MicroHTTPServer.Configuration {
        var server = MicroHTTPServer.Configuration()
        server.host = host
        server.port = port
        server.inheritedListenFD = inheritedListenFD
        server.connectionLimit = connectionLimit
        server.streamStallTimeoutSeconds = streamStallTimeoutSeconds
        if let tlsCertificatePath, let tlsKeyPath {
            server.tls = TLSCertificateFiles(certificatePath: tlsCertificatePath, keyPath: tlsKeyPath)
        }
        // Each connection's buffers: 10,000 connections cost ~280 MB at the default 32 KiB.
        // The library keeps each query parameter in about 50 bytes more. Requests: a target of
        // up to 8 KiB, headers and the most query parameters allowed fit; bodies arrive in
        // pieces. Event streams send their frames themselves and need only room for a small
        // request head: a stream request whose head passes 1 KiB, carries more than 8 query
        // parameters or weighs more than its 4 KiB hold with 1 KiB to spare (`HeadScreen`) is
        // served by the request daemon instead. 4 KiB exactly: the allocator hands out a
        // block of one page, page-aligned, where 4.5 KiB took a 5 KiB block straddling
        // pages, all of them touched (10,000 streams: 7.6 KiB of RSS each instead of 8.5;
        // docs/benchmarks.md, "Many event streams: memory and latency"). Under TLS one
        // daemon, with the request daemon's memory, serves both (an HTTPS stream costs about
        // 37 KiB).
        server.maximumQueryParameters = maximumQueryParameters
        server.maximumBodyBytes = maximumBodyBytes
        server.bodyLimitsByPath[TaskAPI.batchPath] = max(maximumBodyBytes, TaskAPI.batchBodyBytes)
        let bytesPerQueryParameter = 64
        server.connectionMemoryLimit = 16 * 1024 + maximumQueryParameters * bytesPerQueryParameter
        server.streamPaths = [EventsAPI.path]
        server.maximumStreamHeadBytes = 1024
        server.maximumStreamQueryParameters = 8
        server.streamConnectionMemoryLimit = 4 * 1024
        // Connection floods: a deadline for each head and for each body, a bounded waiting
        // set, a cap per address.
        server.headTimeoutNanoseconds = UInt64(headTimeoutSeconds * 1e9)
        server.bodyTimeoutNanoseconds = UInt64(bodyTimeoutSeconds * 1e9)
        server.maximumWaitingConnections = max(16, min(1024, connectionLimit / 8))
        server.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        return server
    }
}
