import Foundation
import HeadwayAPI
import HeadwayCore
import HeadwayStore
import HTTPServer
import Telemetry

/// The daemon's settings, from command-line flags over `HEADWAY_…` environment variables
/// over defaults.
public struct Configuration: Sendable, Equatable {
    /// Where to listen: an IPv4 or IPv6 literal (or `localhost`) and a port (0 = any free port).
    public var host = "127.0.0.1"
    public var port = 8080
    /// A listening socket passed by systemd's socket activation; `host` and `port` are then
    /// the address it is bound to (and `--listen` is not used).
    public var inheritedListenFD: Int32?
    /// The SQLite database file, or the `postgresql://` URI of a PostgreSQL database.
    public var databasePath = "./headway.db"
    public var durability = Durability.full
    /// The stall timeout of tasks registered without one, in seconds.
    public var stallTimeoutSeconds = 30.0
    /// The least severe log level written (SIGHUP rereads it from the configuration file).
    public var logLevel = LogLevel.info
    /// The file logs are appended to (reopened on SIGHUP, for log rotation); nil: stderr.
    public var logFilePath: String?
    /// The configuration file the settings were read from (`--config`), reread on SIGHUP.
    public var configurationFilePath: String?
    /// Seconds between keep-alive comments on event streams.
    public var sseHeartbeatSeconds = 15.0
    /// Event-stream subscribers served at once; more get 503.
    public var maximumSubscribers = 10_000
    /// Finished tasks, their history and tombstones are forgotten this long after.
    public var retentionSeconds = 7 * 86_400.0
    /// The cap on one event stream's unsent bytes, its catch-up aside (which is shared,
    /// not owned); past it the stream is closed and its client resumes. From a quarter of
    /// it further events wait, coalesced per task.
    public var streamBufferBytes = 256 * 1024
    /// A response (an event stream or any other) whose socket takes nothing for this long
    /// while bytes wait is closed: the send stall timeout.
    public var streamStallTimeoutSeconds = 30.0
    /// Catch-up bytes (snapshots, replays) all event streams may hold in memory at once, a
    /// catch-up shared by several streams counted once; past it a new subscriber's
    /// catch-up is not read: its stream gets `retry:` and ends.
    public var maximumCatchUpBytes = 256 * 1024 * 1024
    /// Bytes of replies that may wait for their clients to take them
    /// (`--max-unsent-reply-bytes`; `UnreadReplyBudget`).
    public var maximumUnsentReplyBytes = 64 * 1024 * 1024
    /// The size the database's `-wal` file is brought back under once no reader holds an
    /// old snapshot (`GroupCommitWriter.limitWAL`).
    public var walSizeLimitBytes = GroupCommitWriter.defaultWALSizeLimit
    /// Tasks waiting for one slow subscriber before it is disconnected (it then resumes).
    public var maximumPendingTasks = 2048
    /// When fan-out rounds may start during an update storm.
    public var fanOutPacing = FanOutPacing()
    /// How deep, wide and many tasks may be (`--max-depth`, `--max-children`, `--max-tasks`).
    public var treeLimits = TreeLimits()
    /// Tokens neither revoked nor expired there may be at once; `POST /v1/tokens` past it
    /// gets 422 `too_many_tokens` (`headwayd token create` is not bounded).
    public var maximumTokens = 10_000
    /// Reader connections of each read pool (API reads; event-stream catch-ups).
    public var readConnections = 2
    /// API reads that may wait for a reader connection; more get 503 `server_busy`.
    public var maximumQueuedReads = 1000
    /// Bytes of one request body; larger bodies get 413 `body_too_large`.
    public var maximumBodyBytes = 64 * 1024
    /// Items one batch of progress reports (`POST /v1/progress`) may hold; more get 413
    /// `too_many_items`.
    public var maximumBatchItems = ProgressBatch.defaultMaximumItems
    /// Query parameters one request may carry; more get 431 (60 `task=` ids fit).
    public var maximumQueryParameters = 100
    // Connection floods.
    /// Seconds a connection has to send a whole request head, from its opening or its
    /// previous response; then it is closed.
    public var headTimeoutSeconds = 10.0
    /// Seconds a request has, from its whole head, to send the whole body it announced;
    /// then its connection is closed.
    public var bodyTimeoutSeconds = 30.0
    /// Connections open at once from one client address; more are closed at once.
    public var maximumConnectionsPerAddress = 1000
    // Browsers.
    /// The origins of `--public-url`: names served besides the listen address, whose pages
    /// are the daemon's own.
    public var publicOrigins: [WebOrigin] = []
    /// `--cors-origin`: pages that may call the API from a browser.
    public var corsOrigins: [CORSOrigin] = []
    /// HTTPS: the PEM certificate (chain) and its private key (`--tls-cert`, `--tls-key`;
    /// both or neither). nil: plain HTTP.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    // Webhooks.
    /// `--webhook-concurrency`, if given: deprecated and ignored (a warning at start). Every
    /// webhook has its own attempt in flight, all on one thread (`WebhookTransfers`), so no
    /// bound of attempts all webhooks share is left to set; still accepted, so that a
    /// configuration that gives it still starts.
    public var webhookConcurrency: Int?
    /// Seconds one delivery attempt may take, its host's lookup included; also the
    /// longest a new webhook's check waits for that lookup (`--webhook-timeout`).
    public var webhookTimeoutSeconds = 10.0
    /// When failed deliveries are retried, and for how long (`--webhook-retry-base`,
    /// `--webhook-retry-for`, `--webhook-retry-jitter`).
    public var webhookRetry = WebhookRetryPolicy()
    /// Whether webhooks may post to loopback, private and other non-public addresses
    /// (`--webhook-allow-private`).
    public var webhookAllowPrivate = false

    public init() {}

    /// The usage text of `headwayd --help`.
    public static let usage = """
        headwayd — the Headway progress-reporting daemon

        Usage: headwayd [options]
               headwayd token create --scope S [--scope S…] [--name N] [--task-prefix P]
                                     [--expires-in DURATION] --db PATH

        Options (each may also be set by the environment variable shown):
          --listen HOST:PORT        address to serve HTTP on; loopback only until tokens
                                    exist (HEADWAY_LISTEN, default 127.0.0.1:8080;
                                    IPv6 as [::1]:8080; port 0 picks a free port)
          --db PATH|URI             SQLite database file, created if missing; or a
                                    PostgreSQL database, postgresql://USER@HOST/DB,
                                    which several daemons may share
                                    (HEADWAY_DB, default ./headway.db)
          --durability full|normal  full: a reply means the change survives power loss;
                                    normal: it survives a crash of the daemon
                                    (HEADWAY_DURABILITY, default full)
          --stall-timeout SECONDS   stall timeout of tasks registered without one
                                    (HEADWAY_STALL_TIMEOUT, default 30)
          --log-level LEVEL         debug, info, warn or error; requests log at info
                                    (HEADWAY_LOG_LEVEL, default info)
          --log-file PATH           append logs to this file, created with mode 0640
                                    if missing; SIGHUP reopens it, for log rotation
                                    (HEADWAY_LOG_FILE, default: stderr)
          --config FILE             read settings from FILE, one 'name = value' per
                                    line with the option names above ('log-level =
                                    debug'; '#' starts a comment line); flags and
                                    variables win over it; SIGHUP rereads it
                                    (HEADWAY_CONFIG, default: none)
          --sse-heartbeat SECONDS   keep-alive comment interval on event streams
                                    (HEADWAY_SSE_HEARTBEAT, default 15)
          --max-subscribers N       event-stream subscribers served at once; more get
                                    503 (HEADWAY_MAX_SUBSCRIBERS, default 10000)
          --retention DURATION      forget finished tasks, their history and deletions
                                    this long after: seconds, or with s, m, h or d
                                    (HEADWAY_RETENTION, default 7d)
          --max-depth N             deepest a task may be, a root being 1; deeper
                                    registrations get 422 tree_too_deep
                                    (HEADWAY_MAX_DEPTH, default 32)
          --max-children N          unfinished children one task may have at once; more
                                    get 422 too_many_children (HEADWAY_MAX_CHILDREN,
                                    default 10000)
          --max-tasks N             tasks stored at once; more get 503 storage_full
                                    (HEADWAY_MAX_TASKS, default 10000000)
          --max-tokens N            tokens neither revoked nor expired at once; more
                                    get 422 too_many_tokens (headwayd token create is
                                    not bounded) (HEADWAY_MAX_TOKENS, default 10000)
          --read-connections N      database connections for API reads, and as many
                                    again for event-stream catch-ups, read side by side
                                    (HEADWAY_READ_CONNECTIONS, default 2)
          --max-queued-reads N      API reads that may wait for a connection; more get
                                    503 server_busy (HEADWAY_MAX_QUEUED_READS, default 1000)
          --max-body-bytes N        bytes of one request body; larger ones get 413
                                    body_too_large (HEADWAY_MAX_BODY_BYTES, default 65536)
          --max-batch-items N       updates one POST /v1/progress may carry; more get
                                    413 too_many_items (HEADWAY_MAX_BATCH_ITEMS, default
                                    1000; its body may take 1 MiB, or --max-body-bytes)
          --max-query-params N      query parameters one request may carry; more get
                                    431 (HEADWAY_MAX_QUERY_PARAMS, default 100)
          --head-timeout SECONDS    time a connection has to send a whole request head,
                                    from its opening or its previous response, then it
                                    is closed (HEADWAY_HEAD_TIMEOUT, default 10)
          --body-timeout SECONDS    time a request has, from its whole head, to send the
                                    whole body it announced, then its connection is
                                    closed (HEADWAY_BODY_TIMEOUT, default 30)
          --max-connections-per-address N
                                    connections open at once from one client address;
                                    more are closed at once
                                    (HEADWAY_MAX_CONNECTIONS_PER_ADDRESS, default 1000)
          --stream-buffer-bytes N   bytes one event stream may hold unsent (its catch-up
                                    aside); past it the stream is closed and its client
                                    resumes (HEADWAY_STREAM_BUFFER_BYTES, default 262144)
          --stream-stall-timeout SECONDS
                                    close a response (event stream or other) whose
                                    client took nothing for this long while bytes wait
                                    (HEADWAY_STREAM_STALL_TIMEOUT, default 30)
          --max-catch-up-bytes N    bytes of catch-ups (snapshots, replays) all event
                                    streams may hold unsent at once, an eighth per
                                    client (token, else address) but for one catch-up
                                    while it holds none; past it a new subscriber gets
                                    retry: and its stream ends
                                    (HEADWAY_MAX_CATCH_UP_BYTES, default 268435456)
          --max-unsent-reply-bytes N
                                    bytes of API replies (pages of tasks…) that may
                                    wait for their clients to read them; one client
                                    may hold a quarter; past it a new read is 503
                                    server_busy (HEADWAY_MAX_UNSENT_REPLY_BYTES,
                                    default 67108864)
          --wal-size-limit N        bytes the -wal file is brought back under once no
                                    reader (a sqlite3 shell, a backup) holds an old
                                    snapshot (HEADWAY_WAL_SIZE_LIMIT, default 33554432)
          --public-url URL          a URL the daemon is reached at, e.g. behind a proxy
                                    (https://headway.example.com): its host is served
                                    besides the listen address and localhost, and its
                                    pages may change tasks; repeat for several
                                    (HEADWAY_PUBLIC_URL, comma-separated)
          --cors-origin ORIGIN      an origin (https://dash.example.com) whose pages may
                                    call the API from a browser, or '*' for any page
                                    (refused at start until a token exists); repeat
                                    for several (HEADWAY_CORS_ORIGIN, comma-separated)
          --tls-cert FILE           serve HTTPS with this PEM certificate (its chain
                                    after it); needs --tls-key; SIGHUP reloads both
                                    (HEADWAY_TLS_CERT, default: plain HTTP)
          --tls-key FILE            the PEM private key of --tls-cert, unencrypted
                                    (HEADWAY_TLS_KEY)
          --webhook-concurrency N   deprecated, ignored (a warning at start): every
                                    webhook has its own delivery in flight
                                    (HEADWAY_WEBHOOK_CONCURRENCY)
          --webhook-timeout SECONDS time one delivery attempt may take, its host's
                                    lookup included (HEADWAY_WEBHOOK_TIMEOUT,
                                    default 10)
          --webhook-retry-base SECONDS
                                    bound of the first retry's delay after a failed
                                    delivery, doubled after each (at most 10 min)
                                    (HEADWAY_WEBHOOK_RETRY_BASE, default 1)
          --webhook-retry-for DURATION
                                    give a delivery up this long after its event:
                                    seconds, or with s, m, h or d
                                    (HEADWAY_WEBHOOK_RETRY_FOR, default 24h)
          --webhook-retry-jitter full|none
                                    full: each retry's delay is random below its
                                    bound; none: the bound itself
                                    (HEADWAY_WEBHOOK_RETRY_JITTER, default full)
          --webhook-allow-private   let webhooks post to loopback, private, link-local
                                    and other non-public addresses (refused by default)
                                    (HEADWAY_WEBHOOK_ALLOW_PRIVATE=true)
          --version                 print the version and exit
          -h, --help                show this text

        Logs go to stderr (or --log-file), one line per event. SIGTERM or SIGINT stops the
        daemon cleanly; a second one during a slow stop ends it at once. SIGHUP reloads the TLS
        certificate and key (open connections keep theirs; a bad file keeps the old),
        reopens the log file and rereads the configuration file: the log level changes at
        once, other changed settings wait for a restart, a bad file changes nothing.

        """

    /// What the command line asks for.
    public enum Command: Equatable, Sendable {
        case run(Configuration)
        case help
        case version
    }

    /// The settings a flag, a variable or a configuration-file line may give, by flag name.
    static let settingNames = ["listen", "db", "durability", "stall-timeout", "log-level", "sse-heartbeat",
                               "max-subscribers", "retention",
                               "max-depth", "max-children", "max-tasks", "max-tokens",
                               "read-connections", "max-queued-reads",
                               "max-body-bytes", "max-batch-items", "max-query-params",
                               "head-timeout", "body-timeout", "max-connections-per-address",
                               "stream-buffer-bytes", "stream-stall-timeout", "max-catch-up-bytes",
                               "max-unsent-reply-bytes", "wal-size-limit",
                               "public-url", "cors-origin", "tls-cert", "tls-key", "log-file", "config",
                               "webhook-concurrency", "webhook-timeout", "webhook-retry-base", "webhook-retry-for",
                               "webhook-retry-jitter", "webhook-allow-private"]
    /// Settings that are switches: a flag without a value turns them on (`--name=false`
    /// turns one off); their variable and file line take true or false.
    static let switchSettings: Set<String> = ["webhook-allow-private"]
    /// Settings that may repeat, each adding a value; their variable holds a comma-separated
    /// list, and a layer that gives them replaces the list of the layers below.
    static let repeatableSettings: Set<String> = ["public-url", "cors-origin"]

    /// Reads flags (`--name value` or `--name=value`) over environment variables over the
    /// configuration file (`--config`, `HEADWAY_CONFIG`) over defaults.
    public static func parse(arguments: [String], environment: [String: String]) throws(UsageError) -> Command {
        var fromEnvironment = SettingLayer()
        for name in settingNames {
            let variable = "HEADWAY_" + name.uppercased().replacingHyphens()
            guard let value = environment[variable] else { continue }
            if repeatableSettings.contains(name) {
                fromEnvironment.lists[name] = value.split(separator: ",").map {
                    SettingText(String($0.filter { !$0.isWhitespace }))
                }
            } else {
                fromEnvironment.values[name] = SettingText(value)
            }
        }
        var fromFlags = SettingLayer()
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "-h" || argument == "--help" { return .help }
            if argument == "--version" { return .version }
            guard argument.hasPrefix("--") else { throw UsageError("unexpected argument '\(argument)'") }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if ["help", "version"].contains(name) { throw UsageError("option '--\(name)' takes no value") }
            guard settingNames.contains(name) else { throw UsageError("unknown option '--\(name)'") }
            if value == nil && switchSettings.contains(name) { value = "true" }
            if value == nil {
                guard index < arguments.count else { throw UsageError("option '--\(name)' needs a value") }
                value = arguments[index]
                index += 1
            }
            if let value, repeatableSettings.contains(name) {
                fromFlags.lists[name, default: []].append(SettingText(value))
            } else {
                fromFlags.values[name] = value.map { SettingText($0) }
            }
        }
        var settings = SettingLayer()
        let configurationFile = (fromFlags.values["config"] ?? fromEnvironment.values["config"])?.text
        if let configurationFile {
            guard !configurationFile.isEmpty else { throw UsageError("--config needs a file path") }
            settings = try ConfigurationFile.read(path: configurationFile)
        }
        settings.overlay(fromEnvironment)
        settings.overlay(fromFlags)
        var configuration = try build(SettingReader(settings))
        configuration.configurationFilePath = configurationFile
        return .run(configuration)
    }

    /// The configuration the settings give; a value refused is named with its flag, and
    /// with its file and line when it comes from the configuration file.
    private static func build(_ reader: SettingReader) throws(UsageError) -> Configuration {
        var configuration = Configuration()
        if let (host, port) = try reader.value("listen", parseListen) {
            (configuration.host, configuration.port) = (host, port)
        }
        if let path = try reader.value("db", { path throws(UsageError) in
            guard !path.isEmpty else { throw UsageError("--db needs a file path") }
            return path
        }) {
            configuration.databasePath = path
        }
        if let durability = try reader.value("durability", { text throws(UsageError) in
            guard let durability = Durability(rawValue: text) else {
                throw UsageError("--durability must be full or normal, not '\(text)'")
            }
            return durability
        }) {
            configuration.durability = durability
        }
        if let level = try reader.value("log-level", { text throws(UsageError) in
            guard let level = LogLevel(name: text) else {
                throw UsageError("--log-level must be debug, info, warn or error, not '\(text)'")
            }
            return level
        }) {
            configuration.logLevel = level
        }
        configuration.logFilePath = try reader.value("log-file") { path throws(UsageError) in
            guard !path.isEmpty else { throw UsageError("--log-file needs a file path") }
            return path
        }
        if let seconds = try reader.value("retention", { text throws(UsageError) in
            guard let seconds = parseDuration(text), (60...315_360_000).contains(seconds) else {
                throw UsageError("--retention must be a duration from 60s to 3650d (e.g. 7d, 12h, 3600), not '\(text)'")
            }
            return seconds
        }) {
            configuration.retentionSeconds = seconds
        }
        try reader.seconds("stall-timeout", in: 1...2_592_000, into: &configuration.stallTimeoutSeconds)
        try reader.seconds("sse-heartbeat", in: 0.1...3600, into: &configuration.sseHeartbeatSeconds)
        try reader.wholeNumber("max-subscribers", in: 0...1_000_000, into: &configuration.maximumSubscribers)
        // Limits: how deep, wide and many tasks may be.
        try reader.wholeNumber("max-depth", in: 1...10_000, into: &configuration.treeLimits.maximumDepth)
        try reader.wholeNumber("max-children", in: 1...100_000_000, into: &configuration.treeLimits.maximumChildren)
        try reader.wholeNumber("max-tasks", in: 1...1_000_000_000_000, into: &configuration.treeLimits.maximumTasks)
        try reader.wholeNumber("max-tokens", in: 1...1_000_000, into: &configuration.maximumTokens)
        // Limits: reads.
        try reader.wholeNumber("read-connections", in: 1...64, into: &configuration.readConnections)
        try reader.wholeNumber("max-queued-reads", in: 0...1_000_000, into: &configuration.maximumQueuedReads)
        // Limits: requests and connections.
        try reader.wholeNumber("max-body-bytes", in: 1024...16_777_216, into: &configuration.maximumBodyBytes)
        try reader.wholeNumber("max-batch-items", in: 1...10_000, into: &configuration.maximumBatchItems)
        try reader.wholeNumber("max-query-params", in: 1...1000, into: &configuration.maximumQueryParameters)
        try reader.seconds("head-timeout", in: 0.1...3600, into: &configuration.headTimeoutSeconds)
        try reader.seconds("body-timeout", in: 0.1...3600, into: &configuration.bodyTimeoutSeconds)
        try reader.wholeNumber("max-connections-per-address", in: 1...1_000_000,
                               into: &configuration.maximumConnectionsPerAddress)
        // Limits: event streams.
        try reader.wholeNumber("stream-buffer-bytes", in: 4096...1_073_741_824, into: &configuration.streamBufferBytes)
        try reader.seconds("stream-stall-timeout", in: 0.1...86_400, into: &configuration.streamStallTimeoutSeconds)
        try reader.wholeNumber("max-catch-up-bytes", in: 1_048_576...1_099_511_627_776,
                               into: &configuration.maximumCatchUpBytes)
        try reader.wholeNumber("max-unsent-reply-bytes", in: 1_048_576...1_099_511_627_776,
                               into: &configuration.maximumUnsentReplyBytes)
        // Storage.
        try reader.wholeNumber("wal-size-limit", in: 1_048_576...1_099_511_627_776,
                               into: &configuration.walSizeLimitBytes)
        // Browsers.
        configuration.publicOrigins = try reader.list("public-url") { text throws(UsageError) in
            try WebOrigin.parsePublicURL(text)
        }
        configuration.corsOrigins = try reader.list("cors-origin") { text throws(UsageError) in
            try CORSOrigin.parse(text)
        }
        // Webhooks.
        // Deprecated: still read (a bad value is still refused), then ignored.
        var concurrency = 0
        try reader.wholeNumber("webhook-concurrency", in: 1...256, into: &concurrency)
        if concurrency > 0 { configuration.webhookConcurrency = concurrency }
        try reader.seconds("webhook-timeout", in: 0.1...600, into: &configuration.webhookTimeoutSeconds)
        var retryBase = Double(configuration.webhookRetry.baseMilliseconds) / 1000
        try reader.seconds("webhook-retry-base", in: 0.01...600, into: &retryBase)
        configuration.webhookRetry.baseMilliseconds = Int64((retryBase * 1000).rounded())
        if let seconds = try reader.value("webhook-retry-for", { text throws(UsageError) in
            guard let seconds = parseDuration(text), (1...2_592_000).contains(seconds) else {
                throw UsageError("--webhook-retry-for must be a duration from 1s to 30d (e.g. 24h, 90m, 3600), not '\(text)'")
            }
            return seconds
        }) {
            configuration.webhookRetry.giveUpAfterMilliseconds = Int64((seconds * 1000).rounded())
        }
        if let jitter = try reader.value("webhook-retry-jitter", { text throws(UsageError) in
            guard text == "full" || text == "none" else {
                throw UsageError("--webhook-retry-jitter must be full or none, not '\(text)'")
            }
            return text == "full"
        }) {
            configuration.webhookRetry.jitter = jitter
        }
        if let allow = try reader.value("webhook-allow-private", { text throws(UsageError) in
            switch text.lowercased() {
            case "true", "1", "yes", "on": return true
            case "false", "0", "no", "off": return false
            default: throw UsageError("--webhook-allow-private takes no value, or true or false, not '\(text)'")
            }
        }) {
            configuration.webhookAllowPrivate = allow
        }
        // HTTPS: both files or neither (whether they can serve is checked at start).
        let certificate = reader.settings.values["tls-cert"], key = reader.settings.values["tls-key"]
        switch (certificate?.text, key?.text) {
        case (nil, nil): break
        case (let certificate?, let key?) where !certificate.isEmpty && !key.isEmpty:
            configuration.tlsCertificatePath = certificate
            configuration.tlsKeyPath = key
        case (_, nil), (_, ""):
            throw UsageError("--tls-cert needs --tls-key (the certificate's private key)", at: certificate?.origin)
        default:
            throw UsageError("--tls-key needs --tls-cert (the certificate of the key)", at: key?.origin)
        }
        return configuration
    }

    /// The settings, by flag name, whose value differs in `other` (for a reload, which
    /// applies the log level and leaves the others for a restart).
    public func settingsChanged(from other: Configuration) -> [String] {
        let differences: [(String, Bool)] = [
            ("listen", (host, port, inheritedListenFD) != (other.host, other.port, other.inheritedListenFD)),
            ("db", databasePath != other.databasePath),
            ("durability", durability != other.durability),
            ("stall-timeout", stallTimeoutSeconds != other.stallTimeoutSeconds),
            ("log-level", logLevel != other.logLevel),
            ("log-file", logFilePath != other.logFilePath),
            ("sse-heartbeat", sseHeartbeatSeconds != other.sseHeartbeatSeconds),
            ("max-subscribers", maximumSubscribers != other.maximumSubscribers),
            ("retention", retentionSeconds != other.retentionSeconds),
            ("max-depth", treeLimits.maximumDepth != other.treeLimits.maximumDepth),
            ("max-children", treeLimits.maximumChildren != other.treeLimits.maximumChildren),
            ("max-tasks", treeLimits.maximumTasks != other.treeLimits.maximumTasks),
            ("max-tokens", maximumTokens != other.maximumTokens),
            ("read-connections", readConnections != other.readConnections),
            ("max-queued-reads", maximumQueuedReads != other.maximumQueuedReads),
            ("max-body-bytes", maximumBodyBytes != other.maximumBodyBytes),
            ("max-batch-items", maximumBatchItems != other.maximumBatchItems),
            ("max-query-params", maximumQueryParameters != other.maximumQueryParameters),
            ("head-timeout", headTimeoutSeconds != other.headTimeoutSeconds),
            ("body-timeout", bodyTimeoutSeconds != other.bodyTimeoutSeconds),
            ("max-connections-per-address", maximumConnectionsPerAddress != other.maximumConnectionsPerAddress),
            ("stream-buffer-bytes", streamBufferBytes != other.streamBufferBytes),
            ("stream-stall-timeout", streamStallTimeoutSeconds != other.streamStallTimeoutSeconds),
            ("max-catch-up-bytes", maximumCatchUpBytes != other.maximumCatchUpBytes),
            ("max-unsent-reply-bytes", maximumUnsentReplyBytes != other.maximumUnsentReplyBytes),
            ("wal-size-limit", walSizeLimitBytes != other.walSizeLimitBytes),
            ("public-url", publicOrigins != other.publicOrigins),
            ("cors-origin", corsOrigins != other.corsOrigins),
            ("tls-cert", tlsCertificatePath != other.tlsCertificatePath),
            ("tls-key", tlsKeyPath != other.tlsKeyPath),
            ("webhook-timeout", webhookTimeoutSeconds != other.webhookTimeoutSeconds),
            ("webhook-retry-base", webhookRetry.baseMilliseconds != other.webhookRetry.baseMilliseconds),
            ("webhook-retry-for", webhookRetry.giveUpAfterMilliseconds != other.webhookRetry.giveUpAfterMilliseconds),
            ("webhook-retry-jitter", webhookRetry.jitter != other.webhookRetry.jitter),
            ("webhook-allow-private", webhookAllowPrivate != other.webhookAllowPrivate),
        ]
        return differences.filter(\.1).map(\.0)
    }

    /// Seconds in `text`: a plain decimal number, optionally followed by s, m, h or d.
    static func parseDuration(_ text: String) -> Double? { DurationText.seconds(text) }

    /// Splits `HOST:PORT` (`[v6]:PORT` for IPv6).
    static func parseListen(_ text: String) throws(UsageError) -> (String, Int) {
        let host: String
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw UsageError("--listen must be HOST:PORT or [IPv6]:PORT, not '\(text)'")
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                throw UsageError("--listen must be HOST:PORT, not '\(text)'")
            }
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        guard let port = Int(portText), (0...65535).contains(port) else {
            throw UsageError("--listen port must be a number from 0 to 65535, not '\(portText)'")
        }
        guard !host.isEmpty else { throw UsageError("--listen must name a host, not '\(text)'") }
        return (host, port)
    }

    /// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost). Beyond
    /// loopback the daemon starts only once a token exists (checked at start, where the
    /// database is open).
    /// Started by systemd's socket activation: serve the socket it passed (its address
    /// becomes `host` and `port`, for the loopback rule and the Host check), not
    /// `--listen`; the activation's variables are removed from the environment.
    public mutating func adoptInheritedSocket(environment: [String: String]) throws {
        guard let (fd, host, port) = try SocketActivation.inheritedListener(environment: environment) else { return }
        (inheritedListenFD, self.host, self.port) = (fd, host, port)
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
    }

    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

extension String {
    fileprivate func replacingHyphens() -> String { String(map { $0 == "-" ? "_" : $0 }) }
}

/// Reads settings by flag name, refusing a value out of range with a usage error that names
/// the flag and the range (and the file and line of a value from the configuration file).
struct SettingReader {
    let settings: SettingLayer

    init(_ settings: SettingLayer) { self.settings = settings }

    /// The setting `name` converted by `convert`, nil if not given; an error of `convert`
    /// is prefixed with the file and line the value comes from, if it comes from a file.
    func value<Value>(_ name: String, _ convert: (String) throws(UsageError) -> Value) throws(UsageError) -> Value? {
        guard let setting = settings.values[name] else { return nil }
        do {
            return try convert(setting.text)
        } catch {
            throw UsageError(error.description, at: setting.origin)
        }
    }

    /// Each value of the repeatable setting `name` converted by `convert` (none if not given).
    func list<Value>(_ name: String, _ convert: (String) throws(UsageError) -> Value) throws(UsageError) -> [Value] {
        var values: [Value] = []
        for setting in settings.lists[name] ?? [] {
            do {
                values.append(try convert(setting.text))
            } catch {
                throw UsageError(error.description, at: setting.origin)
            }
        }
        return values
    }

    /// Sets `value` from the setting `name`, a whole number within `range`, if given.
    func wholeNumber<Number: FixedWidthInteger>(_ name: String, in range: ClosedRange<Number>,
                                                into value: inout Number) throws(UsageError) {
        guard let number = try self.value(name, { text throws(UsageError) in
            guard let number = Number(text), range.contains(number) else {
                throw UsageError("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return number
        }) else { return }
        value = number
    }

    /// Sets `value` from the setting `name`, a number of seconds within `range`, if given.
    func seconds(_ name: String, in range: ClosedRange<Double>, into value: inout Double) throws(UsageError) {
        guard let seconds = try self.value(name, { text throws(UsageError) in
            guard let seconds = Double(text), seconds.isFinite, range.contains(seconds) else {
                throw UsageError("--\(name) must be a number of seconds from \(Self.plain(range.lowerBound)) to "
                                 + "\(Self.plain(range.upperBound)), not '\(text)'")
            }
            return seconds
        }) else { return }
        value = seconds
    }

    /// `3600` rather than `3600.0`.
    private static func plain(_ number: Double) -> String {
        number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}
