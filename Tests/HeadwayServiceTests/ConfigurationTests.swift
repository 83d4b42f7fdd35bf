import HeadwayCore
import HeadwayStore
import Testing
@testable import Daemon

@Suite struct ConfigurationTests {
    private func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: environment) else {
            throw UsageError("expected a run command")
        }
        return configuration
    }

    /// Whether `--max-subscribers` was given, by any source, decides how a limit too low for
    /// it is told: the default, given by nobody, is lowered at info; a number given, at warn.
    @Test func maxSubscribersGivenByAnySourceIsKnownFromTheDefault() throws {
        #expect(try !parse([]).maximumSubscribersGiven)
        #expect(try !parse(["--sse-heartbeat", "5"]).maximumSubscribersGiven)
        #expect(try parse(["--max-subscribers", "50000"]).maximumSubscribersGiven)
        #expect(try parse([], ["HEADWAY_MAX_SUBSCRIBERS": "50000"]).maximumSubscribersGiven)
        #expect(try parse(["--max-subscribers", "10"]).broker.maximumSubscribers == 10)
        #expect(throws: UsageError.self) { try parse(["--max-subscribers", "-1"]) }
    }

    @Test func versionAndHelpTakeNoValue() throws {
        #expect(try Configuration.parse(arguments: ["--version"], environment: [:]) == .version)
        #expect(try Configuration.parse(arguments: ["--db", "x.db", "--help"], environment: [:]) == .help)
        #expect(throws: UsageError("option '--version' takes no value")) {
            try Configuration.parse(arguments: ["--version=1"], environment: [:])
        }
    }

    @Test func defaults() throws {
        let configuration = try parse([])
        #expect(configuration.host == "127.0.0.1")
        #expect(configuration.port == 8080)
        #expect(configuration.databasePath == "./headway.db")
        #expect(configuration.durability == .full)
        #expect(configuration.stallTimeoutSeconds == 30)
    }

    @Test func flagsOverrideEnvironment() throws {
        let environment = ["HEADWAY_LISTEN": "127.0.0.1:9000", "HEADWAY_DB": "/tmp/env.db",
                           "HEADWAY_DURABILITY": "normal", "HEADWAY_STALL_TIMEOUT": "12"]
        let fromEnvironment = try parse([], environment)
        #expect(fromEnvironment.port == 9000)
        #expect(fromEnvironment.databasePath == "/tmp/env.db")
        #expect(fromEnvironment.durability == .normal)
        #expect(fromEnvironment.stallTimeoutSeconds == 12)
        let fromFlags = try parse(["--listen=[::1]:7000", "--db", "/tmp/flag.db", "--durability", "full",
                                   "--stall-timeout=45"], environment)
        #expect(fromFlags.host == "::1")
        #expect(fromFlags.port == 7000)
        #expect(fromFlags.databasePath == "/tmp/flag.db")
        #expect(fromFlags.durability == .full)
        #expect(fromFlags.stallTimeoutSeconds == 45)
    }

    @Test func help() throws {
        #expect(try Configuration.parse(arguments: ["--db", "x", "--help"], environment: [:]) == .help)
        for flag in ["--listen", "--db", "--durability", "--stall-timeout", "HEADWAY_LISTEN", "HEADWAY_DB",
                     "HEADWAY_DURABILITY", "HEADWAY_STALL_TIMEOUT"] {
            #expect(Configuration.usage.contains(flag))
        }
    }

    @Test func webhookSettings() throws {
        let defaults = try parse([])
        #expect(defaults.webhookConcurrency == nil && defaults.webhooks.timeoutSeconds == 10 && !defaults.webhooks.allowPrivate)
        #expect(defaults.webhooks.retry == WebhookRetryPolicy(baseMilliseconds: 1000, capMilliseconds: 600_000,
                                                            giveUpAfterMilliseconds: 86_400_000, jitter: true))
        let flags = try parse(["--webhook-concurrency", "2", "--webhook-timeout", "1.5", "--webhook-retry-base", "0.1",
                               "--webhook-retry-for", "90m", "--webhook-retry-jitter", "none", "--webhook-allow-private"])
        #expect(flags.webhookConcurrency == 2 && flags.webhooks.timeoutSeconds == 1.5 && flags.webhooks.allowPrivate)
        #expect(flags.webhooks.retry == WebhookRetryPolicy(baseMilliseconds: 100, capMilliseconds: 600_000,
                                                         giveUpAfterMilliseconds: 5_400_000, jitter: false))
        // A switch: no value on the command line; true or false elsewhere, and a flag wins.
        #expect(try parse(["--webhook-allow-private", "--db", "x.db"]).databasePath == "x.db")
        #expect(try parse([], ["HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true"]).webhooks.allowPrivate)
        #expect(try !parse(["--webhook-allow-private=false"], ["HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true"]).webhooks.allowPrivate)
        #expect(throws: UsageError("--webhook-allow-private takes no value, or true or false, not 'maybe'")) {
            try parse([], ["HEADWAY_WEBHOOK_ALLOW_PRIVATE": "maybe"])
        }
        #expect(throws: UsageError("--webhook-retry-jitter must be full or none, not 'half'")) {
            try parse(["--webhook-retry-jitter", "half"])
        }
        #expect(throws: UsageError("--webhook-retry-for must be a duration from 1s to 30d (e.g. 24h, 90m, 3600), not '0'")) {
            try parse(["--webhook-retry-for", "0"])
        }
        #expect(throws: UsageError.self) { try parse(["--webhook-concurrency", "0"]) }
        for flag in ["--webhook-concurrency", "--webhook-timeout", "--webhook-retry-base", "--webhook-retry-for",
                     "--webhook-retry-jitter", "--webhook-allow-private", "HEADWAY_WEBHOOK_ALLOW_PRIVATE"] {
            #expect(Configuration.usage.contains(flag), "\(flag)")
        }
    }

    @Test(arguments: [
        (["--bogus"], "unknown option '--bogus'"),
        (["--db"], "option '--db' needs a value"),
        (["stray"], "unexpected argument 'stray'"),
        (["--durability", "fast"], "--durability must be full or normal, not 'fast'"),
        (["--stall-timeout", "0"], "--stall-timeout must be a number of seconds from 1 to 2592000, not '0'"),
        (["--listen", "8080"], "--listen must be HOST:PORT, not '8080'"),
        (["--listen", "127.0.0.1:99999"], "--listen port must be a number from 0 to 65535, not '99999'"),
    ])
    func usageErrors(_ arguments: [String], _ message: String) {
        #expect(throws: UsageError(message)) { _ = try Configuration.parse(arguments: arguments, environment: [:]) }
    }

    /// A mistyped option of `headwayd` or of `headwayd token create` names the options it is
    /// closest to, as the `headway` command does; one close to none gets no guess.
    @Test func mistypedOptionsNameTheClosest() {
        #expect(throws: UsageError("unknown option '--log-levl'; did you mean '--log-level'?")) {
            _ = try Configuration.parse(arguments: ["--log-levl", "debug"], environment: [:])
        }
        #expect(throws: UsageError("unknown option '--verison'; did you mean '--version'?")) {
            _ = try Configuration.parse(arguments: ["--verison"], environment: [:])
        }
        #expect(throws: UsageError("unknown option '--max-subscriber'; did you mean '--max-subscribers'?")) {
            _ = try Configuration.parse(arguments: ["--max-subscriber=5"], environment: [:])
        }
        #expect(throws: UsageError("unknown option '--scopes' for token create; did you mean '--scope'?")) {
            _ = try TokenCommand.parse(["create", "--scopes", "read", "--db", "x.db"])
        }
        #expect(throws: UsageError("unknown option '--frobnicate' for token create")) {
            _ = try TokenCommand.parse(["create", "--frobnicate", "x"])
        }
        #expect(throws: UsageError("option '--help' takes no value")) { _ = try TokenCommand.parse(["create", "--help=yes"]) }
    }

    /// `headwayd token create` waits for a PostgreSQL server as the daemon does at start,
    /// as long by default, as long as `--db-start-wait` says, or not at all.
    @Test func tokenCreateWaitsForTheServerAsLongAsTold() throws {
        let request = TokenRequest(name: "cli", scopes: [.admin])
        let uri = "postgresql://db.example/headway"
        #expect(try TokenCommand.parse(["create", "--scope", "admin", "--db", uri])
                == .create(request, expiresInSeconds: nil, databasePath: uri,
                           serverWaitSeconds: Configuration().databaseStartWaitSeconds))
        #expect(try TokenCommand.parse(["create", "--scope", "admin", "--db-start-wait=0", "--db", uri])
                == .create(request, expiresInSeconds: nil, databasePath: uri, serverWaitSeconds: 0))
        #expect(try TokenCommand.parse(["create", "--db-start-wait", "2.5", "--scope", "admin", "--db", uri])
                == .create(request, expiresInSeconds: nil, databasePath: uri, serverWaitSeconds: 2.5))
        for bad in ["-1", "soon", "86401", "nan"] {
            #expect(throws: UsageError("--db-start-wait must be a number of seconds from 0 to 86400, not '\(bad)'")) {
                _ = try TokenCommand.parse(["create", "--scope", "admin", "--db-start-wait", bad, "--db", uri])
            }
        }
    }

    @Test func durationsTakeUnits() throws {
        #expect(try parse([]).maintenance.retentionMilliseconds == (7 * 86_400) * 1000)
        #expect(try parse(["--retention", "12h"]).maintenance.retentionMilliseconds == 43_200_000)
        #expect(try parse(["--retention=90m"]).maintenance.retentionMilliseconds == 5_400_000)
        #expect(try parse([], ["HEADWAY_RETENTION": "3600"]).maintenance.retentionMilliseconds == 3_600_000)
        #expect(try parse(["--sse-heartbeat", "2.5", "--max-subscribers", "20"]).broker.heartbeatSeconds == 2.5)
        for bad in ["7x", "-1d", "10s", "", "1e9d"] {
            #expect(throws: UsageError.self) { _ = try Configuration.parse(arguments: ["--retention", bad], environment: [:]) }
        }
        // Plain decimals only: no sign, exponent, hexadecimal, nan or inf.
        #expect(Configuration.parseDuration("1.5h") == 5_400)
        for loose in ["0x3c", "0x1p6m", "1e3", "+60", "1.0e1m", ".5h", "5.", "1..2", "nan", "inf", " 60", "６０"] {
            #expect(Configuration.parseDuration(loose) == nil, "\(loose)")
        }
    }

    /// The event-stream bounds: defaults, environment, each flag at its limits and just past.
    @Test func streamBufferBytesAndStallTimeout() throws {
        let defaults = try parse([])
        #expect(defaults.broker.streamBufferBytes == 256 * 1024)
        #expect(defaults.streamStallTimeoutSeconds == 30)
        let fromEnvironment = try parse([], ["HEADWAY_STREAM_BUFFER_BYTES": "65536", "HEADWAY_STREAM_STALL_TIMEOUT": "5"])
        #expect(fromEnvironment.broker.streamBufferBytes == 65536 && fromEnvironment.streamStallTimeoutSeconds == 5)
        #expect(try parse(["--stream-buffer-bytes", "4096"]).broker.streamBufferBytes == 4096)
        #expect(try parse(["--stream-buffer-bytes=1073741824"]).broker.streamBufferBytes == 1_073_741_824)
        #expect(try parse(["--stream-stall-timeout", "0.1"]).streamStallTimeoutSeconds == 0.1)
        #expect(try parse(["--stream-stall-timeout", "86400"]).streamStallTimeoutSeconds == 86_400)
        for bad in ["4095", "1073741825", "64k", ""] {
            #expect(throws: UsageError("--stream-buffer-bytes must be a whole number from 4096 to 1073741824, not '\(bad)'")) {
                _ = try Configuration.parse(arguments: ["--stream-buffer-bytes", bad], environment: [:])
            }
        }
        for bad in ["0.09", "86401", "nan", "inf", "30s"] {
            #expect(throws: UsageError("--stream-stall-timeout must be a number of seconds from 0.1 to 86400, not '\(bad)'")) {
                _ = try Configuration.parse(arguments: ["--stream-stall-timeout", bad], environment: [:])
            }
        }
        for text in ["--stream-buffer-bytes N", "HEADWAY_STREAM_BUFFER_BYTES", "--stream-stall-timeout SECONDS",
                     "HEADWAY_STREAM_STALL_TIMEOUT"] {
            #expect(Configuration.usage.contains(text))
        }
    }

    @Test func walSizeLimit() throws {
        #expect(try parse([]).walSizeLimitBytes == 32 << 20)
        #expect(try parse([], ["HEADWAY_WAL_SIZE_LIMIT": "8388608"]).walSizeLimitBytes == 8 << 20)
        #expect(try parse(["--wal-size-limit", "1048576"]).walSizeLimitBytes == 1 << 20)
        for bad in ["1048575", "1099511627777", "32M", ""] {
            #expect(throws: UsageError("--wal-size-limit must be a whole number from 1048576 to 1099511627776, not '\(bad)'")) {
                _ = try Configuration.parse(arguments: ["--wal-size-limit", bad], environment: [:])
            }
        }
        #expect(Configuration.usage.contains("--wal-size-limit N") && Configuration.usage.contains("HEADWAY_WAL_SIZE_LIMIT"))
    }

    /// Any address parses; beyond loopback the start refuses unless a token exists (the
    /// database is open by then: `TokenProcessTests`).
    @Test func addressesBeyondLoopbackParseAndAreToldApart() throws {
        for address in ["0.0.0.0:8080", "[::]:8080", "192.0.2.1:80"] {
            guard case .run(let configuration) = try Configuration.parse(arguments: ["--listen", address], environment: [:])
            else { throw UsageError("expected a run command") }
            #expect(!Configuration.isLoopback(configuration.host))
        }
        for host in ["127.0.0.1", "127.1.2.3", "::1", "localhost"] { #expect(Configuration.isLoopback(host)) }
    }
}

// Connection floods: the head and body deadlines and the cap per address, at their limits and past them.
extension ConfigurationTests {
    @Test func connectionFloodLimits() throws {
        let defaults = try parse([])
        #expect(defaults.headTimeoutSeconds == 10)
        #expect(defaults.bodyTimeoutSeconds == 30)
        #expect(defaults.maximumConnectionsPerAddress == 1000)
        let set = try parse(["--head-timeout", "2.5", "--body-timeout", "4"], ["HEADWAY_MAX_CONNECTIONS_PER_ADDRESS": "20"])
        #expect(set.headTimeoutSeconds == 2.5)
        #expect(set.bodyTimeoutSeconds == 4)
        #expect(try parse([], ["HEADWAY_BODY_TIMEOUT": "0.5"]).bodyTimeoutSeconds == 0.5)
        #expect(set.maximumConnectionsPerAddress == 20)
        #expect(try parse(["--head-timeout=3600", "--max-connections-per-address=1000000"]).headTimeoutSeconds == 3600)
        #expect(try parse(["--head-timeout=0.1", "--max-connections-per-address=1"]).maximumConnectionsPerAddress == 1)
        #expect(throws: UsageError("--head-timeout must be a number of seconds from 0.1 to 3600, not '3601'")) {
            _ = try Configuration.parse(arguments: ["--head-timeout", "3601"], environment: [:])
        }
        #expect(throws: UsageError("--body-timeout must be a number of seconds from 0.1 to 3600, not '0'")) {
            _ = try Configuration.parse(arguments: ["--body-timeout", "0"], environment: [:])
        }
        #expect(throws: UsageError("--max-connections-per-address must be a whole number from 1 to 1000000, not '0'")) {
            _ = try Configuration.parse(arguments: ["--max-connections-per-address", "0"], environment: [:])
        }
        for text in ["--head-timeout", "HEADWAY_HEAD_TIMEOUT", "--body-timeout", "HEADWAY_BODY_TIMEOUT", "--max-connections-per-address",
                     "HEADWAY_MAX_CONNECTIONS_PER_ADDRESS"] {
            #expect(Configuration.usage.contains(text))
        }
    }
}
