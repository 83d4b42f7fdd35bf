import ArgumentParsing
import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayCLI

/// Issue 46's rules of the command line, as pure functions: one percent rule, tables that
/// keep the name, label and bar at 80 columns with the id last and shortened, `watch`'s
/// order and count of what it hides, `run` following the last progress form, and "did you
/// mean".
@Suite struct HonestCLIRulesTests {
    let now = RenderingFixtures.now

    func task(_ fields: String) -> TaskView { RenderingFixtures.task(fields) }

    /// floor(fraction × 100); 100 only when the fraction is exactly 1 — so a running task
    /// at 120 of 120 is 100% (the CLI said 99%), and 29 of 100 is 29% (0.29 × 100 is 28.999…).
    @Test func onePercentRule() {
        let full = task(#""id":"f","name":"F","state":"running","mode":"quantified","completed":120,"total":120,"fraction":1"#)
        #expect(full.percent == 100)
        #expect(TaskTable(tasks: [full], now: now, header: false).render(width: 120)[0].contains("▕██████████▏100%"))
        let nearly = task(#""id":"n","name":"N","state":"running","mode":"quantified","completed":999,"total":1000,"fraction":0.999"#)
        #expect(nearly.percent == 99)
        #expect(task(#""id":"t","name":"T","state":"running","completed":29,"total":100,"fraction":0.29"#).percent == 29)
        let parent = task(#""id":"p","name":"P","state":"running","mode":"quantified","completed":0,"total":null,"fraction":0.9999,"children":{"total":2}"#)
        #expect(parent.percent == 99)
        #expect(Formatting.percent(1) == 100 && Formatting.percent(0.999_999) == 99 && Formatting.percent(0.07) == 7)
    }

    /// 80 columns, a generated 36-character id: the name keeps 16 cells or more, the bar
    /// stays, a quantified task's label shows, the id comes last cut to 8 characters.
    @Test func eightyColumnsKeepNameBarAndLabelWithTheIDLast() {
        let id = "3f2a9c1e-5b7d-4e0a-9c1f-2d3e4f5a6b7c"
        let copy = task(#""id":"\#(id)","name":"Copy photos to the archive","label":"Copying IMG_0420.jpg","state":"running","mode":"quantified","completed":768,"total":1200,"unit":"files","fraction":0.64,"rate":12.3,"eta_seconds":35,"created_at":"2026-11-30T11:57:00.000Z","last_signal_at":"2026-11-30T11:59:59.000Z""#)
        let lines = TaskTable(tasks: [copy, RenderingFixtures.tasks[1]], now: now).render(width: 80)
        #expect(lines[0].hasPrefix("NAME "), "\(lines)")
        #expect(lines[0].hasSuffix("  ID"), "\(lines)")
        #expect(lines[1].hasPrefix("Copy photos to …  running  ▕"), "\(lines[1])")
        #expect(lines[1].contains("▕"), "the bar stays: \(lines[1])")
        #expect(lines[1].contains("Copying"), "the label of a quantified task: \(lines[1])")
        #expect(lines[1].hasSuffix("  3f2a9c1e"), "\(lines[1])")
        #expect(lines[1].contains("3 min"), "how long it has run: \(lines[1])")
        for line in lines { #expect(DisplayWidth.of(line) <= 80) }
        // Two generated ids that share 8 characters are told apart.
        #expect(IDDisplay.shorten([id, "3f2a9c1e-0000-4e0a-9c1f-2d3e4f5a6b7c", "build"])
                == ["3f2a9c1e-5", "3f2a9c1e-0", "build"])
        #expect(IDDisplay.couldBePrefix("3f2a") && IDDisplay.couldBePrefix("3f2a9c1e-5b") && !IDDisplay.couldBePrefix("build"))
    }

    /// Why, on the row: a stall from the task's own clock (`no signal for`), a parent's
    /// children, a finished task's message, finish time and how long it ran, a quiet running
    /// task's last signal.
    @Test func rowsSayWhyAndHowLong() {
        let silent = task(#""id":"s","name":"S","state":"running","mode":"indeterminate","stalled":true,"stall_reason":"silent","stalled_since":"2026-11-30T11:59:50.000Z","last_signal_at":"2026-11-30T11:59:18.000Z","created_at":"2026-11-30T11:50:00.000Z""#)
        let idle = task(#""id":"q","name":"Q","state":"running","mode":"quantified","completed":1,"total":4,"stalled":true,"stall_reason":"no_progress","last_progress_at":"2026-11-30T11:57:00.000Z","last_signal_at":"2026-11-30T11:59:59.000Z""#)
        let parent = task(#""id":"p","name":"P","state":"running","mode":"quantified","completed":0,"fraction":0.3,"attention":"failed","children":{"total":3,"pending":0,"running":2,"stalled":1,"succeeded":0,"failed":1,"canceled":0}"#)
        let failed = task(#""id":"f","name":"F","state":"failed","mode":"indeterminate","message":"disk full","created_at":"2026-11-30T11:50:00.000Z","finished_at":"2026-11-30T11:54:00.000Z""#)
        let quiet = task(#""id":"r","name":"R","state":"running","mode":"indeterminate","label":"busy","created_at":"2026-11-30T11:00:00.000Z","last_signal_at":"2026-11-30T11:59:52.000Z""#)
        let table = TaskTable(tasks: [silent, idle, parent, failed, quiet], now: now, header: false,
                              timeZone: TimeZone(identifier: "UTC")!)
        let lines = table.render(width: 140)
        #expect(lines[0].contains("no signal for 42 s"), "from last_signal_at, not stalled_since: \(lines[0])")
        #expect(lines[1].contains("no progress for 3 min"), "\(lines[1])")
        #expect(lines[2].contains("1 of 3 failed · 1 stalled"), "\(lines[2])")
        #expect(lines[3].contains("4 min") && lines[3].contains("disk full · ended 11:54"), "\(lines[3])")
        #expect(lines[4].contains("1 h") && lines[4].contains("busy · last signal 8 s ago"), "\(lines[4])")
    }

    /// 140 tasks in a few rows: failed and stalled first, what is hidden counted by state.
    @Test func watchPutsTroubleFirstAndCountsWhatItHides() {
        var tasks: [TaskView] = []
        for index in 0..<110 { tasks.append(task(#""id":"r\#(index)","name":"R","state":"running""#)) }
        for index in 0..<9 { tasks.append(task(#""id":"s\#(index)","name":"S","state":"succeeded""#)) }
        tasks.append(task(#""id":"bad","name":"Bad","state":"failed""#))
        tasks.append(task(#""id":"stuck","name":"Stuck","state":"running","stalled":true"#))
        let (shown, hidden) = WatchState.fit(tasks, rows: 3)
        #expect(shown.map(\.id) == ["bad", "stuck", "r0"])
        #expect(WatchState.hiddenLine(hidden) == "… 118 more: 109 running, 9 succeeded")
    }

    /// "N/40" then "NN%": a percent is a share of the 40, never a count of 100.
    @Test func runFollowsTheLastFormAndAPercentIsNeverACount() {
        var recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.read("12/40 files") == ProgressReading(completed: 12, total: 40))
        #expect(recognizer.read("uploading 50%") == ProgressReading(completed: 20, total: 40))
        #expect(recognizer.read("40/40 files") == ProgressReading(completed: 40, total: 40))
        #expect(recognizer.read("upload 100%") == nil, "already whole: never 100 of 100")
        #expect(recognizer.last == ProgressReading(completed: 40, total: 40))
        var percents = ProgressRecognizer(pattern: nil)
        #expect(percents.read("37%") == ProgressReading(completed: 37, total: 100, isPercent: true))
        #expect(percents.read("30/40") == ProgressReading(completed: 75, total: 100, isPercent: true))
        #expect(recognizer.parse("file 3/40 … 37%") == ProgressReading(completed: 37, total: 100, isPercent: true),
                "the form shown last on the line")
        #expect(ProgressRecognizer.progressFileLine("12/40 resizing")?.reading == ProgressReading(completed: 12, total: 40))
        #expect(ProgressRecognizer.progressFileLine("12/40 resizing")?.label == "resizing")
        #expect(ProgressRecognizer.progressFileLine("37.5%")?.reading == ProgressReading(completed: 37, total: 100, isPercent: true))
        #expect(ProgressRecognizer.progressFileLine("hello") == nil && ProgressRecognizer.progressFileLine("5/4") == nil)
    }

    /// Output lines as a terminal shows them: a `\r`-redrawn bar is the line it ends as.
    @Test func outputLinesAreWhatATerminalShows() {
        var lines = OutputLines()
        let text = Array("first\nbar 10%\rbar 50%\rbar 100%\n\n  indented  \nopen".utf8)
        let out = text.withUnsafeBytes { lines.lines(in: $0) }
        #expect(out == ["first", "bar 100%", "  indented"])
        #expect(lines.finish() == "open")
        var many = OutputLines()
        let flood = Array((0..<1000).map { "line \($0)\n" }.joined().utf8)
        let kept = flood.withUnsafeBytes { many.lines(in: $0) }
        #expect(kept.count == OutputLines.kept && kept.last == "line 999" && kept.first == "line 950")
    }

    @Test func didYouMean() {
        #expect(Suggestion.didYouMean("tsks", among: ["tasks", "token", "show"]) == "; did you mean 'tasks'?")
        #expect(Suggestion.didYouMean("--stat", among: ["--state", "--stalled", "--all"]) == "; did you mean '--state'?")
        #expect(Suggestion.didYouMean("frobnicate", among: ["tasks", "token"]) == "")
    }
}

/// The same, end to end: the built `headway` against a live `headwayd`, in tmux where a
/// terminal matters. Each fails on the CLI before issue 46.
@Suite(.serialized) struct HonestCLILiveTests {
    @discardableResult
    func ok(_ arguments: [String], server: String, environment: [String: String] = [:]) throws -> String {
        let result = try runBuilt("headway", arguments + ["--server", server], environment: environment)
        #expect(result.status == 0, "headway \(arguments.joined(separator: " ")): \(result.errors)")
        return result.output
    }

    /// A generated id is shown as its first 8 characters, last, after the name and the
    /// label, at 80 columns with the bar; that prefix names the task to every command.
    @Test func shortIDsAtEightyColumnsResolveBack() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let id = try ok(["start", "Copy photos to the archive", "--total", "120", "--unit", "files",
                         "--label", "Copying IMG_0420.jpg", "--stall-timeout", "3600"], server: daemon.url)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(IDDisplay.isGenerated(id), "\(id)")
        try ok(["progress", String(id.prefix(8)), "--completed", "120"], server: daemon.url)
        let table = try ok(["tasks"], server: daemon.url, environment: ["COLUMNS": "80"]).split(separator: "\n")
        try #require(table.count == 2, "\(table)")
        #expect(table[0].hasPrefix("NAME ") && table[0].hasSuffix(" ID"), "\(table)")
        #expect(table[1].hasPrefix("Copy photos to …  running  ▕██████████▏100%  "), "\(table[1])")
        #expect(table[1].contains("  Copying IMG_0420"), "\(table[1])")
        #expect(table[1].hasSuffix("  " + id.prefix(8)), "\(table[1])")
        #expect(table.allSatisfy { DisplayWidth.of(String($0)) <= 80 })

        let shown = try ok(["show", String(id.prefix(8))], server: daemon.url)
        #expect(shown.contains("ID:") && shown.contains(id), "\(shown)")
        #expect(try ok(["cancel", String(id.prefix(6))], server: daemon.url) == "cancel requested for \(id)\n")
        // An id a runner chose is never reached by its start.
        try ok(["start", "Build", "--id", "build-2"], server: daemon.url)
        let build = try runBuilt("headway", ["progress", "build", "--completed", "1", "--server", daemon.url])
        #expect(build.status == 1 && build.errors.contains("(not_found)"), "\(build)")
    }

    /// A prefix that starts two generated ids names neither: exit 1, some of them shown.
    @Test func anAmbiguousPrefixIsAnError() throws {
        let first = "3f2a9c1e-5b7d-4e0a-9c1f-2d3e4f5a6b7c", second = "3f2a9c1e-0000-4e0a-9c1f-2d3e4f5a6b7c"
        let server = try StubServer { _, path, _ in
            if path.hasPrefix("/v1/tasks?") {
                return (200, #"{"tasks":[{"id":"\#(first)","name":"A"},{"id":"\#(second)","name":"B"}],"next_page_token":null,"total_size":2}"#)
            }
            return (404, #"{"type":"about:blank","title":"Task not found","status":404,"detail":"No task.","code":"not_found"}"#)
        }
        defer { server.close() }
        let result = try runBuilt("headway", ["show", "3f2a9c1e", "--server", server.url])
        #expect(result.status == 1)
        #expect(result.errors == "headway: '3f2a9c1e' starts 2 task ids (\(first), \(second)): give more of the id\n")
        #expect(server.requests.map { $0.split(separator: " ")[1] } == ["/v1/tasks/3f2a9c1e", "/v1/tasks?page_size=50&id_prefix=3f2a9c1e"])
    }

    /// `start` takes every field a registration takes.
    @Test func startTakesEveryField() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try ok(["start", "Parent", "--id", "p"], server: daemon.url)
        try ok(["start", "Queued export", "--id", "q", "--pending", "--label", "Waiting for a worker", "--total", "10",
                "--completed", "3", "--unit", "rows", "--parent", "p", "--weight", "2", "--stall-timeout", "60",
                "--progress-timeout", "5", "--metadata", #"{"host":"db-3"}"#], server: daemon.url)
        let task = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/q").json
        #expect(task["state"] as? String == "pending")
        #expect(task["label"] as? String == "Waiting for a worker")
        #expect(task["completed"] as? Int == 3 && task["total"] as? Int == 10)
        #expect(task["progress_timeout_seconds"] as? Double == 5 || task["progress_timeout_seconds"] as? Int == 5)
        #expect((task["metadata"] as? [String: Any])?["host"] as? String == "db-3")
        let bad = try runBuilt("headway", ["start", "X", "--metadata", "[1]"])
        #expect(bad.status == 64 && bad.errors.hasPrefix("headway: --metadata must be a JSON object"), "\(bad)")
    }

    /// `headway help CMD` for every command; an example in every help; "did you mean".
    @Test func helpForEveryCommandWithExamplesAndDidYouMean() throws {
        func paths(_ commands: [any ParsableCommand.Type], _ prefix: [String]) -> [[String]] {
            commands.filter { !$0.configuration.isHidden }.flatMap { command -> [[String]] in
                let path = prefix + [command.configuration.commandName]
                return [path] + paths(command.configuration.subcommands, path)
            }
        }
        for path in [[]] + paths(HeadwayCommand.configuration.subcommands, []) {
            let help = try runBuilt("headway", ["help"] + path)
            #expect(help.status == 0, "help \(path): \(help.errors)")
            #expect(help.output == (try runBuilt("headway", path + ["--help"])).output, "help \(path)")
            #expect(help.output.contains("\nEXAMPLES:\n  "), "help \(path)")
        }
        let typo = try runBuilt("headway", ["tsks"])
        #expect(typo.status == 64 && typo.errors == "headway: unknown command 'tsks'; did you mean 'tasks'?\nSee 'headway --help'.\n")
        let option = try runBuilt("headway", ["tasks", "--stat", "running"])
        #expect(option.errors.hasPrefix("headway: unknown option '--stat'; did you mean '--state'?"), "\(option.errors)")
        let value = try runBuilt("headway", ["tasks", "--state", "runing"])
        #expect(value.errors.hasPrefix("headway: --state must be pending, running, succeeded, failed or canceled, not 'runing'; did you mean 'running'?"),
                "\(value.errors)")
    }

    /// `run`: "N/40" then "NN%" ends 40 of 40 (it ended "100 of 100"); a command that
    /// cannot print its progress writes it to HEADWAY_PROGRESS_FILE, which goes away.
    @Test func runFollowsTheLastFormAndReadsTheProgressFile() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let counts = collect(try startHeadway(["--server", daemon.url, "run", "--id", "mixed", "--", "/bin/sh", "-c",
                                               "for i in 10 20 30 40; do echo $i/40; done; for p in 25 50 100; do echo $p%; done"]))
        #expect(counts.status == 0, "\(counts.errorText)")
        let mixed = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/mixed").json
        #expect(mixed["completed"] as? Int == 40 && mixed["total"] as? Int == 40, "\(mixed)")

        let script = #"echo "$HEADWAY_PROGRESS_FILE" > \#(daemon.directory.file("path")); echo "12/40 resizing" >> "$HEADWAY_PROGRESS_FILE"; echo done; exit 3"#
        let filed = collect(try startHeadway(["--server", daemon.url, "run", "--id", "filed", "--", "/bin/sh", "-c", script]))
        #expect(filed.status == 3, "\(filed.errorText)")
        let task = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/filed").json
        #expect(task["completed"] as? Int == 12 && task["total"] as? Int == 40, "\(task)")
        let path = try String(contentsOfFile: daemon.directory.file("path"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(path.contains("headway-progress-") && !FileManager.default.fileExists(atPath: path), "\(path)")
    }

    /// A command that puts a FIFO where its progress file was (a careless `mkfifo`) is run
    /// to its end: the file is looked at without waiting for a writer that never comes.
    @Test func aProgressFileReplacedByAFIFODoesNotHoldRunUp() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let script = #"rm "$HEADWAY_PROGRESS_FILE"; mkfifo "$HEADWAY_PROGRESS_FILE"; sleep 1; echo done; exit 0"#
        let ran = collect(try startHeadway(["--server", daemon.url, "run", "--id", "fifo", "--", "/bin/sh", "-c", script],
                                           timeout: 10))
        #expect(ran.status == 0 && String(decoding: ran.output, as: UTF8.self) == "done\n", "\(ran.status) \(ran.errorText)")
        let task = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/fifo").json
        #expect(task["state"] as? String == "succeeded", "\(task)")
    }

    /// `show` reads as prose: labelled fields, local times with their age; `--json` as sent.
    @Test func showIsReadable() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try ok(["start", "Nightly backup", "--id", "b", "--total", "10", "--unit", "files"], server: daemon.url)
        try ok(["progress", "b", "--completed", "4", "--label", "Copying"], server: daemon.url)
        let lines = try ok(["show", "b"], server: daemon.url, environment: ["TZ": "UTC"]).split(separator: "\n").map(String.init)
        #expect(lines.first == "Name:             Nightly backup", "\(lines)")
        #expect(lines.contains("State:            running"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("Progress:         ▕") && $0.hasSuffix(" 40%  4 of 10 files") }, "\(lines)")
        #expect(lines.contains("Label:            Copying"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("Started:          20") && ($0.hasSuffix(" UTC (0 s ago)") || $0.hasSuffix(" UTC (1 s ago)")) },
                "\(lines)")
        let json = try ok(["show", "b", "--json"], server: daemon.url)
        #expect(json == (try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/b").text) + "\n")
    }

    /// `watch` hides tasks younger than 2 s by default, as the page does; not named ones.
    @Test func watchHoldsBackYoungTasksByDefault() throws {
        let server = try SilentEventServer()
        defer { server.close() }
        let all = try BackgroundProcess("headway", ["watch", "--server", server.url])
        defer { all.stop() }
        #expect(try server.acceptRequest(within: 10).hasPrefix("GET /v1/events?min_duration=2.000 "))
        let named = try BackgroundProcess("headway", ["watch", "t1", "--server", server.url])
        defer { named.stop() }
        #expect(try server.acceptRequest(within: 10).hasPrefix("GET /v1/events?task=t1 "))
    }

    /// In tmux, more tasks than rows: the failed and the stalled come first, and the tasks
    /// left out are counted by state.
    @Test func watchShowsTroubleFirstInATerminal() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let client = try TestHTTPClient(port: daemon.port)
        func post(_ path: String, _ body: String) throws {
            let reply = try client.request("POST", path, json: body)
            #expect((200..<300).contains(reply.status), "\(path): \(reply.text)")
        }
        try post("/v1/tasks", #"{"id":"stuck","name":"Stuck","stall_timeout_seconds":1}"#)
        for index in 0..<30 { try post("/v1/tasks", #"{"id":"r\#(index)","name":"Run \#(index)","stall_timeout_seconds":3600}"#) }
        for index in 0..<5 {
            try post("/v1/tasks", #"{"id":"s\#(index)","name":"Done \#(index)","stall_timeout_seconds":3600}"#)
            try post("/v1/tasks/s\(index)/finish", #"{"outcome":"succeeded"}"#)
        }
        try post("/v1/tasks", #"{"id":"bad","name":"Broken","stall_timeout_seconds":3600}"#)
        try post("/v1/tasks/bad/finish", #"{"outcome":"failed","message":"disk full"}"#)
        let terminal = try TmuxPane(columns: 100, rows: 12, command: "NO_COLOR=1 exec \(builtExecutable("headway")) watch "
                                    + "--min-duration 0 --server \(daemon.url)")
        defer { terminal.close() }
        func stalledFirst() -> Bool {
            let lines = terminal.screen().split(separator: "\n")
            return lines.count > 3 && lines[1].hasPrefix("Broken ") && lines[2].hasPrefix("Stuck ") && lines[2].contains("no signal for")
        }
        #expect(waitUntil(15, stalledFirst), "\(terminal.screen())")
        let lines = terminal.screen().split(separator: "\n")
        #expect(lines[1].contains("disk full"), "\(lines)")
        #expect(lines.last == "… 28 more: 23 running, 5 succeeded", "\(lines)")
    }

    /// A task that runs past its expected time turns up first in `watch`, live, its note
    /// and state word in magenta (a stall keeps yellow), in a real terminal.
    @Test func watchShowsAnOverdueTaskFirstInItsOwnColour() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let client = try TestHTTPClient(port: daemon.port)
        for index in 0..<3 {
            let reply = try client.request("POST", "/v1/tasks", json: #"{"id":"r\#(index)","name":"Run \#(index)","stall_timeout_seconds":3600}"#)
            #expect(reply.status == 201, "\(reply.text)")
        }
        let terminal = try TmuxPane(columns: 100, rows: 8, command: "TERM=xterm-256color exec \(builtExecutable("headway")) watch "
                                    + "--min-duration 0 --server \(daemon.url)")
        defer { terminal.close() }
        #expect(waitUntil(15) { terminal.screen().contains("Run 2") }, "\(terminal.screen())")
        let late = try client.request("POST", "/v1/tasks", json: #"{"id":"late","name":"Late export","expected_seconds":1,"stall_timeout_seconds":3600}"#)
        #expect(late.status == 201, "\(late.text)")
        // The daemon's own sweeper flags it a second or so after its start; the stream brings it.
        func overdueFirst() -> Bool {
            let lines = terminal.screen().split(separator: "\n")
            return lines.count > 1 && lines[1].hasPrefix("Late export ") && lines[1].contains("overdue by")
        }
        #expect(waitUntil(15, overdueFirst), "\(terminal.screen())")
        let styled = terminal.styledScreen()
        #expect(styled.contains("\u{1B}[35mrunning") && styled.contains("\u{1B}[35moverdue by"), "\(styled)")
    }

    /// Completion offers the server's task ids and the values of --state.
    @Test func completionOffersTaskIDsAndStates() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try ok(["start", "Backup", "--id", "backup-db-3"], server: daemon.url)
        let folder = URL(fileURLWithPath: builtExecutable("headway")).deletingLastPathComponent().path
        func complete(_ words: String) throws -> String {
            let script = #"source <(headway completion bash); COMP_WORDS=(\#(words)); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "#
                + #"_headway; printf '%s\n' "${COMPREPLY[@]}""#
            let result = try runToEnd("/bin/bash", ["-c", script],
                                      environment: ["PATH": "\(folder):/usr/bin:/bin", "HEADWAY_URL": daemon.url], timeout: 20)
            #expect(result.status == 0, "\(result.errors)")
            return result.output
        }
        #expect(try complete("headway show ''").contains("\nbackup-db-3\n"))
        #expect(try complete("headway show b") == "backup-db-3\n")
        #expect(try complete("headway cancel back") == "backup-db-3\n")
        #expect(try complete("headway tasks --state r") == "running\n")
        #expect(try complete("headway finish x --outcome ''") == "succeeded\nfailed\ncanceled\n")
    }
}

/// The CLI over the server's new fields and routes of issue 46: `terminate`, the output
/// tail `run` sends and `show` prints, and parents' `children` and `attention`.
@Suite(.serialized) struct HonestCLIServerTests {
    @discardableResult
    func ok(_ arguments: [String], server: String, environment: [String: String] = [:]) throws -> String {
        let result = try runBuilt("headway", arguments + ["--server", server], environment: environment)
        #expect(result.status == 0, "headway \(arguments.joined(separator: " ")): \(result.errors)")
        return result.output
    }

    /// `terminate` ends a task whose runner is gone: canceled, "terminated".
    @Test func terminateEndsATaskWithoutItsRunner() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try ok(["start", "Stuck", "--id", "stuck"], server: daemon.url)
        try ok(["cancel", "stuck"], server: daemon.url)
        #expect(try ok(["terminate", "stuck"], server: daemon.url) == "terminated stuck\n")
        let task = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/stuck").json
        #expect(task["state"] as? String == "canceled" && task["message"] as? String == "terminated", "\(task)")
    }

    /// `run` sends its command's lines (a `\r`-redrawn bar as the line it ends as); the
    /// task keeps them and `show` prints them; the command's output is untouched.
    @Test func runSendsItsOutputAndShowPrintsIt() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let result = collect(try startHeadway(["--server", daemon.url, "run", "--id", "out", "--", "/bin/sh", "-c",
                                               #"echo line one; echo line two >&2; printf 'bar 10%%\rbar 100%%\n'"#]))
        #expect(result.status == 0, "\(result.errorText)")
        #expect(String(decoding: result.output, as: UTF8.self) == "line one\nbar 10%\rbar 100%\n", "passed through as it came")
        let output = try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/out/output").json
        let lines = (output["lines"] as? [[String: Any]])?.compactMap { $0["line"] as? String } ?? []
        #expect(Set(lines) == ["line one", "line two", "bar 100%"], "\(output)")
        let shown = try ok(["show", "out"], server: daemon.url).split(separator: "\n").map(String.init)
        guard let start = shown.firstIndex(of: "Output (last 3 lines):") else {
            Issue.record("no output tail: \(shown)")
            return
        }
        #expect(shown[(start + 1)...].contains { $0.hasPrefix("  ") && $0.hasSuffix("  bar 100%") }, "\(shown)")
    }

    /// A parent says what its children came to: in the table, `1 of 2 failed`; in `show`,
    /// its children and attention.
    @Test func aParentShowsItsChildrenAndAttention() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        try ok(["start", "Release", "--id", "p", "--stall-timeout", "3600"], server: daemon.url)
        try ok(["start", "Build", "--id", "a", "--parent", "p", "--total", "10", "--stall-timeout", "3600"], server: daemon.url)
        try ok(["start", "Test", "--id", "b", "--parent", "p", "--total", "10", "--stall-timeout", "3600"], server: daemon.url)
        try ok(["progress", "a", "--completed", "5"], server: daemon.url)
        try ok(["finish", "a", "--outcome", "failed", "--message", "disk full"], server: daemon.url)
        let table = try ok(["tasks", "--root"], server: daemon.url, environment: ["COLUMNS": "120"])
        #expect(table.contains("1 of 2 failed"), "\(table)")
        let shown = try ok(["show", "p"], server: daemon.url)
        #expect(shown.contains("\nChildren:         2: 1 of 2 failed\n") && shown.contains("\nAttention:        failed\n"), "\(shown)")
        #expect(shown.contains("\nLast signal:      20"), "\(shown)")
    }
}
