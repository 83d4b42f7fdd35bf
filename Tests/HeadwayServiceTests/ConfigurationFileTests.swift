import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Daemon

/// The configuration file (`--config`): its syntax, its place under flags and variables, and
/// its mistakes named by file and line.
@Suite struct ConfigurationFileTests {
    private let directory = TemporaryDirectory()

    /// A configuration file holding `text`; returns its path.
    private func file(_ text: String, named name: String = "headwayd.conf") throws -> String {
        let path = directory.file(name)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: environment) else {
            throw UsageError("expected a run command")
        }
        return configuration
    }

    @Test func readsNameValueLinesSkippingCommentsAndBlankLines() throws {
        defer { directory.remove() }
        let path = try file("""
            # Headway settings
            log-level = debug

               max-depth=7\r
            retention =  12h  
            public-url = https://a.example.com
            public-url = https://b.example.com
            """)
        let configuration = try parse(["--config", path])
        #expect(configuration.configurationFilePath == path)
        #expect(configuration.logLevel == .debug)
        #expect(configuration.treeLimits.maximumDepth == 7)
        #expect(configuration.maintenance.retentionMilliseconds == 43_200_000)
        #expect(configuration.publicOrigins.map(\.description) == ["https://a.example.com", "https://b.example.com"])
        #expect(try parse([], ["HEADWAY_CONFIG": path]).logLevel == .debug)
        #expect(try parse([]).configurationFilePath == nil)
    }

    /// A flag wins over its variable, which wins over the file, which wins over the default;
    /// a list given by a higher layer replaces the file's whole list.
    @Test func precedenceIsFlagThenVariableThenFileThenDefault() throws {
        defer { directory.remove() }
        let path = try file("log-level = warn\nstall-timeout = 40\ndb = /tmp/file.db\npublic-url = https://file.example.com\n")
        let fileOnly = try parse(["--config", path])
        #expect(fileOnly.logLevel == .warn && fileOnly.stallTimeoutSeconds == 40 && fileOnly.databasePath == "/tmp/file.db")
        #expect(fileOnly.durability == .full, "a setting the file leaves out keeps its default")
        let environment = ["HEADWAY_LOG_LEVEL": "error", "HEADWAY_STALL_TIMEOUT": "50",
                           "HEADWAY_PUBLIC_URL": "https://env.example.com"]
        let withVariables = try parse(["--config", path], environment)
        #expect(withVariables.logLevel == .error && withVariables.stallTimeoutSeconds == 50)
        #expect(withVariables.databasePath == "/tmp/file.db")
        #expect(withVariables.publicOrigins.map(\.description) == ["https://env.example.com"])
        let withFlags = try parse(["--config", path, "--log-level", "debug"], environment)
        #expect(withFlags.logLevel == .debug && withFlags.stallTimeoutSeconds == 50)
        // --config itself: the flag over the variable.
        let other = try file("log-level = error\n", named: "other.conf")
        #expect(try parse(["--config", path], ["HEADWAY_CONFIG": other]).logLevel == .warn)
        #expect(try parse([], ["HEADWAY_CONFIG": other]).logLevel == .error)
    }

    /// Every mistake stops the parse with the file, the line and the reason (the daemon
    /// then exits 64); a value is checked as its flag is.
    @Test func mistakesAreNamedByFileAndLine() throws {
        defer { directory.remove() }
        let cases: [(String, String)] = [
            ("# fine\nlog-level = loud\n", ":2: --log-level must be debug, info, warn or error, not 'loud'"),
            ("max-depth = 0\n", ":1: --max-depth must be a whole number from 1 to 10000, not '0'"),
            ("\n\nlog-level debug\n", ":3: expected 'name = value', not 'log-level debug'"),
            ("loglevel = info\n", ":1: unknown setting 'loglevel'; did you mean 'log-level'?"),
            ("--log-level = info\n", ":1: unknown setting '--log-level'; did you mean 'log-level'?"),
            ("frobnicate = 1\n", ":1: unknown setting 'frobnicate' (settings are the long option names, e.g. log-level)"),
            ("config = other.conf\n", ":1: unknown setting 'config' (settings are the long option names, e.g. log-level)"),
            ("log-level = info\nlog-level = debug\n", ":2: 'log-level' is set again (first at line 1)"),
            ("db =\n", ":1: --db needs a file path"),
            ("public-url = ftp://x\n",
             ":1: --public-url must be an http or https URL such as https://headway.example.com, not 'ftp://x'"),
            ("tls-cert = cert.pem\n", ":1: --tls-cert needs --tls-key (the certificate's private key)"),
        ]
        for (text, message) in cases {
            let path = try file(text)
            #expect(throws: UsageError(path + message)) {
                _ = try Configuration.parse(arguments: ["--config", path], environment: [:])
            }
        }
        // The flag and variable values are still checked without a file and line.
        let path = try file("log-level = info\n")
        #expect(throws: UsageError("--log-level must be debug, info, warn or error, not 'loud'")) {
            _ = try Configuration.parse(arguments: ["--config", path], environment: ["HEADWAY_LOG_LEVEL": "loud"])
        }
        #expect(throws: UsageError("cannot read the configuration file \(directory.file("missing.conf")): No such file or directory")) {
            _ = try Configuration.parse(arguments: ["--config", directory.file("missing.conf")], environment: [:])
        }
        #expect(throws: UsageError("--config needs a file path")) {
            _ = try Configuration.parse(arguments: ["--config="], environment: [:])
        }
        let binary = directory.file("binary.conf")
        _ = FileManager.default.createFile(atPath: binary, contents: Data([0x6c, 0xff, 0x0a]))
        #expect(throws: UsageError("cannot read the configuration file \(binary): not UTF-8 text")) {
            _ = try Configuration.parse(arguments: ["--config", binary], environment: [:])
        }
        // A huge value is refused without being echoed; a FIFO or a directory is refused at
        // once, never waited on.
        let long = try file("retention = " + String(repeating: "9", count: 10_000) + "\n", named: "long.conf")
        #expect(throws: UsageError(long + ":1: a line longer than 4096 bytes")) {
            _ = try Configuration.parse(arguments: ["--config", long], environment: [:])
        }
        let fifo = directory.file("fifo.conf")
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(throws: UsageError("cannot read the configuration file \(fifo): not a regular file")) {
            _ = try Configuration.parse(arguments: ["--config", fifo], environment: [:])
        }
        #expect(throws: UsageError("cannot read the configuration file \(directory.path): not a regular file")) {
            _ = try Configuration.parse(arguments: ["--config", directory.path], environment: [:])
        }
    }

    /// A file saved with a byte-order mark (some editors write one) reads as without it.
    @Test func aByteOrderMarkIsSkipped() throws {
        defer { directory.remove() }
        let path = directory.file("bom.conf")
        _ = FileManager.default.createFile(atPath: path, contents: Data([0xEF, 0xBB, 0xBF] + Array("log-level = warn\n".utf8)))
        #expect(try parse(["--config", path]).logLevel == .warn)
    }

    @Test func logFileIsASetting() throws {
        defer { directory.remove() }
        #expect(try parse([]).logFilePath == nil)
        #expect(try parse(["--log-file", "/var/log/headway/headwayd.log"]).logFilePath == "/var/log/headway/headwayd.log")
        #expect(try parse([], ["HEADWAY_LOG_FILE": "env.log"]).logFilePath == "env.log")
        #expect(try parse(["--config", try file("log-file = file.log\n")]).logFilePath == "file.log")
        #expect(throws: UsageError("--log-file needs a file path")) {
            _ = try Configuration.parse(arguments: ["--log-file="], environment: [:])
        }
        for text in ["--log-file PATH", "HEADWAY_LOG_FILE", "--config FILE", "HEADWAY_CONFIG"] {
            #expect(Configuration.usage.contains(text))
        }
    }

    /// A reload names each setting whose value changed by its flag name.
    @Test func changedSettingsAreNamedByFlag() throws {
        defer { directory.remove() }
        let before = try parse(["--log-level", "info", "--max-depth", "5"])
        #expect(before.settingsChanged(from: before).isEmpty)
        let after = try parse(["--log-level", "debug", "--max-depth", "6", "--listen", "127.0.0.1:9000",
                               "--cors-origin", "https://dash.example.com"])
        #expect(after.settingsChanged(from: before) == ["listen", "log-level", "max-depth", "cors-origin"])
    }
}
