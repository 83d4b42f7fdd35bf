import Foundation
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Testing
@testable import Daemon

/// Issue 46's server parts beside the parents' truth: each task's output tail
/// (`output` on progress, heartbeat, finish and the batch; `GET /v1/tasks/{id}/output`;
/// `last_output`), the listing's search (`q`), `GET /v1/tasks/summary` and
/// `POST /v1/tasks/{id}/terminate` — against the real daemon, on SQLite and (in
/// `POSTGRES_SUITES`) on PostgreSQL.
@Suite(.serialized) struct OutputSearchTests {
    private func ids(_ response: TestResponse) -> [String] {
        (response.json["tasks"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    private func lines(_ response: TestResponse) -> [String] {
        (response.json["lines"] as? [[String: Any]] ?? []).compactMap { $0["line"] as? String }
    }

    /// A JSON array of strings.
    private func jsonLines(_ lines: [String]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: lines), as: UTF8.self)
    }

    // MARK: - Output tail

    @Test(arguments: Transport.allCases) func theTailKeepsTheLastFiftyLinesOldestFirst(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let task = try daemon.register(#"{"id":"job","name":"Job","total":100}"#)
        #expect(task["last_output"] is NSNull, "a task without output shows last_output null")
        let empty = try daemon.request("GET", "/v1/tasks/job/output")
        #expect(empty.status == 200)
        #expect(empty.json["task_id"] as? String == "job")
        #expect(lines(empty) == [])
        for request in 0..<3 {
            let sent = (0..<30).map { "line \(request * 30 + $0)" }
            let reply = try daemon.request("POST", "/v1/tasks/job/progress",
                                           json: #"{"increment":1,"output":\#(jsonLines(sent))}"#)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["last_output"] as? String == sent.last)
        }
        let tail = try daemon.request("GET", "/v1/tasks/job/output")
        #expect(lines(tail) == (40..<90).map { "line \($0)" })
        let times = (tail.json["lines"] as? [[String: Any]] ?? []).compactMap { $0["t"] as? String }
        #expect(times.count == 50 && times.allSatisfy { $0.hasSuffix("Z") && $0.count == 24 }, "\(times.prefix(2))")
        #expect(times == times.sorted(), "oldest first")
        #expect(try daemon.request("GET", "/v1/tasks/job").json["last_output"] as? String == "line 89")
    }

    /// At most 8 KiB of text: nine lines of 1,000 characters keep the newest eight.
    @Test func theTailKeepsAtMostEightKibibytes() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"wide","name":"Wide"}"#)
        let sent = (0..<9).map { String(repeating: Character(String($0)), count: 1_000) }
        #expect(try daemon.request("POST", "/v1/tasks/wide/heartbeat", json: #"{"output":\#(jsonLines(sent))}"#).status == 200)
        #expect(lines(try daemon.request("GET", "/v1/tasks/wide/output")) == Array(sent.dropFirst()))
        // Multi-byte text counts by its bytes: 3,000 bytes each, two of them fit beside a short line.
        let korean = String(repeating: "한", count: 1_000)
        try daemon.request("POST", "/v1/tasks/wide/heartbeat", json: #"{"output":["\#(korean)","\#(korean)","\#(korean)","end"]}"#)
        #expect(lines(try daemon.request("GET", "/v1/tasks/wide/output")) == [korean, korean, "end"])
    }

    /// The 8 KiB bound holds where the tail is stored, not only where it is shown: 50 lines
    /// of 1,000 characters leave the newest eight rows; a short line joins them; a long one
    /// pushes the oldest out; what is stored is what is shown.
    @Test func theTailIsBoundWhenWritten() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"wide","name":"Wide"}"#)
        let stored = { () throws -> [String] in
            try daemon.application.readers[0].snapshot { database in
                try database.rows("SELECT line FROM task_output WHERE task_id = 'wide' ORDER BY n", []) { $0.text(0) }
            }
        }
        let sent = (0..<50).map { String(repeating: Character(String($0 % 10)), count: 1_000) }
        #expect(try daemon.request("POST", "/v1/tasks/wide/heartbeat", json: #"{"output":\#(jsonLines(sent))}"#).status == 200)
        #expect(try stored() == Array(sent.suffix(8)), "the newest 8,000 bytes")
        try daemon.request("POST", "/v1/tasks/wide/heartbeat", json: #"{"output":["end"]}"#)
        #expect(try stored() == Array(sent.suffix(8)) + ["end"], "8,003 bytes fit")
        let korean = String(repeating: "한", count: 1_000)
        try daemon.request("POST", "/v1/tasks/wide/heartbeat", json: #"{"output":["\#(korean)"]}"#)
        #expect(try stored() == Array(sent.suffix(5)) + ["end", korean], "3,000 bytes push three lines out")
        #expect(lines(try daemon.request("GET", "/v1/tasks/wide/output")) == (try stored()))
    }

    /// Control characters are kept as sent and JSON-escaped wherever a line is shown.
    @Test func controlCharactersAreKeptAndEscaped() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"tty","name":"TTY"}"#)
        let reply = try daemon.request("POST", "/v1/tasks/tty/heartbeat",
                                       json: #"{"output":["\u001b[31mred\u001b[0m\tdone\r", ""]}"#)
        #expect(reply.status == 200)
        #expect(reply.json["last_output"] as? String == "")
        let tail = try daemon.request("GET", "/v1/tasks/tty/output")
        #expect(tail.text.contains(#""line":"\u001b[31mred\u001b[0m\tdone\r""#), "\(tail.text)")
        #expect(!tail.body.contains(0x1B), "no raw escape byte reaches a client")
        #expect(lines(tail) == ["\u{1B}[31mred\u{1B}[0m\tdone\r", ""])
    }

    @Test(arguments: Transport.allCases) func heartbeatFinishAndTheBatchTakeOutput(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"a","name":"A","total":10}"#)
        try daemon.register(#"{"id":"b","name":"B","total":10}"#)
        #expect(try daemon.request("POST", "/v1/tasks/a/heartbeat", json: #"{"output":["beat"]}"#).json["last_output"] as? String == "beat")
        let batch = try daemon.request("POST", "/v1/progress", json: """
            {"updates":[{"task_id":"a","completed":5,"output":["five"]},{"task_id":"b","completed":1,"output":["one","two"]},
                        {"task_id":"b","completed":2,"output":"three"}]}
            """)
        #expect(batch.status == 200)
        let results = batch.json["results"] as? [[String: Any]] ?? []
        #expect(results.map { $0["status"] as? Int } == [200, 200, 400])
        #expect((results[1]["task"] as? [String: Any])?["last_output"] as? String == "two")
        let problem = results[2]["problem"] as? [String: Any] ?? [:]
        #expect((problem["errors"] as? [[String: Any]])?.first?["field"] as? String == "output", "\(problem)")
        let finished = try daemon.request("POST", "/v1/tasks/a/finish", json: #"{"outcome":"failed","message":"disk full","output":["No space left on device"]}"#)
        #expect(finished.json["last_output"] as? String == "No space left on device")
        #expect(lines(try daemon.request("GET", "/v1/tasks/a/output")) == ["beat", "five", "No space left on device"])
        #expect(lines(try daemon.request("GET", "/v1/tasks/b/output")) == ["one", "two"])
    }

    /// A retried update (its `seq` already applied) appends nothing again.
    @Test func aRepeatedSeqAppendsNothing() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"r","name":"R","total":10}"#)
        try daemon.request("POST", "/v1/tasks/r/progress", json: #"{"completed":1,"seq":1,"output":["once"]}"#)
        let retried = try daemon.request("POST", "/v1/tasks/r/progress", json: #"{"completed":1,"seq":1,"output":["once"]}"#)
        #expect(retried.status == 200 && retried.headers["headway-unchanged"] == "true")
        #expect(lines(try daemon.request("GET", "/v1/tasks/r/output")) == ["once"])
    }

    /// The stream's `task.updated` carries the new `last_output`, never the whole tail.
    @Test func theEventCarriesTheLastLineOnly() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"s","name":"S"}"#)
        let stream = try daemon.subscribe("?task=s")
        _ = try #require(try stream.nextEvent())  // the snapshot
        try daemon.request("POST", "/v1/tasks/s/heartbeat", json: #"{"output":["first line","second line"]}"#)
        let event = try #require(try stream.nextEvent())
        #expect(event.event == "task.updated")
        #expect(event.json["last_output"] as? String == "second line")
        #expect(!event.data.contains("first line"), "\(event.data)")
    }

    @Test(arguments: Transport.allCases) func badOutputIsRefusedAndChangesNothing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"x","name":"X","total":10}"#)
        let long = String(repeating: "a", count: 1_001)
        let cases: [(body: String, field: String)] = [
            (#"{"completed":1,"output":"one line"}"#, "output"),
            (#"{"completed":1,"output":{"line":"x"}}"#, "output"),
            (#"{"completed":1,"output":\#(jsonLines((0..<101).map(String.init)))}"#, "output"),
            (#"{"completed":1,"output":["ok",7]}"#, "output[1]"),
            (#"{"completed":1,"output":["ok","\#(long)"]}"#, "output[1]"),
            (#"{"completed":1,"output":["nul \u0000 inside"]}"#, "output[0]"),
        ]
        for (body, field) in cases {
            let reply = try daemon.request("POST", "/v1/tasks/x/progress", json: body)
            #expect(reply.status == 400 && reply.problemCode == "invalid_request", "\(body): \(reply.text)")
            let fields = (reply.json["errors"] as? [[String: Any]] ?? []).compactMap { $0["field"] as? String }
            #expect(fields == [field], "\(body): \(reply.text)")
        }
        let refusedFinish = try daemon.request("POST", "/v1/tasks/x/finish", json: #"{"outcome":"succeeded","output":[null]}"#)
        #expect(refusedFinish.status == 400)
        // Exactly at the limits is fine: 100 lines, a line of 1,000 characters.
        let atLimits = try daemon.request("POST", "/v1/tasks/x/heartbeat",
                                          json: #"{"output":\#(jsonLines((0..<99).map(String.init) + [String(long.dropLast())]))}"#)
        #expect(atLimits.status == 200, "\(atLimits.text)")
        let task = try daemon.request("GET", "/v1/tasks/x").json
        #expect(task["completed"] as? Int == 0 && task["state"] as? String == "running", "nothing refused was applied")
        // Output to a finished task is refused with the task's rule (409), and not kept.
        try daemon.request("POST", "/v1/tasks/x/finish", json: #"{"outcome":"succeeded"}"#)
        #expect(try daemon.request("POST", "/v1/tasks/x/heartbeat", json: #"{"output":["late"]}"#).status == 409)
        #expect(lines(try daemon.request("GET", "/v1/tasks/x/output")).last == String(long.dropLast()))
        #expect(try daemon.request("GET", "/v1/tasks/nope/output").status == 404)
        #expect(try daemon.request("GET", "/v1/tasks/x/output?lines=5").status == 400)
    }

    /// Deleting a task removes its tail: the same id registered again starts with none.
    @Test(arguments: Transport.allCases) func deletingATaskRemovesItsTail(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"p","name":"P"}"#)
        try daemon.register(#"{"id":"c","name":"C","parent_id":"p"}"#)
        try daemon.request("POST", "/v1/tasks/c/heartbeat", json: #"{"output":["child says"]}"#)
        try daemon.request("POST", "/v1/tasks/p/heartbeat", json: #"{"output":["parent says"]}"#)
        #expect(try daemon.request("DELETE", "/v1/tasks/p").status == 204)
        try daemon.register(#"{"id":"p","name":"P"}"#)
        try daemon.register(#"{"id":"c","name":"C","parent_id":"p"}"#)
        #expect(lines(try daemon.request("GET", "/v1/tasks/p/output")) == [])
        #expect(lines(try daemon.request("GET", "/v1/tasks/c/output")) == [])
        #expect(try daemon.request("GET", "/v1/tasks/c").json["last_output"] is NSNull)
    }

    // MARK: - Search

    @Test(arguments: Transport.allCases) func searchFindsASubstringOfNameOrIdAcrossEveryPage(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for index in 0..<30 {
            let name = index % 3 == 0 ? "Nightly Backup of db-\(index)" : "Resize photos \(index)"
            try daemon.register(#"{"id":"job-\#(index)","name":"\#(name)"}"#)
        }
        try daemon.register(#"{"id":"backup-by-id","name":"Other"}"#)
        // Case-insensitive, every page, newest first, with the total of all matches.
        var seen: [String] = []
        var token: String?
        var pages = 0
        repeat {
            let reply = try daemon.request("GET", "/v1/tasks?q=BACKUP&page_size=4" + (token.map { "&page_token=\($0)" } ?? ""))
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["total_size"] as? Int == 11)
            seen += ids(reply)
            token = reply.json["next_page_token"] as? String
            pages += 1
        } while token != nil && pages < 10
        #expect(pages == 3)
        #expect(seen == ["backup-by-id"] + stride(from: 27, through: 0, by: -3).map { "job-\($0)" })
        // A substring inside a word, and of an id.
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=ightly%20bac&page_size=2")).count == 2)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=job-2")) == ["job-29", "job-28", "job-27", "job-26", "job-25", "job-24", "job-23", "job-22", "job-21", "job-20", "job-2"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=nothing%20like%20it")) == [])
        #expect(try daemon.request("GET", "/v1/tasks?q=nothing%20like%20it").json["total_size"] as? Int == 0)
    }

    /// Queries of one or two characters (no trigram of their own) still find every
    /// occurrence, at the end of a text too, whatever its case.
    @Test(arguments: Transport.allCases) func shortQueriesFindEveryOccurrence(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"t1","name":"Alpha"}"#)
        try daemon.register(#"{"id":"t2","name":"beta"}"#)
        try daemon.register(#"{"id":"t3","name":"Gamma ray"}"#)
        try daemon.register(#"{"id":"zz","name":"Q"}"#)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=A")) == ["t3", "t2", "t1"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=ta")) == ["t2"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=Y")) == ["t3"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=q")) == ["zz"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=Z")) == ["zz"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=t")) == ["t3", "t2", "t1"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=xy")) == [])
        #expect(try daemon.request("GET", "/v1/tasks?q=a").json["total_size"] as? Int == 3)
    }

    /// Case folding of text beyond ASCII, on each engine. SQLite: one rule, the trigram
    /// index's, for queries of every length (ς, σ and Σ are one letter; ß and ẞ too, never
    /// SS). PostgreSQL: `ILIKE` folds as the database's `LC_CTYPE` does; under the C locale
    /// (the test server's) only ASCII letters fold, so `école` misses `ÉCOLE` there — the
    /// documented limit (README: a database created with a UTF-8 locale folds the rest).
    @Test func caseFoldingBeyondASCIIFollowsTheEngine() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"greek","name":"Σίσυφος"}"#)
        try daemon.register(#"{"id":"school","name":"ÉCOLE Straße"}"#)
        let found = { (query: String) throws -> [String] in
            let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            return self.ids(try daemon.request("GET", "/v1/tasks?q=" + encoded))
        }
        #expect(try found("ÉCOLE") == ["school"] && found("Straße") == ["school"], "its own spelling always matches")
        #expect(try found("stra") == ["school"] && found("Éc") == ["school"], "ASCII folds everywhere")
        guard daemon.postgresDatabase != nil else {
            for query in ["ς", "σ", "Σ", "ος", "ΦΟς", "ΣΊΣ"] { #expect(try found(query) == ["greek"], "q=\(query)") }
            for query in ["é", "école", "ß", "ẞ", "AẞE"] { #expect(try found(query) == ["school"], "q=\(query)") }
            #expect(try found("ss") == [] && found("strasse") == [], "ß is not SS to the index")
            return
        }
        let ctype = try daemon.application.readers[0].snapshot { try $0.rows("SHOW lc_ctype") { $0.text(0) } }.first
        if ctype == "C" || ctype == "POSIX" {
            #expect(try found("école") == [] && found("σίσυφοσ") == [], "the C locale folds ASCII only")
        } else {
            #expect(try found("école") == ["school"], "a UTF-8 locale folds beyond ASCII")
        }
    }

    /// Characters special to a query language (quotes, `%`, `_`, `\`, `*`) are plain text.
    @Test(arguments: Transport.allCases) func searchTextIsLiteral(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"s1","name":"50% off \"sale\" a_b c\\d *x OR y"}"#)
        try daemon.register(#"{"id":"s2","name":"500 off sale aXb cd x y"}"#)
        for (query, expected) in [("50%25", ["s1"]), ("%22sale%22", ["s1"]), ("a_b", ["s1"]), ("c%5Cd", ["s1"]),
                                  ("*x%20OR", ["s1"]), ("%25", ["s1"]), ("_", ["s1"]), ("off", ["s2", "s1"])] {
            let reply = try daemon.request("GET", "/v1/tasks?q=\(query)")
            #expect(reply.status == 200, "\(query): \(reply.text)")
            #expect(ids(reply) == expected, "q=\(query)")
        }
    }

    @Test(arguments: Transport.allCases) func searchCombinesWithTheOtherFilters(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"import","name":"Import CSV"}"#)
        try daemon.register(#"{"id":"import-part","name":"Import CSV part 1","parent_id":"import"}"#)
        try daemon.register(#"{"id":"import-old","name":"Import CSV yesterday"}"#)
        try daemon.request("POST", "/v1/tasks/import-old/finish", json: #"{"outcome":"failed"}"#)
        try daemon.register(#"{"id":"export","name":"Export CSV"}"#)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=import&state=failed")) == ["import-old"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=import&root=true")) == ["import-old", "import"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=csv&parent_id=import")) == ["import-part"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=csv&id_prefix=ex")) == ["export"])
        let running = try daemon.request("GET", "/v1/tasks?q=CSV&state=running&stalled=false&page_size=1")
        #expect(running.json["total_size"] as? Int == 3)
        #expect(ids(running) == ["export"])
        // A page token is tied to its search: another q (or none) refuses it.
        let token = try #require(running.json["next_page_token"] as? String)
        let next = try daemon.request("GET", "/v1/tasks?q=CSV&state=running&stalled=false&page_size=1&page_token=\(token)")
        #expect(ids(next) == ["import-part"])
        let otherSearch = try daemon.request("GET", "/v1/tasks?q=import&state=running&stalled=false&page_size=1&page_token=\(token)")
        #expect(otherSearch.status == 400 && otherSearch.problemCode == "invalid_page_token", "\(otherSearch.text)")
        let noSearch = try daemon.request("GET", "/v1/tasks?state=running&stalled=false&page_size=1&page_token=\(token)")
        #expect(noSearch.status == 400 && noSearch.problemCode == "invalid_page_token")
    }

    /// A task deleted, with its subtree or by retention, is no longer found, with another
    /// filter or without; an id registered again is found once, by its new name.
    @Test func searchForgetsDeletedTasks() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(arguments: ["--retention", "1d"], clock: clock)
        try daemon.register(#"{"id":"kept","name":"Backup kept"}"#)
        try daemon.register(#"{"id":"old","name":"Backup old"}"#)
        try daemon.register(#"{"id":"gone","name":"Backup gone"}"#)
        try daemon.register(#"{"id":"gone-child","name":"Backup child","parent_id":"gone"}"#)
        try daemon.request("POST", "/v1/tasks/old/finish", json: #"{"outcome":"succeeded"}"#)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=backup")) == ["gone-child", "gone", "old", "kept"])
        #expect(try daemon.request("DELETE", "/v1/tasks/gone").status == 204)
        clock.advance(by: 86_400_001)
        #expect(daemon.application.pruneOldTasks() >= 1)
        #expect(try daemon.request("GET", "/v1/tasks/old").status == 404)
        let searches: [(String, [String])] = [("q=backup", ["kept"]), ("q=backup&root=true", ["kept"]),
                                              ("q=bac&state=running", ["kept"]), ("q=o", []), ("q=go", []),
                                              ("q=gone-child", []), ("q=old&state=succeeded", [])]
        for (query, expected) in searches {
            let reply = try daemon.request("GET", "/v1/tasks?\(query)")
            #expect(ids(reply) == expected, "\(query)")
            #expect(reply.json["total_size"] as? Int == expected.count, "\(query)")
        }
        try daemon.register(#"{"id":"gone","name":"Backup again"}"#)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=backup")) == ["gone", "kept"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=backup%20gone")) == [])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=gone")) == ["gone"])
    }

    /// Tasks stored before the search's migration (11 on both engines; on PostgreSQL it
    /// moves the index off `tasks`) are found by id and by name, counted, and forgotten
    /// when deleted.
    @Test func searchFindsTasksStoredBeforeItsMigration() throws {
        let daemon = try LiveDaemon(prepare: { location in
            let database = try Database(path: location)
            defer { database.close() }
            let migrations = isPostgresLocation(location) ? EmbeddedMigrations.postgres : EmbeddedMigrations.all
            try Migrator(migrations.filter { $0.version < 11 }).migrate(database)
            for (id, name) in [("db-1", "Nightly backup"), ("photos", "Resize photos"), ("BACKUP-2", "Weekly")] {
                try database.execute("""
                    INSERT INTO tasks (id, name, state, stall_timeout_ms, created_at, updated_at, last_signal_at,
                        definition, is_root)
                    VALUES ('\(id)', '\(name)', 'running', 30000, 1000, 1000, 1000, '{}', 1)
                    """)
            }
        })
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=backup")) == ["BACKUP-2", "db-1"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=P&page_size=2")) == ["BACKUP-2", "photos"])
        #expect(try daemon.request("GET", "/v1/tasks?q=P&page_size=2").json["total_size"] as? Int == 3)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=resize&root=true")) == ["photos"])
        try daemon.register(#"{"id":"new","name":"Backup new"}"#)
        #expect(try daemon.request("DELETE", "/v1/tasks/db-1").status == 204)
        #expect(ids(try daemon.request("GET", "/v1/tasks?q=backup")) == ["new", "BACKUP-2"])
    }

    @Test(arguments: Transport.allCases) func badSearchesAreRefused(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let long = String(repeating: "a", count: 201)
        for query in ["q=", "q=a%01b", "q=a%7Fb", "q=%C2%9B", "q=\(long)", "q=a&q=b"] {
            let reply = try daemon.request("GET", "/v1/tasks?\(query)")
            #expect(reply.status == 400 && reply.problemCode == "invalid_request", "\(query): \(reply.text)")
            let fields = (reply.json["errors"] as? [[String: Any]] ?? []).compactMap { $0["field"] as? String }
            #expect(fields == ["q"], "\(query): \(reply.text)")
        }
        #expect(try daemon.request("GET", "/v1/tasks?q=\(String(long.dropLast()))").status == 200)
    }

    // MARK: - Summary

    @Test(arguments: Transport.allCases) func theSummaryCountsEveryStateAndTheStalled(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let empty = try daemon.request("GET", "/v1/tasks/summary")
        #expect(empty.status == 200)
        #expect(empty.text == #"{"pending":0,"running":0,"stalled":0,"succeeded":0,"failed":0,"canceled":0}"#)
        try daemon.register(#"{"id":"q1","name":"Q","state":"pending"}"#)
        try daemon.register(#"{"id":"r1","name":"R"}"#)
        try daemon.register(#"{"id":"r2","name":"R","parent_id":"r1"}"#)
        for (id, outcome) in [("s1", "succeeded"), ("f1", "failed"), ("f2", "failed"), ("c1", "canceled")] {
            try daemon.register(#"{"id":"\#(id)","name":"X"}"#)
            try daemon.request("POST", "/v1/tasks/\(id)/finish", json: #"{"outcome":"\#(outcome)"}"#)
        }
        let summary = try daemon.request("GET", "/v1/tasks/summary").json
        #expect(summary.mapValues { $0 as? Int } == ["pending": 1, "running": 2, "stalled": 0, "succeeded": 1, "failed": 2, "canceled": 1])
        let roots = try daemon.request("GET", "/v1/tasks/summary?root=true").json
        #expect(roots["running"] as? Int == 1)
        #expect(try daemon.request("GET", "/v1/tasks/summary?state=running").status == 400)
        #expect(try daemon.request("GET", "/v1/tasks/summary?root=yes").status == 400)
    }

    /// `running` includes the stalled, as `state=running` does.
    @Test func theSummaryCountsAStalledTaskAsRunningToo() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"slow","name":"Slow","stall_timeout_seconds":1}"#)
        try daemon.register(#"{"id":"fine","name":"Fine","stall_timeout_seconds":3600}"#)
        clock.advance(by: 5_000)
        daemon.application.sweepStalls()
        let summary = try daemon.request("GET", "/v1/tasks/summary").json
        #expect(summary["stalled"] as? Int == 1 && summary["running"] as? Int == 2, "\(summary)")
    }

    // MARK: - Terminate

    @Test func terminateEndsTheTaskAndItsUnfinishedDescendants() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"svc","name":"Service"}"#)
        try daemon.register(#"{"id":"job","name":"Job","parent_id":"svc","total":10}"#)
        try daemon.register(#"{"id":"step","name":"Step","parent_id":"job"}"#)
        try daemon.register(#"{"id":"done","name":"Done","parent_id":"svc"}"#)
        try daemon.request("POST", "/v1/tasks/done/finish", json: #"{"outcome":"succeeded"}"#)
        try daemon.request("POST", "/v1/tasks/svc/cancel")
        let stream = try daemon.subscribe()
        _ = try #require(try stream.nextEvent())  // the snapshot
        let reply = try daemon.request("POST", "/v1/tasks/svc/terminate")
        #expect(reply.status == 200, "\(reply.text)")
        #expect(reply.json["id"] as? String == "svc")
        #expect(reply.json["state"] as? String == "canceled" && reply.json["message"] as? String == "terminated")
        for id in ["job", "step"] {
            let task = try daemon.request("GET", "/v1/tasks/\(id)").json
            #expect(task["state"] as? String == "canceled" && task["message"] as? String == "terminated", "\(id): \(task)")
        }
        let done = try daemon.request("GET", "/v1/tasks/done").json
        #expect(done["state"] as? String == "succeeded" && done["message"] is NSNull, "a finished descendant is left as it was")
        // Deepest first, each finish with its event, the task itself last.
        let finished = try stream.events { $0.event == "task.finished" && $0.json["id"] as? String == "svc" }
            .filter { $0.event == "task.finished" }.compactMap { $0.json["id"] as? String }
        #expect(finished == ["step", "job", "svc"])
        // Again: the task is canceled already, 200 and nothing changed.
        let again = try daemon.request("POST", "/v1/tasks/svc/terminate")
        #expect(again.status == 200 && again.headers["headway-unchanged"] == "true", "\(again.text)")
        #expect(again.json["finished_at"] as? String == reply.json["finished_at"] as? String)
    }

    @Test(arguments: Transport.allCases) func terminateRefusesATaskThatEndedOtherwise(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for outcome in ["succeeded", "failed"] {
            try daemon.register(#"{"id":"\#(outcome)","name":"X"}"#)
            try daemon.request("POST", "/v1/tasks/\(outcome)/finish", json: #"{"outcome":"\#(outcome)"}"#)
            let reply = try daemon.request("POST", "/v1/tasks/\(outcome)/terminate")
            #expect(reply.status == 409 && reply.problemCode == "task_finished", "\(reply.text)")
            #expect(try daemon.request("GET", "/v1/tasks/\(outcome)").json["state"] as? String == outcome)
        }
        #expect(try daemon.request("POST", "/v1/tasks/missing/terminate").status == 404)
        #expect(try daemon.request("POST", "/v1/tasks/bad%20id/terminate").status == 400)
        try daemon.register(#"{"id":"live","name":"Live"}"#)
        #expect(try daemon.request("POST", "/v1/tasks/live/terminate", json: "[1").status == 400)
        #expect(try daemon.request("GET", "/v1/tasks/live/terminate").status == 405)
        #expect(try daemon.request("GET", "/v1/tasks/live").json["state"] as? String == "running")
    }

    // MARK: - Task prefixes

    /// A token with a task prefix neither sees nor searches nor reads the output of another
    /// prefix's tasks; its summary counts its own; it cannot terminate another prefix's task
    /// and its terminate passes over them (and what lies below them).
    @Test func aPrefixedTokenSeesOnlyItsOwnTasks() throws {
        let daemon = try LiveDaemon()
        let admin = try daemon.makeToken([.admin], name: "admin")
        let teamA = try daemon.makeToken([.read, .report, .control], name: "team-a", prefix: "team-a.")
        let readerA = try daemon.makeToken([.read], name: "reader-a", prefix: "team-a.")
        let auth = { (secret: String) in [("Authorization", "Bearer \(secret)")] }
        for (id, parent) in [("team-a.root", nil), ("team-a.kid", "team-a.root"), ("team-b.child", "team-a.root"),
                             ("team-a.under-b", "team-b.child"), ("team-b.secret", nil)] as [(String, String?)] {
            let parentField = parent.map { #","parent_id":"\#($0)""# } ?? ""
            let reply = try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"Secret plan \#(id)"\#(parentField)}"#,
                                           headers: auth(admin))
            #expect(reply.status == 201)
            try daemon.request("POST", "/v1/tasks/\(id)/heartbeat", json: #"{"output":["password of \#(id)"]}"#, headers: auth(admin))
        }
        let search = try daemon.request("GET", "/v1/tasks?q=secret", headers: auth(teamA))
        #expect(Set(ids(search)) == ["team-a.root", "team-a.kid", "team-a.under-b"])
        #expect(search.json["total_size"] as? Int == 3)
        #expect(try daemon.request("GET", "/v1/tasks?q=team-b", headers: auth(teamA)).json["total_size"] as? Int == 0)
        #expect(try daemon.request("GET", "/v1/tasks?q=secret", headers: auth(admin)).json["total_size"] as? Int == 5)
        #expect(try daemon.request("GET", "/v1/tasks/team-b.secret/output", headers: auth(teamA)).status == 404)
        #expect(lines(try daemon.request("GET", "/v1/tasks/team-a.kid/output", headers: auth(teamA))) == ["password of team-a.kid"])
        #expect(try daemon.request("GET", "/v1/tasks/summary", headers: auth(teamA)).json["running"] as? Int == 3)
        #expect(try daemon.request("GET", "/v1/tasks/summary", headers: auth(admin)).json["running"] as? Int == 5)
        #expect(try daemon.request("GET", "/v1/tasks/summary?root=true", headers: auth(teamA)).json["running"] as? Int == 1)
        // Terminate: the control scope, the prefix's tasks only.
        #expect(try daemon.request("POST", "/v1/tasks/team-a.root/terminate", headers: auth(readerA)).status == 403)
        #expect(try daemon.request("POST", "/v1/tasks/team-b.secret/terminate", headers: auth(teamA)).status == 404)
        let reply = try daemon.request("POST", "/v1/tasks/team-a.root/terminate", headers: auth(teamA))
        #expect(reply.status == 200 && reply.json["state"] as? String == "canceled", "\(reply.text)")
        let state = { (id: String) in try daemon.request("GET", "/v1/tasks/\(id)", headers: auth(admin)).json["state"] as? String }
        #expect(try state("team-a.kid") == "canceled")
        #expect(try state("team-b.child") == "running")
        #expect(try state("team-a.under-b") == "running", "below another prefix's task: passed over")
        #expect(try state("team-b.secret") == "running")
    }
}
