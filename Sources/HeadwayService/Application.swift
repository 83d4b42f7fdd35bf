import HTTPServer
import HeadwayCore
import HeadwayStore

/// The assembled daemon: database (migrated), writer, reader, routes and HTTP server.
/// The executable and the tests build it the same way, with `buildApplication`.
public final class HeadwayApplication: Sendable {
    public let configuration: Configuration
    public let logger: Logger
    let writer: GroupCommitWriter
    let reader: DatabaseReader
    let server: MicroHTTPServer
    /// Every route served, as (method, path pattern).
    public let routes: [(method: String, pattern: String)]

    init(configuration: Configuration, writer: GroupCommitWriter, reader: DatabaseReader, server: MicroHTTPServer,
         logger: Logger, routes: [(method: String, pattern: String)]) {
        self.configuration = configuration
        self.writer = writer
        self.reader = reader
        self.server = server
        self.logger = logger
        self.routes = routes
    }

    /// The port served (useful with port 0).
    public var port: Int { server.port }

    /// Starts listening.
    public func start() throws {
        try server.start()
        logger.log(.info, "server.listening", [
            "address": configuration.host.contains(":") ? "[\(configuration.host)]:\(port)" : "\(configuration.host):\(port)",
            "db": configuration.databasePath, "durability": configuration.durability.rawValue,
        ])
    }

    /// Stops: no new connections, requests under way are answered, every change queued is
    /// committed, the database is closed.
    public func shutdown() {
        logger.log(.info, "server.stopping")
        server.shutdown()
        writer.stop()
        reader.close()
        logger.log(.info, "server.stopped", ["batches": "\(writer.statistics.batches)", "writes": "\(writer.statistics.jobs)"])
    }
}

/// Opens and migrates the database and assembles the daemon (not yet listening).
public func buildApplication(_ configuration: Configuration, clock: any WallClock = SystemClock(),
                             logger: Logger? = nil) throws -> HeadwayApplication {
    let logger = logger ?? Logger(minimumLevel: configuration.logLevel)
    do {
        let setup = try Database(path: configuration.databasePath)
        try setup.execute("PRAGMA journal_mode = WAL")
        let applied = try Migrator().migrate(setup)
        if !applied.isEmpty {
            logger.log(.info, "database.migrated", ["versions": applied.map(String.init).joined(separator: ",")])
        }
    }
    let writer = try GroupCommitWriter(path: configuration.databasePath, durability: configuration.durability)
    let reader = try DatabaseReader(path: configuration.databasePath)
    let api = TaskAPI(writer: writer, reader: reader,
                      store: TaskStore(defaultStallTimeoutSeconds: configuration.stallTimeoutSeconds),
                      clock: clock, logger: logger)
    var router = Router()
    api.register(in: &router)
    var serverConfiguration = MicroHTTPServer.Configuration()
    serverConfiguration.host = configuration.host
    serverConfiguration.port = configuration.port
    let finalRouter = router
    let server = MicroHTTPServer(configuration: serverConfiguration, handler: { request, responder in
        finalRouter.handle(request, responder)
    }, accessLog: { entry in
        logger.log(.info, "http.request", [
            "request_id": entry.requestID, "method": entry.method, "path": entry.path,
            "status": "\(entry.status)", "duration_us": "\(entry.durationMicroseconds)",
        ])
    })
    return HeadwayApplication(configuration: configuration, writer: writer, reader: reader, server: server, logger: logger,
                              routes: router.routes.map { ($0.method, $0.pattern) })
}
