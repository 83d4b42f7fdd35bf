import Access
import ArgumentParsing
import HeadwayCore
import HeadwayStore

/// `headwayd token create`: makes a token offline, straight in the database (migrating it
/// first if need be), and prints its secret alone on stdout, once. The way to make the
/// first admin token; a daemon running on the same database sees the new token within
/// about a second.
public enum TokenCommand {
    /// The usage text of `headwayd token --help`.
    public static let usage = """
        Usage: headwayd token create --scope S [--scope S…] [--name N] [--task-prefix P]
                                     [--expires-in DURATION] [--db-start-wait SECONDS]
                                     --db PATH

        Makes an access token in the database at PATH and prints its secret alone on
        stdout. The secret is shown only this once; only its SHA-256 is stored.

          --scope S          report, read, control or admin (repeatable; admin allows all)
          --name N           a name for logs and listings (default: cli)
          --task-prefix P    the token sees and touches only tasks whose id starts with P
          --expires-in D     expires this long from now: seconds, or with s, m, h or d;
                             1 minute to 100 years (60 to 3155760000 s, 1m to 36525d);
                             without it the token never expires
          --db PATH|URI      the daemon's SQLite database (created if missing), or
                             its PostgreSQL database (postgresql://…)
          --db-start-wait S  how long to wait for a PostgreSQL server that takes no
                             connections yet (starting up, recovering), as the
                             daemon does at start; 0: do not wait (default: 60)

        """

    /// What `arguments` (after `token`) ask for.
    public enum Parsed: Equatable, Sendable {
        case help
        case create(TokenRequest, expiresInSeconds: Double?, databasePath: String, serverWaitSeconds: Double)
    }

    /// Reads `create` and its flags (`--name value` or `--name=value`).
    public static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        guard let verb = arguments.first else { throw UsageError("token needs a command: create") }
        if verb == "-h" || verb == "--help" { return .help }
        guard verb == "create" else { throw UsageError("unknown token command '\(verb)' (known: create)") }
        var scopes: Set<Scope> = []
        var name = "cli"
        var prefix: String?
        var expiresIn: Double?
        var databasePath: String?
        var serverWait = Configuration().databaseStartWaitSeconds
        let options = ["scope", "name", "task-prefix", "expires-in", "db", "db-start-wait"]
        var scanner = ArgumentScanner(Array(arguments.dropFirst()), doubleDashEndsOptions: false)
        while true {
            let scanned: ScannedArgument?
            do {
                scanned = try scanner.next { option in option == "help" ? .forbidden : options.contains(option) ? .required : nil }
            } catch {
                switch error {
                case .needsValue(let option): throw UsageError("option '--\(option)' needs a value")
                case .takesNoValue(let option): throw UsageError("option '--\(option)' takes no value")
                case .unknownOption(let option):
                    throw UsageError("unknown option '--\(option)' for token create"
                                     + Suggestion.didYouMean("--" + option, among: ["--help"] + options.map { "--" + $0 }))
                }
            }
            guard let scanned else { break }
            let flag: String, text: String
            switch scanned {
            case .short("-h"), .option("help", _): return .help
            case .short(let word), .positional(let word): throw UsageError("unknown option '\(word)' for token create")
            case .option(let option, let value): (flag, text) = ("--" + option, value ?? "")
            }
            switch flag {
            case "--scope":
                guard let scope = Scope(rawValue: text) else {
                    throw UsageError("--scope must be report, read, control or admin, not '\(text)'")
                }
                scopes.insert(scope)
            case "--name":
                guard !text.isEmpty, text.unicodeScalars.count <= Limits.nameLength else {
                    throw UsageError("--name must be 1 to \(Limits.nameLength) characters")
                }
                name = text
            case "--task-prefix":
                guard TaskIDPrefix.isValid(text) else {
                    throw UsageError("--task-prefix must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}, not '\(text)'")
                }
                prefix = text
            case "--expires-in":
                guard let seconds = Configuration.parseDuration(text), TokenRequest.isLifetimeAllowed(seconds: seconds) else {
                    throw UsageError("--expires-in must be a duration from 1 minute to 100 years (e.g. 3600, 90m, 12h, "
                                     + "30d; at most 36525d), not '\(text)'")
                }
                expiresIn = seconds
            case "--db-start-wait":
                serverWait = try Setting.seconds("db-start-wait", text, in: 0...86_400)
            default:
                guard !text.isEmpty else { throw UsageError("--db needs a file path") }
                databasePath = text
            }
        }
        guard !scopes.isEmpty else { throw UsageError("token create needs at least one --scope") }
        guard let databasePath else { throw UsageError("token create needs --db PATH") }
        return .create(TokenRequest(name: name, scopes: scopes, taskPrefix: prefix), expiresInSeconds: expiresIn,
                       databasePath: databasePath, serverWaitSeconds: serverWait)
    }

    /// Makes the token and returns its secret (the caller prints it). A PostgreSQL server
    /// that takes no connections yet is waited for up to `serverWaitSeconds`, as the daemon
    /// waits at start, with a line to `waiting` at once and every `waitReportSeconds`:
    /// a provisioning script runs the command right after starting the server. SIGINT
    /// or SIGTERM (blocked by the caller) ends the wait, and one for another daemon's
    /// migration: `StartInterrupted`; a server
    /// that takes no connections after it: `DatabaseServerUnreachable`.
    public static func create(_ request: TokenRequest, expiresInSeconds: Double?, databasePath: String,
                              serverWaitSeconds: Double = 0, waiting: (String) -> Void = { _ in },
                              clock: any WallClock = SystemClock()) throws -> String {
        try waitForDatabaseServer(databasePath, upTo: serverWaitSeconds) { waited, finding in
            waiting("waiting for the database server at \(redactedLocation(databasePath)): \(finding) "
                    + "(waited \(Int(waited)) s, gives up after \(Setting.plain(serverWaitSeconds)) s)")
        }
        _ = try setUpDatabase(databasePath)
        let database = try Database(path: databasePath)
        defer { database.close() }
        let now = clock.now()
        var request = request
        request.expiresAt = expiresInSeconds.map { now + Int64(($0 * 1000).rounded()) }
        let (token, secret) = try TokenCrypto.newToken(request, now: now)
        try database.inTransaction(.immediate) { try TokenRepository.insert(token, in: database) }
        return secret
    }
}
