import Foundation
@testable import HeadwayCLI
import HeadwayTestSupport
import Testing

/// What one `headway run` left behind, its output as raw bytes.
struct RawResult {
    let status: Int32
    let output: [UInt8]
    let errors: [UInt8]
    var errorText: String { String(decoding: errors, as: UTF8.self) }
}

/// Starts the built `headway` with `arguments` (stdin /dev/null) and `environment` (and
/// PATH); stopped after `timeout`.
func startHeadway(_ arguments: [String], environment: [String: String] = [:], timeout: Double = 20) throws -> StartedProcess {
    try StartedProcess(builtExecutable("headway"), arguments, environment: environment.merging(["PATH": "/usr/bin:/bin"]) { $1 },
                       timeout: timeout)
}

/// Waits for a process from `startHeadway` and collects its output.
func collect(_ started: StartedProcess) -> RawResult {
    let (status, output, errors) = started.finish()
    return RawResult(status: status, output: output, errors: errors)
}

/// `headway run` with real child processes (`/bin/sh -c` scripts) against a live headwayd.
@Suite(.serialized) struct RunCommandTests {
    /// Runs `headway --server URL run OPTIONS -- /bin/sh -c SCRIPT` to its end.
    func run(_ daemon: LiveDaemon?, _ options: [String], _ script: String) throws -> RawResult {
        let server = daemon?.url ?? "http://127.0.0.1:1"
        return collect(try startHeadway(["--server", server, "run"] + options + ["--", "/bin/sh", "-c", script]))
    }

    /// The task `id` as the server has it.
    func task(_ daemon: LiveDaemon, _ id: String) throws -> [String: Any] {
        try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/\(id)").json
    }

    @Test func exitCodesPassThroughAndSetTheOutcome() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        for code in [0, 3, 42] {
            let result = try run(daemon, ["--id", "e\(code)"], "echo working; exit \(code)")
            #expect(result.status == Int32(code))
            #expect(result.errors == [])
            let task = try task(daemon, "e\(code)")
            #expect(task["state"] as? String == (code == 0 ? "succeeded" : "failed"))
            #expect(task["label"] as? String == "working")
            if code != 0 { #expect(task["message"] as? String == "the command exited with status \(code)") }
        }
        let killed = try run(daemon, ["--id", "k", "--name", "Killed"], "kill -9 $$")
        #expect(killed.status == 128 + 9)
        let task = try task(daemon, "k")
        #expect(task["state"] as? String == "failed")
        #expect(task["name"] as? String == "Killed")
        #expect(task["message"] as? String == "the command was killed by signal 9 (SIGKILL)")
    }

    @Test func outputPassesThroughByteForByte() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let result = try run(daemon, [], #"printf 'a\000\377b\n'; printf 'e\001\033[31mr' >&2; printf 'tail'; printf '\n\n' >&2"#)
        #expect(result.status == 0)
        #expect(result.output == [0x61, 0x00, 0xFF, 0x62, 0x0A] + Array("tail".utf8))
        #expect(result.errors == [0x65, 0x01, 0x1B] + Array("[31mr\n\n".utf8))
    }

    @Test func progressInOutputMakesTheTaskQuantified() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        // Each script fails: a task that succeeds is complete, whatever it had reported.
        _ = try run(daemon, ["--id", "nm"], "echo 'copied 3/10 files'; echo 'now 2/10'; exit 1")
        let fraction = try task(daemon, "nm")
        #expect(fraction["mode"] as? String == "quantified")
        #expect(fraction["completed"] as? Int == 3, "a regression is not reported")
        #expect(fraction["total"] as? Int == 10)
        #expect(fraction["label"] as? String == "now 2/10")

        _ = try run(daemon, ["--id", "pc"], "printf 'step 12%%\\r'; printf 'step 40%%' >&2; exit 1")
        let percent = try task(daemon, "pc")
        #expect(percent["completed"] as? Int == 40)
        #expect(percent["total"] as? Int == 100)

        _ = try run(daemon, ["--id", "none"], "echo 'no numbers here'")
        #expect(try task(daemon, "none")["mode"] as? String == "indeterminate")

        let custom = try run(daemon, ["--id", "cu", "--progress-pattern", #"done (?<completed>\d+) of (?<total>\d+)"#],
                             "echo 'done 7 of 9'; echo 'ignored 1/2'; exit 1")
        #expect(custom.status == 1)
        let patterned = try task(daemon, "cu")
        #expect(patterned["completed"] as? Int == 7)
        #expect(patterned["total"] as? Int == 9)
    }

    /// A cancel through the API: SIGTERM ends the child (143); a child that ignores it
    /// gets SIGKILL after --kill-after (137); both tasks end canceled.
    @Test(arguments: [("", Int32(143)), ("trap '' TERM; ", Int32(137))])
    func aCancelStopsTheChild(trap: String, expected: Int32) throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let started = try startHeadway(["--server", daemon.url, "run", "--id", "c", "--kill-after", "0.5", "--",
                                        "/bin/sh", "-c", trap + "echo started; while :; do sleep 0.1; done"])
        var canceled = false
        for _ in 0..<500 where !canceled {
            canceled = try TestHTTPClient(port: daemon.port).request("POST", "/v1/tasks/c/cancel", json: "{}").status == 202
            if !canceled { usleep(10_000) }
        }
        #expect(canceled)
        let result = collect(started)
        #expect(result.status == expected)
        #expect(result.output == Array("started\n".utf8))
        #expect(try task(daemon, "c")["state"] as? String == "canceled")
    }

    @Test func anUnreachableServerOnlyWarns() throws {
        let result = try run(nil, ["--id", "u"], "echo out; echo err >&2; exit 42")
        #expect(result.status == 42)
        #expect(result.output == Array("out\n".utf8))
        #expect(result.errorText.contains("err\n"))
        #expect(result.errorText.contains("headway: cannot reach http://127.0.0.1:1"), "\(result.errorText)")
    }

    /// A command that cannot start exits as a shell would: 127 not found, 126 not runnable.
    @Test func aCommandThatCannotStart() throws {
        let missing = collect(try startHeadway(["--server", "http://127.0.0.1:1", "run", "--", "no-such-command-here"]))
        #expect(missing.status == 127)
        #expect(missing.errorText == "headway: cannot run 'no-such-command-here': No such file or directory\n")
        let notRunnable = collect(try startHeadway(["--server", "http://127.0.0.1:1", "run", "--", "/etc/passwd"]))
        #expect(notRunnable.status == 126, "\(notRunnable.errorText)")
    }

    /// A report the server refuses (here the registration: no such parent) stops the
    /// reports, not the command: its output and exit status pass through.
    @Test func aRefusedReportOnlyWarns() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let result = try run(daemon, ["--parent", "nope"], "echo start; sleep 0.3; echo end; exit 7")
        #expect(result.status == 7, "\(result.errorText)")
        #expect(result.output == Array("start\nend\n".utf8))
        #expect(result.errorText.contains("no more reports for this command"), "\(result.errorText)")
    }

    /// A server that answers a report 503 is retried, one whose answer refuses a
    /// reading (422) has that report dropped, and the task is finished in the end either
    /// way (a stand-in server records what it was sent).
    @Test func refusedAndUnavailableReportsStillEndWithAFinish() throws {
        let task = #"{"id":"t","name":"n","state":"running","cancel_requested":false}"#
        let server = try StubServer { method, path, index in
            if path == "/v1/tasks/t/progress" && index == 1 {
                return (503, #"{"title":"Busy","detail":"later","code":"server_busy","status":503}"#)
            }
            if path == "/v1/tasks/t/progress" && index == 2 {
                return (422, #"{"title":"Invalid","detail":"no","code":"validation_failed","status":422}"#)
            }
            return (path == "/v1/tasks" ? 201 : 200, task)
        }
        defer { server.close() }
        let result = collect(try startHeadway(["--server", server.url, "run", "--", "/bin/sh", "-c",
                                               "echo 1/4; sleep 1.2; echo 2/4; sleep 1.2; echo 3/4; exit 4"]))
        #expect(result.status == 4, "\(result.errorText)")
        let requests = server.requests
        #expect(requests.first?.hasPrefix("POST /v1/tasks ") == true, "\(requests)")
        #expect(requests.last?.hasPrefix("POST /v1/tasks/t/finish ") == true, "\(requests)")
        #expect(requests.last?.contains(#""outcome":"failed""#) == true, "\(requests)")
        #expect(result.errorText.contains("(server_busy)"), "\(result.errorText)")
        #expect(result.errorText.contains("that report is dropped"), "\(result.errorText)")
        #expect(!result.errorText.contains("no more reports"), "\(result.errorText)")
    }

    /// When the reader of `headway run`'s stdout goes away (`run -- yes | head -1`), the
    /// command's own stdout closes too: it dies of SIGPIPE as it would alone (141).
    @Test func aReaderGoneStopsAWriterThatNeverEnds() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: builtExecutable("headway"))
        process.arguments = ["--server", "http://127.0.0.1:\(unusedPort())", "run", "--", "yes"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        DispatchQueue.global().asyncAfter(deadline: .now() + 20) { [process] in
            if process.isRunning { process.terminate() }
        }
        let first = out.fileHandleForReading.readData(ofLength: 2)
        try out.fileHandleForReading.close()
        process.waitUntilExit()
        #expect(first == Data("y\n".utf8))
        #expect(process.terminationStatus == 128 + SIGPIPE)
    }

    /// With stderr a pipe nobody reads, the warning that the server is away is dropped
    /// and the command still runs to its end.
    @Test func aClosedStderrDoesNotStopTheCommand() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: builtExecutable("headway"))
        process.arguments = ["--server", "http://127.0.0.1:\(unusedPort())", "run", "--", "/bin/sh", "-c", "echo done; exit 3"]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try err.fileHandleForReading.close()
        try process.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 3)
        #expect(output == "done\n")
    }

    /// The command's environment holds no token: neither the one from HEADWAY_TOKEN nor
    /// one from --token, nor HEADWAY_URL's `user:password@`, while `headway run` itself
    /// reports with the token (the daemon requires one). With --pass-token the command gets
    /// the token and the server this run uses.
    @Test func theTokenStaysOutOfTheCommandsEnvironment() throws {
        let (daemon, secret) = try AdminCommandTests.daemonWithAdminToken()
        defer { daemon.stop() }
        // HEADWAY_PROGRESS_FILE is the run's own, for the command; it is left out here.
        let script = "env | grep '^HEADWAY' | grep -v '^HEADWAY_PROGRESS_FILE=' | sort; exit 0"
        func run(_ options: [String], _ environment: [String: String]) throws -> RawResult {
            collect(try startHeadway(["--server", daemon.url, "run"] + options + ["--", "/bin/sh", "-c", script],
                                     environment: environment))
        }
        let elsewhere = "http://alice:s3cret@127.0.0.1:1/base"
        let inherited = try run(["--id", "env"], ["HEADWAY_TOKEN": secret, "HEADWAY_URL": elsewhere])
        #expect(inherited.status == 0, "\(inherited.errorText)")
        #expect(String(decoding: inherited.output, as: UTF8.self) == "HEADWAY_URL=http://127.0.0.1:1/base\n")
        let given = try run(["--id", "flag", "--token", secret], [:])
        #expect(given.status == 0, "\(given.errorText)")
        #expect(given.output == [], "\(String(decoding: given.output, as: UTF8.self))")
        for id in ["env", "flag"] {
            let task = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/\(id)",
                                                                     headers: [("Authorization", "Bearer \(secret)")]).json
            #expect(task["state"] as? String == "succeeded", "the run reported with the token: \(task)")
        }
        let passed = try run(["--id", "pass", "--token", secret, "--pass-token"], ["HEADWAY_URL": elsewhere])
        #expect(passed.status == 0, "\(passed.errorText)")
        #expect(String(decoding: passed.output, as: UTF8.self) == "HEADWAY_TOKEN=\(secret)\nHEADWAY_URL=\(daemon.url)\n")
    }

    /// Nor can the command read the token from `headway run`'s own environment in /proc
    /// (`/proc/$PPID/environ`: a process of the same user could, as it ran `cat` on it and
    /// printed HEADWAY_TOKEN): `run` is not dumpable. Run as an ordinary user (here,
    /// under root, as `nobody` through setpriv), since root reads any process's.
    @Test(.enabled(if: getuid() != 0 || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
    func theTokenCannotBeReadFromRunsOwnEnvironment() throws {
        let script = "tr '\\0' '\\n' < /proc/$PPID/environ | grep '^HEADWAY_TOKEN'; exit 0"
        let headway = ["--server", "http://127.0.0.1:1", "run", "--id", "proc", "--", "/bin/sh", "-c", script]
        let started: StartedProcess
        if getuid() == 0 {
            started = try StartedProcess("/usr/bin/setpriv",
                                         ["--reuid=65534", "--regid=65534", "--clear-groups", builtExecutable("headway")]
                                             + headway,
                                         environment: ["PATH": "/usr/bin:/bin", "HEADWAY_TOKEN": "hw_notforthecommand"],
                                         timeout: 20)
        } else {
            started = try startHeadway(headway, environment: ["HEADWAY_TOKEN": "hw_notforthecommand"])
        }
        let result = collect(started)
        #expect(result.status == 0, "\(result.errorText)")
        #expect(String(decoding: result.output, as: UTF8.self) == "", "the command read run's environment")
    }

    /// The child's environment: each entry's bytes kept, the token's variable dropped,
    /// the URL's user information cut (with or without a scheme, never past the authority).
    @Test func theChildEnvironmentDropsTheCredentials() {
        let entries = ["PATH=/bin", "HEADWAY_TOKEN=hw_x", "HEADWAY_TOKEN_FILE=/keep", "HEADWAY_URL=https://u:p@h:1/a@b?c@d",
                       "HEADWAY_TOKEN=", "X=HEADWAY_TOKEN=y"].map { Array($0.utf8) } + [[0x41, 0x3D, 0xFF, 0xC3]]
        let child = RunCommand.childEnvironment(entries, passToken: false, token: "hw_x", server: "http://h:1")
        #expect(child == ["PATH=/bin", "HEADWAY_TOKEN_FILE=/keep", "HEADWAY_URL=https://h:1/a@b?c@d", "X=HEADWAY_TOKEN=y"]
            .map { Array($0.utf8) } + [[0x41, 0x3D, 0xFF, 0xC3]])
        let passed = RunCommand.childEnvironment(entries, passToken: true, token: "hw_t", server: "http://v:w@h:2")
        #expect(passed == ["PATH=/bin", "HEADWAY_TOKEN_FILE=/keep", "X=HEADWAY_TOKEN=y"].map { Array($0.utf8) }
            + [[0x41, 0x3D, 0xFF, 0xC3]] + ["HEADWAY_TOKEN=hw_t", "HEADWAY_URL=http://v:w@h:2"].map { Array($0.utf8) })
        for (url, expected) in [("http://h:1", "http://h:1"), ("u:p@h:1/x", "h:1/x"), ("http://a@b@h/", "http://h/"),
                                ("http://h/p?q=@x#@y", "http://h/p?q=@x#@y"), ("http://@h", "http://h"), ("", "")] {
            #expect(RunCommand.withoutUserinfo(Array(url.utf8)) == Array(expected.utf8), "\(url)")
        }
    }

    @Test func usageErrorsAndHelp() throws {
        let missing = try headway("run")
        #expect(missing.status == 64)
        #expect(missing.errors == "headway: missing <command>\nSee 'headway run --help'.\n")
        let pattern = try headway("run", "--progress-pattern", "(?<total>\\d+)", "--", "true")
        #expect(pattern.status == 64)
        #expect(pattern.errors.hasPrefix("headway: --progress-pattern needs a named group"))
        let help = try headway("run", "--help")
        let golden = try String(contentsOf: packageRoot.appendingPathComponent("Tests/HeadwayCLITests/golden/help-run.txt"),
                                encoding: .utf8)
        #expect(help.output == golden)
    }

    /// SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to `headway run` by another process goes to the child,
    /// whose death by it is passed on (128+n) and recorded on the task.
    @Test(arguments: [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT"), (SIGHUP, "SIGHUP"), (SIGQUIT, "SIGQUIT")])
    func signalsAreForwardedToTheChild(signal: Int32, name: String) throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let started = try startHeadway(["--server", daemon.url, "run", "--id", "s", "--",
                                        "/bin/sh", "-c", "echo started; while :; do sleep 0.1; done"])
        var running = false
        for _ in 0..<500 where !running {
            running = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/s").status == 200
            if !running { usleep(10_000) }
        }
        #expect(running)
        kill(started.process.processIdentifier, signal)
        let result = collect(started)
        #expect(result.status == 128 + signal)
        #expect(try task(daemon, "s")["message"] as? String == "the command was killed by signal \(signal) (\(name))")
    }

    /// Ctrl-C in a real terminal reaches the child once: the terminal signals the whole
    /// foreground group, so `headway run` does not send it again. The child counts the
    /// SIGINTs it gets and exits 7; the exit status passes through.
    @Test func ctrlCInATerminalReachesTheChildOnce() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let child = #"n=0; trap 'n=$((n+1))' INT; echo ready; while [ $n -eq 0 ]; do sleep 0.05; done; sleep 0.5; echo "INT count $n"; exit 7"#
        // The shell around it catches SIGINT (its children start with the default) so
        // that it lives on to print the status.
        let script = "trap : INT; \(builtExecutable("headway")) --server \(daemon.url) run --id c -- /bin/sh -c '\(child.replacingOccurrences(of: "'", with: #"'\''"#))'; echo \"exit=$?\"; sleep 60"
        let terminal = try TmuxPane(columns: 80, rows: 10, command: "/bin/sh -c " + shellQuoted(script))
        defer { terminal.close() }
        #expect(waitUntil(10) { terminal.screen().contains("ready") }, "\(terminal.screen())")
        terminal.sendKeys("C-c")
        #expect(waitUntil(10) { terminal.screen().contains("exit=") }, "\(terminal.screen())")
        let screen = terminal.screen()
        #expect(screen.contains("INT count 1"), "\(screen)")
        #expect(screen.contains("exit=7"), "\(screen)")
        #expect(try task(daemon, "c")["state"] as? String == "failed")
    }

    /// A server that comes up after the command started: a warning, then reports resume.
    @Test func reportsResumeWhenTheServerComesBack() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let port = unusedPort()
        let gate = directory.file("go"), errorsPath = directory.file("errors")
        _ = FileManager.default.createFile(atPath: errorsPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: builtExecutable("headway"))
        process.arguments = ["--server", "http://127.0.0.1:\(port)", "run", "--id", "r", "--", "/bin/sh", "-c",
                             "echo 'step 5/10'; while [ ! -e '\(gate)' ]; do sleep 0.05; done; exit 1"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorsPath))
        try process.run()
        DispatchQueue.global().asyncAfter(deadline: .now() + 20) { [process] in
            if process.isRunning { process.terminate() }
        }
        var errors: String { (try? String(contentsOfFile: errorsPath, encoding: .utf8)) ?? "" }
        for _ in 0..<500 where !errors.contains("cannot reach") { usleep(10_000) }
        #expect(errors.contains("headway: cannot reach http://127.0.0.1:\(port)"))

        let daemon = try DaemonProcess(["--listen", "127.0.0.1:\(port)", "--db", directory.file("h.db")],
                                       logPath: directory.file("headwayd.log"))
        defer { daemon.stop(SIGTERM) }
        var registered = false
        for _ in 0..<1000 where !registered {
            registered = (try? TestHTTPClient(port: port).request("GET", "/v1/tasks/r").status) == 200
            if !registered { usleep(10_000) }
        }
        #expect(registered)
        _ = FileManager.default.createFile(atPath: gate, contents: nil)
        process.waitUntilExit()
        #expect(process.terminationStatus == 1)
        #expect(errors.contains("headway: the server answers again; reporting resumed"), "\(errors)")
        let task = try TestHTTPClient(port: port).request("GET", "/v1/tasks/r").json
        #expect(task["state"] as? String == "failed")
        #expect(task["completed"] as? Int == 5)
        #expect(task["total"] as? Int == 10)
    }
}
