import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing

/// A built executable running in the background, its output collected as it comes.
final class BackgroundProcess: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var outBytes: [UInt8] = [], errBytes: [UInt8] = []
    /// Whether each pipe reached its end (the handler's empty read): only then is all
    /// that the process wrote collected, which its exit alone does not say.
    private var outEnded = false, errEnded = false

    init(_ name: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        process.executableURL = URL(fileURLWithPath: builtExecutable(name))
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { first, _ in first }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        out.fileHandleForReading.readabilityHandler = { [self] handle in
            let data = handle.availableData
            lock.withLock {
                outBytes += data
                if data.isEmpty { outEnded = true }
            }
            if data.isEmpty { handle.readabilityHandler = nil }
        }
        err.fileHandleForReading.readabilityHandler = { [self] handle in
            let data = handle.availableData
            lock.withLock {
                errBytes += data
                if data.isEmpty { errEnded = true }
            }
            if data.isEmpty { handle.readabilityHandler = nil }
        }
        try process.run()
    }

    var output: String { lock.withLock { String(decoding: outBytes, as: UTF8.self) } }
    var errors: String { lock.withLock { String(decoding: errBytes, as: UTF8.self) } }

    /// Waits (polling, at most `seconds`) until `condition` holds; false when it never did.
    @discardableResult
    func waitFor(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
        waitUntil(seconds, condition)
    }

    /// Waits at most `seconds` for the process to exit and for what it wrote to be
    /// collected; its status, nil when it did not exit.
    func exitStatus(within seconds: Double = 10) -> Int32? {
        guard waitUntil(seconds, { !process.isRunning }) else { return nil }
        process.waitUntilExit()
        _ = waitUntil(seconds) { lock.withLock { outEnded && errEnded } }
        return process.terminationStatus
    }

    /// Stops it with `signal`: SIGKILL by default, since a child of the test runner may
    /// inherit a mask that blocks SIGTERM.
    func stop(_ signal: Int32 = SIGKILL) {
        if process.isRunning { kill(process.processIdentifier, signal) }
        process.waitUntilExit()
    }
}

/// Polls `condition` every 20 ms for at most `seconds`.
func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// `headway watch` against a live `headwayd`: plain lines, `--until-done`, resuming after
/// the daemon restarts, and the live view in a real terminal (tmux).
@Suite(.serialized) struct WatchLiveTests {
    func run(_ server: String, _ arguments: String...) throws {
        let result = try runBuilt("headway", arguments + ["--server", server])
        #expect(result.status == 0, "\(arguments): \(result.errors)")
    }

    @Test func plainLinesAppearAsProgressIsPosted() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try run(daemon.url, "start", "Copy", "--id", "c1", "--total", "10", "--unit", "files")
        let watch = try BackgroundProcess("headway", ["watch", "c1", "--server", daemon.url])
        defer { watch.stop() }
        #expect(watch.waitFor { watch.output.contains("0/10 files") }, "\(watch.output)")
        try run(daemon.url, "progress", "c1", "--completed", "4")
        #expect(watch.waitFor { watch.output.contains("Copy  running  ▕████      ▏ 40%  4/10 files  ") }, "\(watch.output)")
        #expect(watch.output.split(separator: "\n").allSatisfy { $0.hasSuffix("  c1") }, "the id last: \(watch.output)")
        try run(daemon.url, "progress", "c1", "--completed", "7", "--label", "Copying")
        #expect(watch.waitFor { watch.output.contains("▕███████   ▏ 70%  7/10 files  ") && watch.output.contains("Copying") },
                "\(watch.output)")
        #expect(!watch.output.contains("\u{1B}"), "no escape codes without a terminal")
        #expect(watch.process.isRunning, "without --until-done it keeps watching")
    }

    /// 0 when all succeeded, 4 when one failed, 5 when one was canceled and none failed.
    static let outcomes: [([String], Int32)] = [(["succeeded", "succeeded"], 0), (["failed", "canceled"], 4),
                                                  (["succeeded", "canceled"], 5)]

    @Test(arguments: outcomes)
    func untilDoneExitsWithTheOutcome(outcomes: [String], status: Int32) throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try run(daemon.url, "start", "A", "--id", "a")
        try run(daemon.url, "start", "B", "--id", "b")
        let watch = try BackgroundProcess("headway", ["watch", "a", "b", "--until-done", "--server", daemon.url])
        defer { watch.stop() }
        #expect(watch.waitFor { watch.output.contains("B  running") }, "\(watch.output)")
        try run(daemon.url, "finish", "a", "--outcome", outcomes[0])
        #expect(watch.waitFor { watch.output.contains("A  \(outcomes[0])") }, "\(watch.output)")
        #expect(watch.process.isRunning, "b is still running")
        try run(daemon.url, "finish", "b", "--outcome", outcomes[1])
        #expect(watch.exitStatus() == status, "\(watch.output)\(watch.errors)")
    }

    /// `--until-done` names tasks that must exist: a missing one is an error at once, one
    /// that finished before the watch ends it at once with its outcome, and one deleted
    /// while watched ends it with an error instead of a wait that never ends.
    @Test func untilDoneWithMissingFinishedAndDeletedTasks() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let missing = try runBuilt("headway", ["watch", "nope", "--until-done", "--server", daemon.url])
        #expect(missing.status == 1 && missing.errors.contains("(not_found)"), "\(missing)")
        let missingParent = try runBuilt("headway", ["watch", "--parent", "nope", "--until-done", "--server", daemon.url])
        #expect(missingParent.status == 1 && missingParent.errors.contains("(not_found)"), "\(missingParent)")
        try run(daemon.url, "start", "Done", "--id", "done")
        try run(daemon.url, "finish", "done", "--outcome", "failed")
        let finished = try runBuilt("headway", ["watch", "done", "--until-done", "--server", daemon.url])
        #expect(finished.status == 4, "\(finished)")
        try run(daemon.url, "start", "Doomed", "--id", "doomed")
        let watch = try BackgroundProcess("headway", ["watch", "doomed", "--until-done", "--server", daemon.url])
        defer { watch.stop() }
        #expect(watch.waitFor { watch.output.contains("Doomed  running") }, "\(watch.output)")
        try run(daemon.url, "delete", "doomed", "--yes")
        #expect(watch.exitStatus() == 1)
        #expect(watch.errors.contains("headway: task doomed was deleted before it finished"), "\(watch.errors)")
    }

    /// `--json`: one object per event, with the event's id for a script to resume from.
    @Test func jsonLinesCarryTheEventIDs() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try run(daemon.url, "start", "Copy", "--id", "c1", "--total", "10")
        let watch = try BackgroundProcess("headway", ["watch", "c1", "--json", "--until-done", "--server", daemon.url])
        defer { watch.stop() }
        #expect(watch.waitFor { watch.output.contains("snapshot") }, "\(watch.output)")
        try run(daemon.url, "progress", "c1", "--completed", "4")
        try run(daemon.url, "finish", "c1", "--outcome", "succeeded")
        #expect(watch.exitStatus() == 0, "\(watch.errors)")
        let lines = watch.output.split(separator: "\n").map { JSONValue.parse(Array($0.utf8)) }
        let ids: [Int64] = lines.compactMap { line in
            guard case .object(let object)? = line, case .string(let id)? = object["id"] else { return nil }
            return Int64(id)
        }
        #expect(lines.count == 3 && ids.count == 3, "\(watch.output)")
        #expect(ids == ids.sorted() && Set(ids).count == 3, "increasing ids: \(ids)")
    }

    /// A stream that stops sending anything (not even keep-alives) is given up after
    /// `--idle-timeout` and resumed with the last event id.
    @Test func aSilentStreamIsDroppedAndResumed() throws {
        let server = try SilentEventServer()
        defer { server.close() }
        let watch = try BackgroundProcess("headway", ["watch", "--idle-timeout", "1", "--server", server.url])
        defer { watch.stop() }
        let first = try server.acceptRequest(within: 10)
        #expect(first.hasPrefix("GET /v1/events?min_duration=2.000 "), "\(first)")
        #expect(!first.contains("Last-Event-ID"), "\(first)")
        let second = try server.acceptRequest(within: 10)
        #expect(second.contains("Last-Event-ID: 7\r\n"), "\(second)")
        #expect(watch.waitFor { watch.errors.contains("reconnecting…") }, "\(watch.errors)")
    }

    /// In a terminal shorter than the table: the frame keeps to the screen (the header
    /// once, the running tasks first, the rest counted) and still redraws in place.
    @Test func aTallTableKeepsToTheScreen() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        for index in 0..<14 {
            try run(daemon.url, "start", "Task \(index)", "--id", "t\(index)", "--total", "10")
            if index < 8 { try run(daemon.url, "finish", "t\(index)", "--outcome", "succeeded") }
        }
        let terminal = try TmuxPane(columns: 80, rows: 10,
                                    command: "NO_COLOR=1 exec \(builtExecutable("headway")) watch --min-duration 0 --server \(daemon.url)")
        defer { terminal.close() }
        #expect(waitUntil(10) { terminal.screen().contains(" more: ") }, "\(terminal.screen())")
        try run(daemon.url, "progress", "t13", "--completed", "6")
        #expect(waitUntil(10) { terminal.screen().contains("6/10") }, "\(terminal.screen())")
        let lines = terminal.screen().split(separator: "\n")
        #expect(lines.first?.hasPrefix("NAME ") == true, "the header stays on top: \(lines)")
        #expect(lines.filter { $0.hasPrefix("NAME ") }.count == 1, "\(lines)")
        for running in 8..<14 { #expect(lines.contains { $0.hasSuffix("  t\(running)") }, "t\(running): \(lines)") }
        #expect(lines.contains("… 7 more: 7 succeeded"), "\(lines)")
        #expect(lines.count == 9, "header, 7 tasks, the count; the last row for the cursor: \(lines)")
    }

    @Test func resumesAfterTheDaemonRestartsWithoutDuplicates() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let port = unusedPort()
        let server = "http://127.0.0.1:\(port)"
        func startDaemon() throws -> BackgroundProcess {
            let daemon = try BackgroundProcess("headwayd", ["--listen", "127.0.0.1:\(port)", "--db", directory.file("h.db")])
            #expect(daemon.waitFor { daemon.errors.contains("event=server.listening") }, "\(daemon.errors)")
            return daemon
        }
        var daemon = try startDaemon()
        defer { daemon.stop(SIGTERM) }
        try run(server, "start", "Copy", "--id", "c1", "--total", "10")
        let watch = try BackgroundProcess("headway", ["watch", "--server", server])
        defer { watch.stop() }
        try run(server, "progress", "c1", "--completed", "3")
        #expect(watch.waitFor { watch.output.contains("3/10") }, "\(watch.output)")
        daemon.stop(SIGTERM)
        #expect(watch.waitFor { watch.errors.contains("reconnecting…") }, "\(watch.errors)")
        daemon = try startDaemon()
        try run(server, "start", "After", "--id", "c2")
        try run(server, "progress", "c1", "--completed", "5")
        #expect(watch.waitFor { watch.output.contains("5/10") && watch.output.contains("After  running") }, "\(watch.output)")
        #expect(watch.errors.contains("reconnected"))
        let lines = watch.output.split(separator: "\n")
        #expect(lines.filter { $0.contains("3/10") }.count == 1, "\(watch.output)")
        #expect(lines.filter { $0.contains("5/10") }.count == 1, "\(watch.output)")
        #expect(lines.filter { $0.contains("After  running") }.count == 1, "\(watch.output)")
    }

    /// In tmux: the bar moves as progress is posted; an indeterminate task's glyph stops
    /// (`‖`) once it stalls.
    @Test func theTerminalViewMovesAndShowsAStall() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try run(daemon.url, "start", "Copy", "--id", "c1", "--total", "10", "--unit", "files")
        try run(daemon.url, "start", "Spin", "--id", "s1", "--stall-timeout", "1")
        try run(daemon.url, "heartbeat", "s1", "--label", "busy")
        let terminal = try TmuxPane(columns: 100, rows: 30,
                                    command: "NO_COLOR=1 exec \(builtExecutable("headway")) watch --server \(daemon.url)")
        defer { terminal.close() }
        func screen() -> String { terminal.screen() }
        #expect(waitUntil(10) { screen().contains("0/10 files") }, "\(screen())")
        try run(daemon.url, "progress", "c1", "--completed", "4")
        #expect(waitUntil(10) { screen().contains("▕████      ▏ 40%  4/10 files") }, "\(screen())")
        try run(daemon.url, "progress", "c1", "--completed", "9")
        #expect(waitUntil(10) { screen().contains("▕█████████ ▏ 90%  9/10 files") }, "\(screen())")
        let shown = screen()
        #expect(!shown.contains("40%"), "redrawn in place: \(shown)")
        #expect(shown.split(separator: "\n").filter { $0.contains("c1") }.count == 1, "\(shown)")
        // The stall (after 1 s without a signal) fixes the glyph.
        func stalledLine() -> Bool {
            screen().split(separator: "\n").contains { $0.hasPrefix("Spin  running  ‖ ") && $0.contains("no signal for") }
        }
        #expect(waitUntil(10, stalledLine), "\(screen())")
    }
}

/// Runs `arguments` (a full path first) with no input or output and waits for it with
/// waitpid; its exit status, or -1 when it could not start.
func spawnAndWait(_ arguments: [String]) -> Int32 {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    let environment = ["PATH=/usr/bin:/bin", "TERM=xterm-256color"]
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    var pid: pid_t = 0
    guard posix_spawn(&pid, arguments[0], &actions, nil, argv, envp) == 0 else { return -1 }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return (status >> 8) & 0xFF
}
