import Foundation
import HeadwayTestSupport
import HeadwayCore
import Testing

/// The operators' queries (`tasks`, `show`, `history`) of the built `headway` against a
/// live `headwayd`.
///
/// Tables are compared with golden files. They stay stable because no task shows a
/// value that depends on time but its finish time and how long it has run (made fixed
/// by `clockless`): each quantified task gets at most one progress report right after it
/// is registered (so the server knows no rate, hence no ETA), stall timeouts are an hour
/// (no stall, no age), and an indeterminate task that never moved shows spinner frame 0.
@Suite(.serialized) struct QueryCommandTests {
    /// `table` with what the clock decides made fixed: a finish time reads `12:00`, a
    /// time of a few seconds `0 s` (the golden files' tasks are seconds old).
    static func clockless(_ table: String) -> String {
        table.replacingOccurrences(of: "ended [0-9]{2}:[0-9]{2}", with: "ended 12:00", options: .regularExpression)
            .replacingOccurrences(of: "ended [0-9]{2}:…", with: "ended 12:…", options: .regularExpression)
            .replacingOccurrences(of: "  [0-9] s  ", with: "  0 s  ", options: .regularExpression)
    }

    static func golden(_ name: String) throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent("Tests/HeadwayCLITests/golden/\(name)"), encoding: .utf8)
    }

    @Test(arguments: ["tasks", "show", "history"]) func helpMatchesItsGoldenFile(command: String) throws {
        let result = try headway(command, "--help")
        #expect(result.status == 0)
        #expect(result.errors == "")
        #expect(result.output == (try Self.golden("help-\(command).txt")))
    }

    @Test(arguments: [
        (["tasks", "--state", "done"],
         "headway: --state must be pending, running, succeeded, failed or canceled, not 'done'\nSee 'headway tasks --help'.\n"),
        (["tasks", "--page-size", "0"], "headway: --page-size must be between 1 and 500, not 0\nSee 'headway tasks --help'.\n"),
        (["show"], "headway: missing <id>\nSee 'headway show --help'.\n"),
        (["history", "h", "--max-points", "1"],
         "headway: --max-points must be between 2 and 1000, not 1\nSee 'headway history --help'.\n"),
    ]) func usageErrorsExit64(arguments: [String], expected: String) throws {
        let result = try runBuilt("headway", arguments)
        #expect(result.status == 64)
        #expect(result.errors == expected)
    }

    /// Runs `headway` with `arguments`, expecting success.
    @discardableResult
    func ok(_ arguments: String..., server: String, environment: [String: String] = [:]) throws -> String {
        let result = try runBuilt("headway", arguments + ["--server", server], environment: environment)
        #expect(result.status == 0, "headway \(arguments.joined(separator: " ")): \(result.errors)")
        return result.output
    }

    /// The ids of `--json` output, one task object per line.
    func ids(_ output: String) -> [String] {
        output.split(separator: "\n").map { line in
            guard case .object(let task)? = JSONValue.parse(Array(line.utf8)), case .string(let id)? = task["id"] else {
                Issue.record("not a task object: \(line)")
                return ""
            }
            return id
        }
    }

    @Test func theTableMatchesItsGoldenFilesAt80And120Columns() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        try ok("start", "Copy photos to the archive", "--id", "copy", "--total", "1200", "--unit", "files",
               "--stall-timeout", "3600", server: server)
        try ok("progress", "copy", "--completed", "768", server: server)
        try ok("start", "Wait for the database lock", "--id", "wait", "--stall-timeout", "3600", server: server)
        try ok("heartbeat", "wait", "--label", "Waiting for lock", server: server)
        try ok("start", "Queued job", "--id", "queued", "--stall-timeout", "3600", server: server)
        try ok("start", "Build release", "--id", "build", "--total", "10", "--stall-timeout", "3600", server: server)
        try ok("progress", "build", "--completed", "10", server: server)
        try ok("finish", "build", "--outcome", "succeeded", "--message", "all green", server: server)
        try ok("start", "Deploy to the production cluster in the eu-west region, all services", "--id", "deploy",
               "--stall-timeout", "3600", server: server)
        try ok("finish", "deploy", "--outcome", "failed", "--message", "exit status 2", server: server)
        // The premise of the golden files: the server knows no rate for the copy.
        let copy = JSONValue.parse(Array(try ok("show", "copy", "--json", server: server).utf8))
        if case .object(let task)? = copy { #expect(task["rate"] == .null, "registration and progress 1 s apart?") }

        for width in [80, 120] {
            let output = try ok("tasks", server: server, environment: ["COLUMNS": "\(width)", "TZ": "UTC"])
            #expect(Self.clockless(output) == (try Self.golden("tasks-\(width).txt")), "COLUMNS=\(width):\n\(output)")
            #expect(!output.contains("\u{1B}"), "no colors without a terminal")
            #expect(output.split(separator: "\n").allSatisfy { $0.count <= width })
        }
        // NO_COLOR and a terminal-less stdout: plain text either way.
        #expect(!(try ok("tasks", server: server, environment: ["NO_COLOR": "1"])).contains("\u{1B}"))
        // Filters by state, repeated.
        #expect(Set(ids(try ok("tasks", "--state", "succeeded", "--state", "failed", "--json", server: server)))
                == ["build", "deploy"])
        #expect(try ok("tasks", "--stalled", server: server) == "no tasks\n")
    }

    /// The run-time flags in the table (a golden file): a success sooner than its `--min`,
    /// a task running past its `--expected` run, and one that finished past it.
    @Test func runTimeFlagsShowInTheTable() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        try ok("start", "Backup db-4", "--id", "quick", "--min", "3600", "--stall-timeout", "3600", server: server)
        try ok("finish", "quick", "--outcome", "succeeded", server: server)
        try ok("start", "Nightly export", "--id", "late", "--expected", "1", "--stall-timeout", "3600", server: server)
        try ok("start", "Backup db-3", "--id", "ran-late", "--expected", "1", "--stall-timeout", "3600", server: server)
        // The daemon's own sweeper flags both about a second after their start.
        let giveUp = Date().addingTimeInterval(10)
        while ids(try ok("tasks", "--overdue", "--json", server: server)).count < 2 {
            guard Date() < giveUp else {
                Issue.record("the sweeper flagged no task within 10 s")
                return
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        try ok("finish", "ran-late", "--outcome", "succeeded", server: server)
        let output = try ok("tasks", server: server, environment: ["COLUMNS": "100", "TZ": "UTC"])
        let table = Self.clockless(output)
            .replacingOccurrences(of: "overdue by [0-9] s", with: "overdue by 1 s", options: .regularExpression)
            .replacingOccurrences(of: "ran [0-9] s late", with: "ran 1 s late", options: .regularExpression)
            // Under a second late reads "under 1 s", six cells wider: the same width kept.
            .replacingOccurrences(of: "overdue by under 1 s", with: "overdue by 1 s      ")
            .replacingOccurrences(of: "ran under 1 s late( · ended 12:00)?", with: "ran 1 s late$1      ", options: .regularExpression)
        #expect(table == (try Self.golden("tasks-run-time-100.txt")), "\(output)")
        #expect(ids(try ok("tasks", "--overdue", "--json", server: server)) == ["ran-late", "late"])
        let refused = try runBuilt("headway", ["start", "Job", "--deadline", "tomorrow", "--server", server])
        #expect(refused.status == 64 && refused.errors.contains("--deadline must be an RFC 3339 time"))
    }

    /// Five tasks by pages of two: the first page says how many more; --all follows the
    /// page tokens to the end, newest first.
    @Test func pagingFollowsTokensWithAllAndCountsTheRestWithout() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        for index in 1...5 { try ok("start", "Job \(index)", "--id", "t\(index)", "--stall-timeout", "3600", server: server) }

        let first = try ok("tasks", "--page-size", "2", server: server, environment: ["COLUMNS": "80"])
        let lines = first.split(separator: "\n")
        #expect(lines.count == 4, "header, two tasks, the rest:\n\(first)")
        #expect(lines.last == "3 more tasks; --all lists them")
        #expect(lines.dropFirst().first?.hasSuffix("  t5") == true)

        let all = try ok("tasks", "--page-size", "2", "--all", server: server, environment: ["COLUMNS": "80"])
        #expect(all.split(separator: "\n").dropFirst().map { String($0.suffix(2)) } == ["t5", "t4", "t3", "t2", "t1"],
                "\(all)")
        #expect(!all.contains("more"))

        #expect(ids(try ok("tasks", "--page-size", "2", "--all", "--json", server: server)) == ["t5", "t4", "t3", "t2", "t1"])
        let page = try runBuilt("headway", ["tasks", "--page-size", "2", "--json", "--server", server])
        #expect(ids(page.output) == ["t5", "t4"])
        #expect(page.errors == "headway: 3 more tasks; --all lists them\n", "stdout keeps only tasks")
    }

    /// show: every field, the children with their weights, the sparkline; --parent and
    /// --root filter the list; an unknown id exits 1 with not_found.
    @Test func showAParentWithChildrenAndTheHistoryOfATask() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        try ok("start", "Release", "--id", "p", "--stall-timeout", "3600", server: server)
        try ok("start", "Build", "--id", "a", "--parent", "p", "--weight", "2", "--total", "4", "--stall-timeout", "3600",
               server: server)
        try ok("progress", "a", "--completed", "1", server: server)
        try ok("start", "Notes", "--id", "b", "--parent", "p", "--weight", "0.5", "--stall-timeout", "3600", server: server)

        let shown = try ok("show", "p", server: server).split(separator: "\n").map(String.init)
        #expect(shown.first == "Name:             Release")
        #expect(shown.contains("ID:               p"))
        #expect(shown.contains { $0.hasPrefix("Progress:         ▕████ ") && $0.contains("▏ 20%") }, "\(shown)")
        guard let start = shown.firstIndex(of: "Children (2):") else {
            Issue.record("no children line:\n\(shown.joined(separator: "\n"))")
            return
        }
        #expect(Array(shown[(start + 1)...(start + 3)]) == [
            "  ID  NAME   STATE    WEIGHT  PROGRESS",
            "  b   Notes  running  0.5     -",
            "  a   Build  running  2       25%",
        ])
        #expect(shown.last?.hasPrefix("History: ") == true)
        #expect(shown.last?.contains("point") == true, "a sparkline and its count: \(shown.last ?? "")")
        guard case .object(let task)? = JSONValue.parse(Array(try ok("show", "p", "--json", server: server).utf8)) else {
            Issue.record("show --json is not an object")
            return
        }
        #expect(task["id"] == .string("p"))
        #expect(Set(ids(try ok("tasks", "--parent", "p", "--json", server: server))) == ["a", "b"])
        #expect(ids(try ok("tasks", "--root", "--json", server: server)) == ["p"])

        // history: the last point is the last report.
        let history = try ok("history", "a", server: server)
        let last = history.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasSuffix("  1/4  25.0%"), "\(history)")
        #expect(Timestamp.parseRFC3339(String(last.prefix { $0 != " " })) != nil, "\(last)")
        guard case .object(let curve)? = JSONValue.parse(Array(try ok("history", "a", "--max-points", "2", "--json",
                                                                     server: server).utf8)),
              case .array(let points)? = curve["points"] else {
            Issue.record("history --json is not a History object")
            return
        }
        #expect(curve["task_id"] == .string("a"))
        #expect((1...2).contains(points.count))

        for command in ["show", "history"] {
            let missing = try runBuilt("headway", [command, "nope", "--server", server])
            #expect(missing.status == 1)
            #expect(missing.errors.hasSuffix(" (not_found)\n"), "\(command): \(missing.errors)")
            #expect(missing.output == "")
        }

        // Dots in ids stay ids, not path segments a URL would fold away ("." and ".."
        // themselves the server refuses for new tasks).
        for id in ["...", ".a."] {
            #expect(try ok("start", "Dots", "--id", id, server: server) == id + "\n")
            #expect(try ok("show", id, server: server).hasPrefix("Name:"))
            #expect(try ok("progress", id, "--completed", "1", "--total", "2", server: server) == "")
            #expect(try ok("delete", id, "--yes", server: server) == "deleted \(id)\n")
        }
        let refused = try runBuilt("headway", ["start", "Dots", "--id", "..", "--server", server])
        #expect(refused.status == 1 && refused.errors.contains("must not be '.' or '..'"), "\(refused)")
    }

    /// Task fields holding C1 controls (U+009B CSI, U+009D OSC, U+0085), DEL, ESC and BEL
    /// reach no terminal raw through `--json`: the daemon's replies and what `tasks`,
    /// `show` and `watch` print hold them only as `\u` escapes, and read back the same.
    @Test func jsonOutputEscapesEveryControlCharacter() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        // C1 and DEL sent raw (JSON allows them unescaped), ESC and BEL escaped (it does not).
        let sent = "x\u{9B}2J\u{9D}0;owned\\u0007\u{7F}\\u001b[31m\u{85}y"
        let hostile = "x\u{9B}2J\u{9D}0;owned\u{7}\u{7F}\u{1B}[31m\u{85}y"
        let client = try TestHTTPClient(port: daemon.port)
        let created = try client.request("POST", "/v1/tasks", json: #"{"id":"c1","name":"\#(sent)","total":10,"#
                                         + #""metadata":{"note":"\#(sent)"}}"#)
        #expect(created.status == 201, "\(created.text)")
        #expect(try client.request("POST", "/v1/tasks/c1/progress", json: #"{"completed":3,"label":"\#(sent)"}"#).status == 200)
        #expect(try client.request("POST", "/v1/tasks/c1/finish", json: #"{"outcome":"failed","message":"\#(sent)"}"#)
            .status == 200)

        /// Every raw control character of `bytes` (line feeds apart) as `U+XXXX`.
        func rawControls(_ bytes: [UInt8]) -> [String] {
            String(decoding: bytes, as: UTF8.self).unicodeScalars
                .filter { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) }
                .map { "U+" + String($0.value, radix: 16) }
        }
        /// The task object `json` is, or holds (a list's `tasks`, an event's `data`), with the
        /// hostile text in every field it was sent to.
        func checkTask(_ json: JSONValue?, _ what: String) {
            var value = json
            if case .object(let object)? = value, let data = object["data"] { value = data }
            if case .object(let object)? = value, case .array(let tasks)? = object["tasks"] { value = tasks.first }
            guard case .object(let task)? = value else {
                Issue.record("\(what): no task in \(String(describing: json))")
                return
            }
            #expect(task["name"] == .string(hostile), "\(what)")
            #expect(task["label"] == .string(hostile), "\(what)")
            #expect(task["message"] == .string(hostile), "\(what)")
            #expect(task["metadata"] == .object(["note": .string(hostile)]), "\(what)")
        }

        for path in ["/v1/tasks/c1", "/v1/tasks"] {
            let reply = try client.request("GET", path)
            #expect(rawControls(reply.body) == [], "the daemon's \(path)")
            #expect(reply.text.contains(#"x\u009b2J\u009d0;owned\u0007\u007f\u001b[31m\u0085y"#), "\(reply.text)")
            checkTask(JSONValue.parse(reply.body), "the daemon's \(path)")
        }
        for arguments in [["tasks", "--json"], ["show", "c1", "--json"], ["watch", "c1", "--json", "--until-done"]] {
            let result = try runBuilt("headway", arguments + ["--server", daemon.url])
            #expect(result.status == (arguments[0] == "watch" ? 4 : 0), "\(arguments): \(result.errors)")
            let lines = result.output.split(separator: "\n")
            #expect(!lines.isEmpty, "\(arguments)")
            #expect(rawControls(Array(result.output.utf8)) == [], "headway \(arguments.joined(separator: " "))")
            for line in lines { checkTask(JSONValue.parse(Array(line.utf8)), "headway \(arguments[0]) --json") }
        }
    }

    /// A server that sends C1 controls and DEL raw (one built before they were escaped,
    /// or not headwayd at all): `show --json`, which prints the reply as it came, escapes
    /// them, and the text still reads as the same JSON.
    @Test func jsonFromAServerIsEscapedBeforeItIsPrinted() throws {
        let task = "{\"id\":\"t\",\"name\":\"a\u{9B}2J\u{9D}0;x\u{7F}\",\"state\":\"running\"}"
        let server = try StubServer { _, _, _ in (200, task) }
        defer { server.close() }
        let result = try runBuilt("headway", ["show", "t", "--json", "--server", server.url])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output == #"{"id":"t","name":"a\u009b2J\u009d0;x\u007f","state":"running"}"# + "\n")
        #expect(JSONValue.parse(Array(result.output.utf8)) == JSONValue.parse(Array(task.utf8)))
    }
}
