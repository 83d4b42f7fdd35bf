import Foundation
import HeadwayAPI
import HeadwayCore
import HeadwayStore
import Telemetry

/// One setting of the daemon, declared once in `Setting.all`: its name (the long option,
/// the configuration file's name), its environment variable (derived from the name), the
/// value it takes and its range, where the value lands in `Configuration` (whose property
/// initializers hold the defaults), its line of help, and what SIGHUP does with it.
/// `headwayd --help`, the flags, the environment, the configuration file and the reload
/// diff all read this table.
struct Setting: Sendable {
    /// What a reload (SIGHUP) does with a changed value.
    enum Reload: Sendable {
        /// Applied at once (the log level). The mark only keeps the setting out of the
        /// restart-needed lines: `Reload.apply` applies each such setting by hand, and
        /// `SettingsTableTests` fails until a new one is added there too.
        case appliedAtOnce
        /// Logged as waiting for a restart; the running value stays.
        case atRestart
        /// Not compared: the configuration file's own path (the arguments and the
        /// environment a reload reads are those of the start), and deprecated settings.
        case notCompared
    }

    /// How the command line gives the setting.
    enum Shape: Sendable, Equatable {
        /// `--name VALUE` or `--name=VALUE`.
        case value
        /// `--name` alone turns it on, `--name=false` off; its variable and file line take
        /// true or false.
        case switchFlag
        /// May repeat, each adding a value; its variable holds a comma-separated list, and a
        /// source that gives it replaces the whole list of the sources below.
        case list
    }

    /// The long option without its dashes, as the configuration file names it too.
    let name: String
    /// The placeholder of its value in the help (`SECONDS`); empty for a switch.
    let valueName: String
    let shape: Shape
    let reload: Reload
    /// Whether a configuration-file line may give it (all but `config` itself).
    let readFromFile: Bool
    /// A valid value other than the default (tests give each setting one through every source).
    let example: String
    /// The help, wrapped at 52 columns; `{variable}` and `{default}` stand for the
    /// environment variable and the default's text.
    let help: String
    /// Turns the text into the value and sets it (a list setting appends it); a value out
    /// of range is a usage error that names the flag and the range.
    let apply: @Sendable (String, inout Configuration) throws(UsageError) -> Void
    /// The text of the setting's value in `configuration` as the help shows the default, or
    /// nil when the help shows none.
    let shownValue: @Sendable (Configuration) -> String?
    /// Whether the two configurations hold different values of the setting.
    let differs: @Sendable (Configuration, Configuration) -> Bool

    /// `HEADWAY_` and the name in capitals, hyphens as underscores.
    var environmentVariable: String { "HEADWAY_" + String(name.uppercased().map { $0 == "-" ? "_" : $0 }) }

    /// The setting named `name`, or nil.
    static func named(_ name: String) -> Setting? { byName[name] }
    private static let byName = Dictionary(uniqueKeysWithValues: all.map { ($0.name, $0) })

    /// The name of the setting that names the configuration file (read before the others).
    static let configurationFileName = "config"
}

extension Setting {
    /// Every setting of the daemon, in the order of `headwayd --help` (and of the reload
    /// diff). To add one: a property in `Configuration` (or the sub-configuration of the part
    /// it sets) with its default, and an entry here.
    static let all: [Setting] = [
        Setting(name: "listen", valueName: "HOST:PORT", shape: .value, reload: .atRestart, readFromFile: true,
                example: "127.0.0.1:9999", help: """
            address to serve HTTP on; loopback only until tokens
            exist ({variable}, default {default};
            IPv6 as [::1]:8080; port 0 picks a free port)
            """,
            apply: { text, configuration throws(UsageError) in
                (configuration.host, configuration.port) = try Configuration.parseListen(text)
            },
            shownValue: { "\($0.host):\($0.port)" },
            differs: { ($0.host, $0.port, $0.inheritedListenFD) != ($1.host, $1.port, $1.inheritedListenFD) }),
        .value("db", "PATH|URI", at: \.databasePath, example: "/tmp/headway-example.db", help: """
            SQLite database file, created if missing; or a
            PostgreSQL database, postgresql://USER@HOST/DB,
            which several daemons may share
            ({variable}, default {default})
            """, show: { $0 }, convert: nonEmptyPath("db")),
        .seconds("db-start-wait", at: \.databaseStartWaitSeconds, in: 0...86_400, help: """
            at start, how long to wait for a PostgreSQL server
            that takes no connections yet (down, starting up,
            recovering) before giving up; 0: do not wait
            ({variable}, default {default})
            """),
        .seconds("db-timeout", at: \.databaseTimeoutSeconds, in: 1...3600, help: """
            on PostgreSQL, the longest one statement may run:
            the server cancels it past this; a server that
            sends nothing for 5 s more (frozen) is given up and
            its requests answered 503
            ({variable}, default {default})
            """),
        .choice("durability", "full|normal", at: \.durability, names: Durability.allCases.map(\.rawValue),
                parse: Durability.init(rawValue:), show: \.rawValue, help: """
            full: a reply means the change survives power loss;
            normal: it survives a crash of the daemon
            ({variable}, default {default})
            """),
        .seconds("stall-timeout", at: \.stallTimeoutSeconds, in: 1...2_592_000, help: """
            stall timeout of tasks registered without one
            ({variable}, default {default})
            """),
        .choice("log-level", "LEVEL", at: \.logLevel, names: ["debug", "info", "warn", "error"],
                parse: LogLevel.init(name:), show: \.name, reload: .appliedAtOnce, help: """
            debug, info, warn or error; requests log at info
            ({variable}, default {default})
            """),
        .value("log-file", "PATH", at: \.logFilePath, example: "/tmp/headway-example.log", help: """
            append logs to this file, created with mode 0640
            if missing; SIGHUP reopens it, for log rotation
            ({variable}, default: stderr)
            """, convert: { text throws(UsageError) in try nonEmptyPath("log-file")(text) }),
        .value(configurationFileName, "FILE", at: \.configurationFilePath, reload: .notCompared, readFromFile: false,
               example: "/tmp/headway-example.conf", help: """
            read settings from FILE, one 'name = value' per
            line with the option names above ('log-level =
            debug'; '#' starts a comment line); flags and
            variables win over it; SIGHUP rereads it
            ({variable}, default: none)
            """, convert: { text throws(UsageError) in try nonEmptyPath(configurationFileName)(text) }),
        .seconds("sse-heartbeat", at: \.broker.heartbeatSeconds, in: 0.1...3600, help: """
            keep-alive comment interval on event streams
            ({variable}, default {default})
            """),
        .wholeNumber("max-subscribers", at: \.broker.maximumSubscribers, in: 0...1_000_000, help: """
            event-stream subscribers served at once; more get
            503 ({variable}, default {default}:
            fewer where the open-file limit holds fewer)
            """, given: \Configuration.maximumSubscribersGiven),
        .duration("retention", at: \.maintenance.retentionMilliseconds, from: "60s", to: "3650d",
                  examples: "7d, 12h, 3600", help: """
            forget finished tasks, their history and deletions
            this long after: seconds, or with s, m, h or d
            ({variable}, default {default})
            """),
        .wholeNumber("max-depth", at: \.treeLimits.maximumDepth, in: 1...10_000, help: """
            deepest a task may be, a root being 1; deeper
            registrations get 422 tree_too_deep
            ({variable}, default {default})
            """),
        .wholeNumber("max-children", at: \.treeLimits.maximumChildren, in: 1...100_000_000, help: """
            unfinished children one task may have at once; more
            get 422 too_many_children ({variable},
            default {default})
            """),
        .wholeNumber("max-tasks", at: \.treeLimits.maximumTasks, in: 1...1_000_000_000_000, help: """
            tasks stored at once; more get 503 storage_full
            ({variable}, default {default})
            """),
        .wholeNumber("max-tokens", at: \.maximumTokens, in: 1...1_000_000, help: """
            tokens neither revoked nor expired at once; more
            get 422 too_many_tokens (headwayd token create is
            not bounded) ({variable}, default {default})
            """),
        .wholeNumber("read-connections", at: \.readConnections, in: 1...64, help: """
            database connections for API reads, and as many
            again for event-stream catch-ups, read side by side
            ({variable}, default {default})
            """),
        .wholeNumber("max-queued-reads", at: \.maximumQueuedReads, in: 0...1_000_000, help: """
            API reads that may wait for a connection; more get
            503 server_busy ({variable}, default {default})
            """),
        .wholeNumber("max-body-bytes", at: \.maximumBodyBytes, in: 1024...16_777_216, help: """
            bytes of one request body; larger ones get 413
            body_too_large ({variable}, default {default})
            """),
        .wholeNumber("max-batch-items", at: \.maximumBatchItems, in: 1...10_000, help: """
            updates one POST /v1/progress may carry; more get
            413 too_many_items ({variable}, default
            {default}; its body may take 1 MiB, or --max-body-bytes)
            """),
        .wholeNumber("max-query-params", at: \.maximumQueryParameters, in: 1...1000, help: """
            query parameters one request may carry; more get
            431 ({variable}, default {default})
            """),
        .seconds("head-timeout", at: \.headTimeoutSeconds, in: 0.1...3600, help: """
            time a connection has to send a whole request head,
            from its opening or its previous response, then it
            is closed ({variable}, default {default})
            """),
        .seconds("body-timeout", at: \.bodyTimeoutSeconds, in: 0.1...3600, help: """
            time a request has, from its whole head, to send the
            whole body it announced, then its connection is
            closed ({variable}, default {default})
            """),
        .wholeNumber("max-connections-per-address", at: \.maximumConnectionsPerAddress, in: 1...1_000_000,
                     help: """
            connections open at once from one client address;
            more are closed at once
            ({variable}, default {default})
            """),
        .wholeNumber("stream-buffer-bytes", at: \.broker.streamBufferBytes, in: 4096...1_073_741_824, help: """
            bytes one event stream may hold unsent (its catch-up
            aside); past it the stream is closed and its client
            resumes ({variable}, default {default})
            """),
        .seconds("stream-stall-timeout", at: \.streamStallTimeoutSeconds, in: 0.1...86_400, help: """
            close a response (event stream or other) whose
            client took nothing for this long while bytes wait
            ({variable}, default {default})
            """),
        .wholeNumber("max-catch-up-bytes", at: \.maximumCatchUpBytes, in: 1_048_576...1_099_511_627_776, help: """
            bytes of catch-ups (snapshots, replays) all event
            streams may hold unsent at once, an eighth per
            client (token, else address) but for one catch-up
            while it holds none; past it a new subscriber gets
            retry: and its stream ends
            ({variable}, default {default})
            """),
        .wholeNumber("max-unsent-reply-bytes", at: \.maximumUnsentReplyBytes, in: 1_048_576...1_099_511_627_776,
                     help: """
            bytes of API replies (pages of tasks…) that may
            wait for their clients to read them; one client
            may hold a quarter; past it a new read is 503
            server_busy ({variable},
            default {default})
            """),
        .wholeNumber("wal-size-limit", at: \.walSizeLimitBytes, in: 1_048_576...1_099_511_627_776, help: """
            bytes the -wal file is brought back under once no
            reader (a sqlite3 shell, a backup) holds an old
            snapshot ({variable}, default {default})
            """),
        .list("public-url", "URL", at: \.publicOrigins, example: "https://headway.example.com", help: """
            a URL the daemon is reached at, e.g. behind a proxy
            (https://headway.example.com): its host is served
            besides the listen address and localhost, and its
            pages may change tasks; repeat for several
            ({variable}, comma-separated)
            """, convert: { text throws(UsageError) in try WebOrigin.parsePublicURL(text) }),
        .list("cors-origin", "ORIGIN", at: \.corsOrigins, example: "https://dash.example.com", help: """
            an origin (https://dash.example.com) whose pages may
            call the API from a browser, or '*' for any page
            (refused at start until a token exists); repeat
            for several ({variable}, comma-separated)
            """, convert: { text throws(UsageError) in try CORSOrigin.parse(text) }),
        // Both or neither: `Configuration.checkTLSPair`.
        .value(tlsCertificateName, "FILE", at: \.tlsCertificatePath, example: "/tmp/headway-example.pem", help: """
            serve HTTPS with this PEM certificate (its chain
            after it); needs --tls-key; SIGHUP reloads both
            ({variable}, default: plain HTTP)
            """, convert: { text throws(UsageError) in text }),
        .value(tlsKeyName, "FILE", at: \.tlsKeyPath, example: "/tmp/headway-example.key", help: """
            the PEM private key of --tls-cert, unencrypted
            ({variable})
            """, convert: { text throws(UsageError) in text }),
        // Deprecated: still read (a bad value is still refused), then ignored with a warning.
        .value("webhook-concurrency", "N", at: \.webhookConcurrency, reload: .notCompared, example: "2", help: """
            deprecated, ignored (a warning at start): every
            webhook has its own delivery in flight
            ({variable})
            """, convert: { text throws(UsageError) in
                Optional(try wholeNumber("webhook-concurrency", text, in: 1...256) as Int)
            }),
        .seconds("webhook-timeout", at: \.webhooks.timeoutSeconds, in: 0.1...600, help: """
            time one delivery attempt may take, its host's
            lookup included ({variable},
            default {default})
            """),
        .value("webhook-retry-base", "SECONDS", at: \.webhooks.retry.baseMilliseconds, example: "0.5", help: """
            bound of the first retry's delay after a failed
            delivery, doubled after each (at most 10 min)
            ({variable}, default {default})
            """, show: { plain(Double($0) / 1000) }, convert: { text throws(UsageError) in
                Int64((try seconds("webhook-retry-base", text, in: 0.01...600) * 1000).rounded())
            }),
        .duration("webhook-retry-for", at: \.webhooks.retry.giveUpAfterMilliseconds, from: "1s", to: "30d",
                  examples: "24h, 90m, 3600", rounded: true, help: """
            give a delivery up this long after its event:
            seconds, or with s, m, h or d
            ({variable}, default {default})
            """),
        .choice("webhook-retry-jitter", "full|none", at: \.webhooks.retry.jitter, names: ["full", "none"],
                parse: { ["full": true, "none": false][$0] }, show: { $0 ? "full" : "none" }, help: """
            full: each retry's delay is random below its
            bound; none: the bound itself
            ({variable}, default {default})
            """),
        .value("webhook-allow-private", "", at: \.webhooks.allowPrivate, shape: .switchFlag, example: "true", help: """
            let webhooks post to loopback, private, link-local
            and other non-public addresses (refused by default)
            ({variable}=true)
            """, convert: { text throws(UsageError) in
                switch text.lowercased() {
                case "true", "1", "yes", "on": return true
                case "false", "0", "no", "off": return false
                default: throw UsageError("--webhook-allow-private takes no value, or true or false, not '\(text)'")
                }
            }),
    ]

    static let tlsCertificateName = "tls-cert"
    static let tlsKeyName = "tls-key"
}

// MARK: - The kinds of value

extension Setting {
    /// A setting whose text `convert` turns into the value at `keyPath`.
    /// `given`, if any, is set when a source gives the setting (a default the daemon may
    /// lower, where a value given must be said to be out of reach).
    static func value<Value: Equatable & Sendable>(
        _ name: String, _ valueName: String, at keyPath: WritableKeyPath<Configuration, Value> & Sendable,
        shape: Shape = .value, reload: Reload = .atRestart, readFromFile: Bool = true, example: String,
        help: String, show: (@Sendable (Value) -> String)? = nil,
        given: (WritableKeyPath<Configuration, Bool> & Sendable)? = nil,
        convert: @escaping @Sendable (String) throws(UsageError) -> Value
    ) -> Setting {
        Setting(name: name, valueName: valueName, shape: shape, reload: reload, readFromFile: readFromFile,
                example: example, help: help,
                apply: { text, configuration throws(UsageError) in
                    configuration[keyPath: keyPath] = try convert(text)
                    if let given { configuration[keyPath: given] = true }
                },
                shownValue: { configuration in show.map { $0(configuration[keyPath: keyPath]) } },
                differs: { $0[keyPath: keyPath] != $1[keyPath: keyPath] })
    }

    /// A repeatable setting: each value `convert` turns into an element of the list at `keyPath`.
    static func list<Element: Equatable & Sendable>(
        _ name: String, _ valueName: String, at keyPath: WritableKeyPath<Configuration, [Element]> & Sendable,
        example: String, help: String, convert: @escaping @Sendable (String) throws(UsageError) -> Element
    ) -> Setting {
        Setting(name: name, valueName: valueName, shape: .list, reload: .atRestart, readFromFile: true,
                example: example, help: help,
                apply: { text, configuration throws(UsageError) in configuration[keyPath: keyPath].append(try convert(text)) },
                shownValue: { _ in nil },
                differs: { $0[keyPath: keyPath] != $1[keyPath: keyPath] })
    }

    /// A whole number within `range`; its largest value is its example.
    static func wholeNumber<Number: FixedWidthInteger & Sendable>(
        _ name: String, at keyPath: WritableKeyPath<Configuration, Number> & Sendable, in range: ClosedRange<Number>,
        help: String, given: (WritableKeyPath<Configuration, Bool> & Sendable)? = nil
    ) -> Setting {
        value(name, "N", at: keyPath, example: "\(range.upperBound)", help: help, show: { "\($0)" }, given: given) {
            text throws(UsageError) in try wholeNumber(name, text, in: range)
        }
    }

    /// A number of seconds within `range`; its largest value is its example.
    static func seconds(_ name: String, at keyPath: WritableKeyPath<Configuration, Double> & Sendable,
                        in range: ClosedRange<Double>, help: String) -> Setting {
        value(name, "SECONDS", at: keyPath, example: plain(range.upperBound), help: help, show: plain) {
            text throws(UsageError) in try seconds(name, text, in: range)
        }
    }

    /// A duration (seconds, or with s, m, h or d) from `lowest` to `highest`, kept in
    /// milliseconds (truncated, or `rounded`); `examples` are shown in the error.
    static func duration(_ name: String, at keyPath: WritableKeyPath<Configuration, Int64> & Sendable,
                         from lowest: String, to highest: String, examples: String, rounded: Bool = false,
                         help: String) -> Setting {
        let range = DurationText.seconds(lowest)!...DurationText.seconds(highest)!
        return value(name, "DURATION", at: keyPath, example: highest, help: help,
                     show: { DurationText.describe(Double($0) / 1000) }) { text throws(UsageError) in
            guard let seconds = DurationText.seconds(text), range.contains(seconds) else {
                throw UsageError("--\(name) must be a duration from \(lowest) to \(highest) (e.g. \(examples)), not '\(text)'")
            }
            return Int64(rounded ? (seconds * 1000).rounded() : seconds * 1000)
        }
    }

    /// One of `names`, which `parse` turns into the value; the last name that is not the
    /// default is its example.
    static func choice<Value: Equatable & Sendable>(
        _ name: String, _ valueName: String, at keyPath: WritableKeyPath<Configuration, Value> & Sendable,
        names: [String], parse: @escaping @Sendable (String) -> Value?, show: @escaping @Sendable (Value) -> String,
        reload: Reload = .atRestart, help: String
    ) -> Setting {
        let byDefault = show(Configuration()[keyPath: keyPath])
        let list = names.count == 1 ? names[0] : names.dropLast().joined(separator: ", ") + " or " + names.last!
        return value(name, valueName, at: keyPath, reload: reload, example: names.last { $0 != byDefault } ?? names[0],
                     help: help, show: show) { text throws(UsageError) in
            guard let value = parse(text) else { throw UsageError("--\(name) must be \(list), not '\(text)'") }
            return value
        }
    }

    /// `convert` for a path that must not be empty.
    static func nonEmptyPath(_ name: String) -> @Sendable (String) throws(UsageError) -> String {
        { path throws(UsageError) in
            guard !path.isEmpty else { throw UsageError("--\(name) needs a file path") }
            return path
        }
    }

    /// `text` as a whole number within `range`, or a usage error naming `--name` and the range.
    static func wholeNumber<Number: FixedWidthInteger>(_ name: String, _ text: String,
                                                       in range: ClosedRange<Number>) throws(UsageError) -> Number {
        guard let number = Number(text), range.contains(number) else {
            throw UsageError("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return number
    }

    /// `text` as a number of seconds within `range`, or a usage error naming `--name` and the range.
    static func seconds(_ name: String, _ text: String, in range: ClosedRange<Double>) throws(UsageError) -> Double {
        guard let seconds = Double(text), seconds.isFinite, range.contains(seconds) else {
            throw UsageError("--\(name) must be a number of seconds from \(plain(range.lowerBound)) to "
                             + "\(plain(range.upperBound)), not '\(text)'")
        }
        return seconds
    }

    /// `3600` rather than `3600.0`.
    static func plain(_ number: Double) -> String {
        number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}

extension DurationText {
    /// `seconds` as the help shows a duration: in days from two days (`7d`), else in the
    /// largest unit that keeps it whole (`24h`, `90m`, `45s`).
    static func describe(_ seconds: Double) -> String {
        if seconds >= 2 * 86_400, seconds.truncatingRemainder(dividingBy: 86_400) == 0 { return "\(Int64(seconds / 86_400))d" }
        for (unit, length) in [("h", 3600.0), ("m", 60.0)] where seconds >= length
            && seconds.truncatingRemainder(dividingBy: length) == 0 {
            return "\(Int64(seconds / length))\(unit)"
        }
        return Setting.plain(seconds) + "s"
    }
}

// MARK: - Help

extension Setting {
    /// The column where each setting's help begins.
    static let helpColumn = 28

    /// The rows of `headwayd --help` for the setting: the option and its value's
    /// placeholder, then its help with the variable and the default filled in.
    var helpRows: String {
        let label = "  --\(name)" + (valueName.isEmpty ? "" : " \(valueName)")
        let indent = String(repeating: " ", count: Self.helpColumn)
        let text = help.replacingOccurrences(of: "{variable}", with: environmentVariable)
            .replacingOccurrences(of: "{default}", with: shownValue(Configuration()) ?? "")
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let first = label.count < Self.helpColumn
            ? label + String(repeating: " ", count: Self.helpColumn - label.count) + lines[0]
            : label + "\n" + indent + lines[0]
        return ([first] + lines.dropFirst().map { indent + $0 }).joined(separator: "\n")
    }
}
