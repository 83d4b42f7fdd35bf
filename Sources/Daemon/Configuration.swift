import ArgumentParsing
import EventStream
import Foundation
import HeadwayAPI
import HeadwayCore
import HeadwayStore
import HTTPServer
import Telemetry
import Webhooks

/// The daemon's settings, from command-line flags over `HEADWAY_…` environment variables
/// over the configuration file over defaults. The defaults are the initial values below (or
/// those of the sub-configurations: the broker's, maintenance's, the webhooks'); every other
/// fact about a setting (its name, range, help, what a reload does) is its entry of
/// `Setting.all`.
public struct Configuration: Sendable, Equatable {
    /// Where to listen: an IPv4 or IPv6 literal (or `localhost`) and a port (0 = any free port).
    public var host = "127.0.0.1"
    public var port = 8080
    /// A listening socket passed by systemd's socket activation; `host` and `port` are then
    /// the address it is bound to (and `--listen` is not used).
    public var inheritedListenFD: Int32?
    /// The SQLite database file, or the `postgresql://` URI of a PostgreSQL database.
    public var databasePath = "./headway.db"
    /// How long a start waits for a PostgreSQL server that takes no connections yet (down,
    /// starting up, recovering), in seconds; 0: not at all.
    public var databaseStartWaitSeconds = 60.0
    /// How long one statement may run on PostgreSQL, in seconds (its `statement_timeout`);
    /// a server that sends nothing for 5 s more is given up (`DatabaseAvailability`). Below
    /// systemd's stop timeout of the unit (20 s), so that a stop never waits longer on it.
    public var databaseTimeoutSeconds = 10.0
    public var durability = Durability.full
    /// The stall timeout of tasks registered without one, in seconds.
    public var stallTimeoutSeconds = 30.0
    /// The least severe log level written (SIGHUP rereads it from the configuration file).
    public var logLevel = LogLevel.info
    /// The file logs are appended to (reopened on SIGHUP, for log rotation); nil: stderr.
    public var logFilePath: String?
    /// The configuration file the settings were read from, reread on SIGHUP.
    public var configurationFilePath: String?
    /// The event broker's settings: keep-alives, subscribers, each stream's buffer, how many
    /// tasks wait for a slow subscriber, fan-out pacing.
    var broker = EventBroker.Settings()
    /// Whether `--max-subscribers` was given (its flag, its variable or a line of the
    /// configuration file): a number given that the open-file limit cannot hold is warned
    /// about at start, the default is lowered to what the limit holds and said at info
    /// (`OpenFileBudget`).
    var maximumSubscribersGiven = false
    /// The stall sweeper's and retention's settings.
    var maintenance = Maintenance.Settings()
    /// A response (an event stream or any other) whose socket takes nothing for this long
    /// while bytes wait is closed: the send stall timeout.
    public var streamStallTimeoutSeconds = 30.0
    /// Catch-up bytes (snapshots, replays) all event streams may hold in memory at once, a
    /// catch-up shared by several streams counted once; past it a new subscriber's
    /// catch-up is not read: its stream gets `retry:` and ends.
    public var maximumCatchUpBytes = 256 * 1024 * 1024
    /// Bytes of replies that may wait for their clients to take them
    /// (`UnreadReplyBudget`).
    public var maximumUnsentReplyBytes = 64 * 1024 * 1024
    /// The size the database's `-wal` file is brought back under once no reader holds an
    /// old snapshot (`GroupCommitWriter.limitWAL`).
    public var walSizeLimitBytes = GroupCommitWriter.defaultWALSizeLimit
    /// How deep, wide and many tasks may be.
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
    /// The daemon's public origins: names served besides the listen address, whose pages
    /// are the daemon's own.
    public var publicOrigins: [WebOrigin] = []
    /// The origins whose pages may call the API from a browser.
    public var corsOrigins: [CORSOrigin] = []
    /// HTTPS: the PEM certificate (chain) and its private key (`--tls-cert`, `--tls-key`;
    /// both or neither). nil: plain HTTP.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    // Webhooks.
    /// The deprecated webhook concurrency, if given: ignored (a warning at start). Every
    /// webhook has its own attempt in flight, all on one thread (`WebhookTransfers`), so no
    /// bound of attempts all webhooks share is left to set; still accepted, so that a
    /// configuration that gives it still starts.
    public var webhookConcurrency: Int?
    /// The webhook dispatcher's settings: each attempt's timeout, the retries, whether
    /// private addresses may be posted to.
    var webhooks = WebhookDispatcher.Settings()

    public init() {}

    /// The usage text of `headwayd --help`: the settings' rows come from `Setting.all`.
    public static let usage = """
        headwayd — the Headway progress-reporting daemon

        Usage: headwayd [options]
               headwayd token create --scope S [--scope S…] [--name N] [--task-prefix P]
                                     [--expires-in DURATION] --db PATH

        Options (each may also be set by the environment variable shown):

        """ + Setting.all.map { $0.helpRows + "\n" }.joined() + """
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

    /// Reads flags (`--name value` or `--name=value`) over environment variables over the
    /// configuration file (`--config`, `HEADWAY_CONFIG`) over defaults, the settings being
    /// those of `Setting.all`.
    public static func parse(arguments: [String], environment: [String: String]) throws(UsageError) -> Command {
        var fromEnvironment = SettingLayer()
        for setting in Setting.all {
            guard let value = environment[setting.environmentVariable] else { continue }
            if setting.shape == .list {
                fromEnvironment.lists[setting.name] = value.split(separator: ",").map {
                    SettingText(String($0.filter { !$0.isWhitespace }))
                }
            } else {
                fromEnvironment.values[setting.name] = SettingText(value)
            }
        }
        var fromFlags = SettingLayer()
        var scanner = ArgumentScanner(arguments, doubleDashEndsOptions: false)
        while let scanned = try nextArgument(&scanner) {
            switch scanned {
            case .short("-h"), .option("help", _): return .help
            case .option("version", _): return .version
            case .short(let text), .positional(let text): throw UsageError("unexpected argument '\(text)'")
            case .option(let name, let value):
                // A switch given without a value is turned on.
                let text = SettingText(value ?? "true")
                if Setting.named(name)?.shape == .list {
                    fromFlags.lists[name, default: []].append(text)
                } else {
                    fromFlags.values[name] = text
                }
            }
        }
        var settings = SettingLayer()
        let fileSetting = Setting.configurationFileName
        if let configurationFile = (fromFlags.values[fileSetting] ?? fromEnvironment.values[fileSetting])?.text {
            guard !configurationFile.isEmpty else { throw UsageError("--\(fileSetting) needs a file path") }
            settings = try ConfigurationFile.read(path: configurationFile)
        }
        settings.overlay(fromEnvironment)
        settings.overlay(fromFlags)
        return .run(try build(settings))
    }

    /// The next word of the command line: `--help` and `--version` take no value, a
    /// switch takes one only after `=`, every other setting of the table takes one.
    private static func nextArgument(_ scanner: inout ArgumentScanner) throws(UsageError) -> ScannedArgument? {
        do {
            return try scanner.next { name in
                if name == "help" || name == "version" { return .forbidden }
                return Setting.named(name).map { $0.shape == .switchFlag ? .optional : .required }
            }
        } catch {
            switch error {
            case .unknownOption(let name):
                let known = ["--help", "--version"] + Setting.all.map { "--" + $0.name }
                throw UsageError("unknown option '--\(name)'" + Suggestion.didYouMean("--" + name, among: known))
            case .needsValue(let name): throw UsageError("option '--\(name)' needs a value")
            case .takesNoValue(let name): throw UsageError("option '--\(name)' takes no value")
            }
        }
    }

    /// The configuration the settings give, each applied by its entry of `Setting.all`; a
    /// value refused is named with its flag, and with its file and line when it comes from
    /// the configuration file.
    private static func build(_ settings: SettingLayer) throws(UsageError) -> Configuration {
        var configuration = Configuration()
        for setting in Setting.all {
            let texts = setting.shape == .list ? settings.lists[setting.name] ?? [] : settings.values[setting.name].map { [$0] } ?? []
            for text in texts {
                do {
                    try setting.apply(text.text, &configuration)
                } catch {
                    throw UsageError(error.description, at: text.origin)
                }
            }
        }
        try checkTLSPair(settings)
        return configuration
    }

    /// HTTPS takes both files or neither (whether they can serve is checked at start).
    private static func checkTLSPair(_ settings: SettingLayer) throws(UsageError) {
        let certificate = settings.values[Setting.tlsCertificateName], key = settings.values[Setting.tlsKeyName]
        switch (certificate?.text, key?.text) {
        case (nil, nil): return
        case (let certificate?, let key?) where !certificate.isEmpty && !key.isEmpty: return
        case (_, nil), (_, ""):
            throw UsageError("--tls-cert needs --tls-key (the certificate's private key)", at: certificate?.origin)
        default:
            throw UsageError("--tls-key needs --tls-cert (the certificate of the key)", at: key?.origin)
        }
    }

    /// The settings, by flag name, whose value differs in `other`, in the order of
    /// `Setting.all`; those a reload does not compare are left out.
    public func settingsChanged(from other: Configuration) -> [String] {
        Setting.all.filter { $0.reload != .notCompared && $0.differs(self, other) }.map(\.name)
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

    /// Started by systemd's socket activation: serve the socket it passed (its address
    /// becomes `host` and `port`, for the loopback rule and the Host check), not
    /// `--listen`; the activation's variables are removed from the environment.
    public mutating func adoptInheritedSocket(environment: [String: String]) throws {
        guard let (fd, host, port) = try SocketActivation.inheritedListener(environment: environment) else { return }
        (inheritedListenFD, self.host, self.port) = (fd, host, port)
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
    }

    /// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost). Beyond
    /// loopback the daemon starts only once a token exists (checked at start, where the
    /// database is open).
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
