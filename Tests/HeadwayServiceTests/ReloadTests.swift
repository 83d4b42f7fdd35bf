import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import Daemon
@testable import Telemetry

/// SIGHUP's reload of the configuration file, on the whole application in this process:
/// the log level applied at once, other changes left for a restart, a bad file changing
/// nothing, flags and variables still winning over the file.
@Suite(.serialized) struct ReloadTests {
    /// An application built from `arguments` (with a fresh database) whose logger keeps its
    /// lines; `body` gets a `Reload` for it, the lines, and the configuration file.
    private func withReload(_ arguments: [String], fileText: String,
                            adjust: (inout Configuration) -> Void = { _ in },
                            _ body: (inout Reload, Locked<[String]>, String) throws -> Void) throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("headwayd.conf")
        try fileText.write(toFile: path, atomically: true, encoding: .utf8)
        // Subscribers any machine's open-file limit holds: the start warns of nothing itself.
        let arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("headway.db"), "--config", path,
                         "--max-subscribers", "100"] + arguments
        guard case .run(var configuration) = try Configuration.parse(arguments: arguments, environment: [:]) else {
            throw UsageError("expected a run command")
        }
        let lines = Locked<[String]>([])
        let logger = Logger(minimumLevel: configuration.logLevel, sink: { line in lines.withLock { $0.append(line) } })
        let application = try buildApplication(configuration, logger: logger)
        defer { application.shutdown() }
        adjust(&configuration)
        var reload = Reload(application: application, configuration: configuration, arguments: arguments, environment: [:])
        try body(&reload, lines, path)
    }

    /// The lines logged since the last call, without their timestamps.
    private func take(_ lines: Locked<[String]>) -> [String] {
        lines.withLock { taken in
            defer { taken = [] }
            return taken.map { String($0.drop { $0 != " " }.dropFirst().dropLast()) }
        }
    }

    @Test func theLogLevelIsAppliedAndOtherChangesWaitForARestart() throws {
        try withReload([], fileText: "log-level = info\nmax-depth = 5\n") { reload, lines, path in
            _ = take(lines)
            try "log-level = debug\nmax-depth = 6\n".write(toFile: path, atomically: true, encoding: .utf8)
            reload.reload()
            #expect(reload.running.logLevel == .debug && reload.running.treeLimits.maximumDepth == 5)
            #expect(take(lines) == [
                #"level=warn event=config.restart_needed setting=max-depth detail="the new value takes effect at restart; the old one stays in effect""#,
                #"level=info event=tls.reload_skipped reason="TLS is off (no --tls-cert): nothing to reload""#,
                "level=info event=reload.finished config=reread tls=off log_level=debug",
            ])
            // error: the line saying so is still written (the old level showed it); later
            // info lines are not.
            try "log-level = error\nmax-depth = 5\n".write(toFile: path, atomically: true, encoding: .utf8)
            reload.reload()
            #expect(take(lines) == ["level=info event=reload.finished config=reread tls=off log_level=error"])
            reload.reload()
            #expect(take(lines) == [])
        }
    }

    @Test func aFileThatNoLongerParsesChangesNothing() throws {
        try withReload([], fileText: "log-level = debug\n") { reload, lines, path in
            _ = take(lines)
            try "log-level = warn\nmax-depth = none\n".write(toFile: path, atomically: true, encoding: .utf8)
            reload.reload()
            #expect(reload.running.logLevel == .debug)
            let logged = take(lines)
            #expect(logged.first == "level=error event=config.reload_failed file=\(path) error=\"\(path):2: --max-depth must "
                    + "be a whole number from 1 to 10000, not 'none'\" detail=\"nothing changed: the settings in effect stay\"")
            #expect(logged.last == "level=info event=reload.finished config=kept tls=off log_level=debug")
            try FileManager.default.removeItem(atPath: path)
            reload.reload()
            #expect(take(lines).first?.contains("cannot read the configuration file \(path): No such file or directory") == true)
        }
    }

    /// A flag still wins over the file on a reload; a listening socket adopted from systemd
    /// is not taken for a change of `--listen`.
    @Test func flagsStillWinAndTheAdoptedSocketIsNoChange() throws {
        try withReload(["--log-level", "warn"], fileText: "log-level = debug\n",
                       adjust: { $0.inheritedListenFD = 3; $0.port = 4242 }) { reload, lines, path in
            try "log-level = error\n".write(toFile: path, atomically: true, encoding: .utf8)
            reload.reload()
            #expect(reload.running.logLevel == .warn)
            #expect(take(lines).allSatisfy { !$0.contains("level=warn") && !$0.contains("level=error") })
        }
    }
}
