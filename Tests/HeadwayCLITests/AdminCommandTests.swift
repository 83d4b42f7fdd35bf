import Foundation
import HeadwayCLI
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Testing

/// The admin commands of the built `headway`: tokens over a live `headwayd`, the database
/// file read directly, completion scripts, and their help.
@Suite(.serialized) struct AdminCommandTests {
    /// A live daemon whose first admin token was made offline before it started.
    static func daemonWithAdminToken(arguments: [String] = []) throws -> (LiveDaemon, String) {
        var secret = ""
        let daemon = try LiveDaemon(arguments: arguments) { path in
            let made = try runBuilt("headwayd", ["token", "create", "--scope", "admin", "--db", path])
            guard made.status == 0 else { throw TestHTTPError("headwayd token create: \(made.errors)") }
            secret = made.output.trimmingCharacters(in: .newlines)
        }
        return (daemon, secret)
    }

    static func lines(_ text: String) -> [JSONValue] {
        text.split(separator: "\n").compactMap { JSONValue.parse(Array($0.utf8)) }
    }

    /// create prints the secret alone, list shows it, revoke removes it; a token without
    /// admin scope is refused with the server's code (exit 1).
    @Test func tokensRoundTripWithAnAdminToken() throws {
        let (daemon, admin) = try Self.daemonWithAdminToken()
        defer { daemon.stop() }
        let server = daemon.url
        let created = try headway("token", "create", "--scope", "read", "--scope", "report", "--name", "ci-bot",
                                  "--task-prefix", "ci.", "--expires-in", "2h", "--server", server, "--token", admin)
        #expect(created.status == 0, "\(created.errors)")
        let secret = created.output.trimmingCharacters(in: .newlines)
        #expect(created.output == secret + "\n")
        #expect(secret.hasPrefix("hw_") && secret.count == 46, "\(secret)")

        let json = try headway("token", "create", "--scope", "control", "--json", "--server", server,
                               environment: ["HEADWAY_TOKEN": admin])
        #expect(json.status == 0, "\(json.errors)")
        guard case .object(let reply)? = JSONValue.parse(Array(json.output.utf8)) else {
            Issue.record("not a JSON object: \(json.output)")
            return
        }
        #expect(reply["scopes"] == .array([.string("control")]))
        #expect(reply["name"] == .string("cli"))
        guard case .string(let controlID)? = reply["id"], case .string(let controlSecret)? = reply["secret"] else {
            Issue.record("no id or secret: \(json.output)")
            return
        }

        let table = try headway("token", "list", "--server", server, "--token", admin)
        #expect(table.status == 0, "\(table.errors)")
        let rows = table.output.split(separator: "\n").map(String.init)
        #expect(rows.first?.hasPrefix("ID") == true && rows.first?.hasSuffix("LAST USED") == true, "\(table.output)")
        #expect(rows.count == 4, "admin, ci-bot, cli (control): \(table.output)")
        let bot = rows.first { $0.contains("ci-bot") } ?? ""
        #expect(bot.contains("report,read") && bot.contains(" ci. ") && bot.hasSuffix("never"), "\(bot)")
        #expect(!table.output.contains("hw_"), "no secret is listed")

        let listed = try headway("token", "list", "--json", "--server", server, "--token", admin)
        let tokens = Self.lines(listed.output)
        #expect(tokens.count == 3 && listed.output.split(separator: "\n").count == 3, "\(listed.output)")

        let refused = try headway("token", "list", "--server", server, "--token", controlSecret)
        #expect(refused.status == 1)
        #expect(refused.output == "")
        #expect(refused.errors.hasPrefix("headway: ") && refused.errors.hasSuffix(" (insufficient_scope)\n"),
                "\(refused.errors)")
        let anonymous = try headway("token", "create", "--scope", "admin", "--server", server)
        #expect(anonymous.status == 1)
        #expect(anonymous.errors.hasSuffix(" (token_missing)\n"), "\(anonymous.errors)")

        let revoked = try headway("token", "revoke", controlID, "--server", server, "--token", admin)
        #expect(revoked.status == 0, "\(revoked.errors)")
        #expect(revoked.output == "revoked \(controlID)\n")
        let after = try headway("token", "list", "--json", "--server", server, "--token", admin)
        #expect(Self.lines(after.output).count == 2)
        #expect(!after.output.contains(controlID))
        let again = try headway("token", "revoke", controlID, "--server", server, "--token", admin)
        #expect(again.status == 1)
        #expect(again.errors.hasSuffix(" (token_not_found)\n"), "\(again.errors)")
        let gone = try headway("cancel", "t", "--server", server, "--token", controlSecret)
        #expect(gone.status == 1)
        #expect(gone.errors.hasSuffix(" (token_revoked)\n"), "\(gone.errors)")
    }

    /// create prints the signing secret alone, list shows the webhook without it,
    /// deliveries shows the attempts at a receiver that is down, delete removes it.
    @Test func webhooksRoundTripWithAnAdminToken() throws {
        let (daemon, admin) = try Self.daemonWithAdminToken(arguments: ["--webhook-allow-private"])
        defer { daemon.stop() }
        let server = daemon.url
        let receiver = "http://127.0.0.1:\(unusedPort())/hook"
        let created = try headway("webhook", "create", receiver, "--event", "task.created", "--event", "task.finished",
                                  "--prefix", "db-", "--outcome", "failed", "--format", "slack", "--server", server,
                                  "--token", admin)
        #expect(created.status == 0, "\(created.errors)")
        let secret = created.output.trimmingCharacters(in: .newlines)
        #expect(created.output == secret + "\n" && secret.hasPrefix("whsec_") && secret.count == 49, "\(secret)")

        let listed = try headway("webhook", "list", "--json", "--server", server, "--token", admin)
        guard case .object(let webhook)? = Self.lines(listed.output).first, case .string(let id)? = webhook["id"] else {
            Issue.record("no webhook listed: \(listed.output) \(listed.errors)")
            return
        }
        #expect(webhook["events"] == .array([.string("task.created"), .string("task.finished")]))
        #expect(webhook["outcomes"] == .array([.string("failed")]) && webhook["format"] == .string("slack"))
        let table = try headway("webhook", "list", "--server", server, "--token", admin)
        let rows = table.output.split(separator: "\n").map(String.init)
        #expect(rows.count == 2 && rows[0].hasPrefix("ID") && rows[0].hasSuffix("FORMAT"), "\(table.output)")
        #expect(rows[1].contains(receiver) && rows[1].contains("task.created,task.finished") && rows[1].hasSuffix("slack"),
                "\(rows[1])")
        #expect(!table.output.contains("whsec_") && !listed.output.contains("whsec_"), "no secret is listed")

        #expect(try headway("start", "Backup", "--id", "db-1", "--server", server, "--token", admin).status == 0)
        // Nothing listens at the receiver: the delivery stays pending, with its refused attempts.
        var deliveries = ""
        for _ in 0..<400 {
            deliveries = try headway("webhook", "deliveries", id, "--server", server, "--token", admin).output
            if deliveries.contains("pending") && !deliveries.contains("pending  0") { break }
            usleep(25_000)
        }
        let lines = deliveries.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines[0].hasPrefix("TIME") && lines[0].hasSuffix("ERROR"), "\(deliveries)")
        #expect(lines.last?.contains("task.created  pending") == true && lines.last?.contains("onnect") == true,
                "\(deliveries)")

        // A test: its outcome printed (nothing listens: failed, exit status 1); a second at once is refused.
        let tested = try headway("webhook", "test", id, "--server", server, "--token", admin)
        #expect(tested.status == 1 && tested.output.hasPrefix("failed: ") && tested.output.hasSuffix(" (task.finished)\n"),
                "\(tested.output) \(tested.errors)")
        #expect(try headway("webhook", "deliveries", id, "--server", server, "--token", admin).output
            .contains("task.finished  failed"))
        let tooSoon = try headway("webhook", "test", id, "--json", "--server", server, "--token", admin)
        #expect(tooSoon.status == 69 && tooSoon.errors.hasSuffix(" (webhook_test_too_soon)\n"), "\(tooSoon.errors)")

        let refused = try headway("webhook", "list", "--server", server)
        #expect(refused.status == 1 && refused.errors.hasSuffix(" (token_missing)\n"), "\(refused.errors)")
        let deleted = try headway("webhook", "delete", id, "--server", server, "--token", admin)
        #expect(deleted.status == 0 && deleted.output == "deleted \(id)\n", "\(deleted.errors)")
        let again = try headway("webhook", "delete", id, "--server", server, "--token", admin)
        #expect(again.status == 1 && again.errors.hasSuffix(" (webhook_not_found)\n"), "\(again.errors)")
        #expect(try headway("webhook", "list", "--server", server, "--token", admin).output.split(separator: "\n").count == 1)
    }

    /// create passes each format's own fields: an email webhook's sender and recipients,
    /// listed back; a telegram one without --chat-id is refused by the daemon (422).
    @Test func webhookCreateTakesEachFormatsFields() throws {
        let (daemon, admin) = try Self.daemonWithAdminToken(arguments: ["--webhook-allow-private"])
        defer { daemon.stop() }
        let server = daemon.url
        let created = try headway("webhook", "create", "smtp://127.0.0.1:\(unusedPort())", "--event", "task.stalled",
                                  "--format", "email", "--mail-from", "headway@example.com", "--mail-to", "ops@example.com",
                                  "--mail-to", "dba@example.com", "--server", server, "--token", admin)
        #expect(created.status == 0, "\(created.errors)")
        let listed = try headway("webhook", "list", "--json", "--server", server, "--token", admin)
        guard case .object(let webhook)? = Self.lines(listed.output).first else {
            Issue.record("no webhook listed: \(listed.output) \(listed.errors)")
            return
        }
        #expect(webhook["format"] == .string("email") && webhook["mail_from"] == .string("headway@example.com"))
        #expect(webhook["mail_to"] == .array([.string("ops@example.com"), .string("dba@example.com")]))
        let refused = try headway("webhook", "create", "https://api.telegram.org/bot1:x/sendMessage", "--event",
                                  "task.stalled", "--format", "telegram", "--server", server, "--token", admin)
        #expect(refused.status == 1 && refused.errors.hasSuffix(" (webhook_format_invalid)\n"), "\(refused.errors)")
    }

    @Test(arguments: [
        (["webhook", "create", "http://x.example/"],
         "headway: missing --event <event>\nSee 'headway webhook create --help'.\n"),
        (["webhook", "create", "http://x.example/", "--event", "task.stalled", "--outcome", "lost"],
         "headway: --outcome must be succeeded, failed or canceled, not 'lost'\nSee 'headway webhook create --help'.\n"),
        (["webhook", "create", "http://x.example/", "--event", "task.stalled", "--format", "xml"],
         "headway: --format must be json, slack, discord, ntfy, telegram, pagerduty or email, not 'xml'\nSee 'headway webhook create --help'.\n"),
        (["webhook", "deliveries"], "headway: missing <id>\nSee 'headway webhook deliveries --help'.\n"),
        (["token", "create"], "headway: missing --scope <scope>\nSee 'headway token create --help'.\n"),
        (["token", "create", "--scope", "root"],
         "headway: --scope must be report, read, control or admin, not 'root'\nSee 'headway token create --help'.\n"),
        (["token", "create", "--scope", "read", "--expires-in", "5s"],
         "headway: --expires-in must be a duration from 1 minute to 100 years (3600, 90m, 12h, 30d), not '5s'\n"
            + "See 'headway token create --help'.\n"),
        (["token", "create", "--scope", "read", "--task-prefix", "a/b"],
         "headway: --task-prefix must match [A-Za-z0-9._~:-]{1,128}, not 'a/b'\nSee 'headway token create --help'.\n"),
        (["token"], "headway: a command is needed\nSee 'headway token --help'.\n"),
        (["token", "revoke"], "headway: missing <id>\nSee 'headway token revoke --help'.\n"),
        (["db", "backup"], "headway: missing <file>\nSee 'headway db backup --help'.\n"),
        (["db", "vacuum"], "headway: unknown command 'vacuum'\nSee 'headway db --help'.\n"),
        (["completion", "tcsh"], "headway: <shell> must be bash, zsh or fish, not 'tcsh'\nSee 'headway completion --help'.\n"),
        (["--db", "h.db", "db", "status"], "headway: '--db' comes after the command's name: it is an option of "
            + "headway db status, headway db check and headway db backup\nSee 'headway --help'.\n"),
        (["db", "--db", "h.db", "check"], "headway: '--db' comes after the command's name: it is an option of "
            + "headway db status, headway db check and headway db backup\nSee 'headway db --help'.\n"),
    ]) func adminUsageErrorsExit64(arguments: [String], expected: String) throws {
        let result = try runBuilt("headway", arguments)
        #expect(result.status == 64)
        #expect(result.errors == expected)
        #expect(result.output == "")
    }

    /// status and check on the database of a running daemon (WAL and all).
    @Test func statusAndCheckOnALiveDatabase() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        let path = daemon.directory.file("h.db")
        #expect(try headway("start", "A", "--id", "a", "--server", server).status == 0)
        #expect(try headway("start", "B", "--id", "b", "--server", server).status == 0)
        #expect(try headway("finish", "b", "--outcome", "succeeded", "--server", server).status == 0)

        let status = try headway("db", "status", "--db", path)
        #expect(status.status == 0, "\(status.errors)")
        #expect(status.output.contains("database   \(path)\n"))
        #expect(status.output.contains("schema     \(Migrator().latestVersion)\n"), "\(status.output)")
        #expect(status.output.contains("\nwal        "))
        #expect(status.output.hasSuffix("tasks      2: 1 running, 1 succeeded\n"), "\(status.output)")
        let json = try headway("db", "status", "--json", environment: ["HEADWAY_DB": path])
        guard case .object(let object)? = JSONValue.parse(Array(json.output.utf8)) else {
            Issue.record("not JSON: \(json.output) \(json.errors)")
            return
        }
        #expect(object["tasks"] == .object(["running": .integer(1), "succeeded": .integer(1)]))
        #expect(object["schema_version"] == .integer(Int64(Migrator().latestVersion)))
        if case .integer(let bytes)? = object["file_bytes"] { #expect(bytes > 0) } else { Issue.record("no file_bytes") }

        let check = try headway("db", "check", "--db", path)
        #expect(check.status == 0, "\(check.errors)")
        #expect(check.output == "ok\n")
        let checkJSON = try headway("db", "check", "--db", path, "--json")
        #expect(checkJSON.output == #"{"ok":true,"problems":[]}"# + "\n")
    }

    /// A backup taken while a loop registers tasks and reports progress: the copy passes
    /// integrity_check and holds every task registered before the backup began.
    @Test func backupUnderWriteLoad() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let path = daemon.directory.file("h.db")
        let copy = daemon.directory.file("copy.db")
        let port = daemon.port
        let registered = SharedValue(0)
        let stop = SharedValue(false)
        let finished = DispatchSemaphore(value: 0)
        let writer = Thread {
            defer { finished.signal() }
            guard let client = try? TestHTTPClient(port: port) else { return }
            // Bounded: at most 5,000 requests, stopped earlier once the backup is done.
            for index in 0..<2500 {
                if stop.value { return }
                let id = "load-\(index)"
                let body = #"{"id":"\#(id)","name":"Load \#(index)","total":100}"#
                guard (try? client.request("POST", "/v1/tasks", json: body))?.status == 201 else { return }
                registered.value = index + 1
                _ = try? client.request("POST", "/v1/tasks/\(id)/progress", json: #"{"completed":50}"#)
            }
        }
        writer.start()
        // Bounded wait until the writer has stored some tasks.
        for _ in 0..<1000 where registered.value < 20 { usleep(5_000) }
        let before = registered.value
        #expect(before >= 20, "the writer registered \(before) tasks")
        let backup = try headway("db", "backup", copy, "--db", path)
        stop.value = true
        finished.wait()
        #expect(backup.status == 0, "\(backup.errors)")
        #expect(backup.output == "backed up \(path) to \(copy)\n")
        #expect(!FileManager.default.fileExists(atPath: copy + "-wal"), "the copy is one file")

        let check = try headway("db", "check", "--db", copy)
        #expect(check.status == 0 && check.output == "ok\n", "\(check.output)\(check.errors)")
        let status = try headway("db", "status", "--json", "--db", copy)
        guard case .object(let object)? = JSONValue.parse(Array(status.output.utf8)),
              case .object(let tasks)? = object["tasks"] else {
            Issue.record("not JSON: \(status.output) \(status.errors)")
            return
        }
        let total = tasks.values.reduce(Int64(0)) { sum, value in if case .integer(let n) = value { sum + n } else { sum } }
        #expect(total >= Int64(before), "the copy holds \(total) tasks, \(before) were registered before")

        let again = try headway("db", "backup", copy, "--db", path)
        #expect(again.status == 1)
        #expect(again.errors == "headway: \(copy) exists already (a backup never overwrites a file)\n")

        // A file where the partial copy would go is someone's: refused, left alone.
        let second = daemon.directory.file("second.db")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: second + ".partial"))
        let blocked = try headway("db", "backup", second, "--db", path)
        #expect(blocked.status == 1)
        #expect(blocked.errors.hasPrefix("headway: \(second).partial exists"), "\(blocked.errors)")
        #expect(try String(contentsOfFile: second + ".partial", encoding: .utf8) == "mine")
        try FileManager.default.removeItem(atPath: second + ".partial")
        let json = try headway("db", "backup", second, "--db", path, "--json")
        #expect(json.status == 0, "\(json.errors)")
        guard case .object(let reply)? = JSONValue.parse(Array(json.output.utf8)) else {
            Issue.record("not JSON: \(json.output)")
            return
        }
        #expect(reply["backup"] == .string(second) && reply["database"] == .string(path))
        #expect(!FileManager.default.fileExists(atPath: second + ".partial"))
    }

    /// Under umask 022 the database `headwayd token create` makes and each backup are
    /// 0600: they hold token hashes and webhook secrets. A symbolic link planted where a
    /// backup or its partial copy goes, leading nowhere or to a file, is refused, and what
    /// it leads to is neither created nor touched.
    @Test func backupsAreTheOwnersAloneAndNeverWrittenThroughALink() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        func run(_ name: String, _ arguments: [String]) throws -> ProcessResult {
            let command = underUmask("022", builtExecutable(name), arguments)
            return try runToEnd(command.path, command.arguments, environment: ["PATH": "/usr/bin:/bin"])
        }
        let path = directory.file("h.db")
        let made = try run("headwayd", ["token", "create", "--scope", "admin", "--db", path])
        #expect(made.status == 0, "\(made.errors)")
        #expect(fileMode(path) == 0o600)
        let copy = directory.file("copy.db")
        let backup = try run("headway", ["db", "backup", copy, "--db", path])
        #expect(backup.status == 0, "\(backup.errors)")
        #expect(fileMode(copy) == 0o600)
        #expect(fileMode(copy + ".partial") == nil)
        #expect(try headway("db", "check", "--db", copy).output == "ok\n")

        let victim = directory.file("victim"), missing = directory.file("missing")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: victim))
        for (index, target) in [missing, victim].enumerated() {
            let partial = directory.file("p\(index).db.partial")
            try FileManager.default.createSymbolicLink(atPath: partial, withDestinationPath: target)
            let refused = try run("headway", ["db", "backup", directory.file("p\(index).db"), "--db", path])
            #expect(refused.status == 1)
            #expect(refused.errors == "headway: \(partial) exists (a backup under way, or one that was stopped); "
                + "remove it first\n")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: partial) == target, "the link is left")
            #expect(fileMode(directory.file("p\(index).db")) == nil)

            let destination = directory.file("d\(index).db")
            try FileManager.default.createSymbolicLink(atPath: destination, withDestinationPath: target)
            let overwrite = try run("headway", ["db", "backup", destination, "--db", path])
            #expect(overwrite.status == 1)
            #expect(overwrite.errors == "headway: \(destination) exists already (a backup never overwrites a file)\n")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: destination) == target, "the link is left")
            #expect(fileMode(destination + ".partial") == nil)
        }
        // SQLite's files beside the partial copy are someone's too (a journal would be
        // rolled back into the copy): refused and left.
        for suffix in ["-journal", "-wal", "-shm"] {
            let planted = directory.file("j.db.partial" + suffix)
            try FileManager.default.createSymbolicLink(atPath: planted, withDestinationPath: missing)
            let refused = try run("headway", ["db", "backup", directory.file("j.db"), "--db", path])
            #expect(refused.status == 1)
            #expect(refused.errors == "headway: \(planted) exists (a backup under way, or one that was stopped); "
                + "remove it first\n")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: planted) == missing, "the link is left")
            #expect(fileMode(directory.file("j.db.partial")) == nil)
            try FileManager.default.removeItem(atPath: planted)
        }
        #expect(fileMode(missing) == nil, "nothing was created through a link")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "mine")
    }

    /// A damaged index (its schema rewritten by the sqlite3 shell): check
    /// lists SQLite's problems on stdout and exits 1.
    @Test func checkListsTheProblemsOfADamagedDatabase() throws {
        let shell = "/usr/bin/sqlite3"
        try #require(FileManager.default.isExecutableFile(atPath: shell), "the test tools install sqlite3")
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let path = daemon.directory.file("h.db")
        #expect(try headway("start", "A", "--id", "a", "--server", daemon.url).status == 0)
        let copy = daemon.directory.file("damaged.db")
        #expect(try headway("db", "backup", copy, "--db", path).status == 0)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: shell)
        process.arguments = [copy, "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
                             + "'CREATE INDEX tasks_by_parent ON tasks (name, seq)' WHERE name = 'tasks_by_parent';"]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let check = try headway("db", "check", "--db", copy)
        #expect(check.status == 1)
        #expect(check.output == "row 1 missing from index tasks_by_parent\n", "\(check.output)")
        #expect(check.errors == "headway: \(copy) failed its integrity check (1 problem)\n")
    }

    /// A missing or foreign file is an error (exit 1) and no database is created.
    @Test func aMissingDatabaseIsAClearErrorAndIsNotCreated() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let missing = directory.file("missing.db")
        for command in ["status", "check"] {
            let result = try headway("db", command, "--db", missing)
            #expect(result.status == 1)
            #expect(result.errors == "headway: no database at \(missing) (give --db PATH or HEADWAY_DB; headway never creates one)\n")
            #expect(result.output == "")
        }
        let fromEnvironment = try headway("db", "backup", directory.file("b.db"), environment: ["HEADWAY_DB": missing])
        #expect(fromEnvironment.status == 1)
        #expect(fromEnvironment.errors.hasPrefix("headway: no database at \(missing) "))
        #expect(!FileManager.default.fileExists(atPath: missing))
        #expect(!FileManager.default.fileExists(atPath: directory.file("b.db")))

        let foreign = directory.file("notes.txt")
        _ = FileManager.default.createFile(atPath: foreign, contents: Data("hello".utf8))
        let result = try headway("db", "status", "--db", foreign)
        #expect(result.status == 1)
        #expect(result.errors.hasPrefix("headway: cannot read \(foreign): "), "\(result.errors)")
        let empty = directory.file("empty.db")
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        let notHeadway = try headway("db", "check", "--db", empty)
        #expect(notHeadway.status == 1)
        #expect(notHeadway.errors == "headway: \(empty) is not a Headway database (no schema_migrations table)\n")
    }

    /// Every command, subcommand and option, as the parser knows them.
    static func allWords() -> [String] {
        var words: [String] = globalOptionNames
        func visit(_ configuration: CommandConfiguration) {
            for subcommand in configuration.subcommands {
                words.append(subcommand.configuration.commandName)
                words += subcommand.arguments.filter { $0.kind != .positional }.map { "--" + $0.name }
                visit(subcommand.configuration)
            }
        }
        visit(HeadwayCommand.configuration)
        return words
    }

    static let globalOptionNames = ["--server", "--token", "--json", "--help", "--version"]

    /// Each script names every command and option, and its shell (installed by the test
    /// tools) accepts its syntax.
    @Test(arguments: CompletionShell.allCases) func completionScripts(shell: CompletionShell) throws {
        let result = try headway("completion", shell.rawValue)
        #expect(result.status == 0, "\(result.errors)")
        for word in Self.allWords() {
            // fish names an option `-l NAME`.
            let expected = shell == .fish && word.hasPrefix("--") ? "-l " + word.dropFirst(2) : word
            #expect(result.output.contains(expected), "\(shell) script lacks \(expected)")
        }
        for nested in ["token create", "token list", "token revoke", "db status", "db check", "db backup"] {
            #expect(result.output.contains("headway \(nested)"), "\(shell) script lacks headway \(nested)")
        }
        let interpreter = try #require(["/usr/bin/", "/bin/", "/usr/local/bin/"].map({ $0 + shell.rawValue })
            .first(where: { FileManager.default.isExecutableFile(atPath: $0) }), "\(shell) is not installed")
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let script = directory.file("headway.\(shell.rawValue)")
        try result.output.write(toFile: script, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: interpreter)
        process.arguments = ["-n", script]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(shell) -n: \(text)")
    }

    /// bash completes subcommands and options for the words typed so far.
    @Test func bashCompletesNestedCommands() throws {
        let script = try headway("completion", "bash").output
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try script.write(toFile: directory.file("c.bash"), atomically: true, encoding: .utf8)
        func complete(_ words: [String]) throws -> [String] {
            let line = words.map { "'\($0)'" }.joined(separator: " ")
            let program = """
            source '\(directory.file("c.bash"))'
            COMP_WORDS=(\(line)); COMP_CWORD=\(words.count - 1); _headway; printf '%s\\n' "${COMPREPLY[@]}"
            """
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = ["-c", program]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return text.split(separator: "\n").map(String.init)
        }
        #expect(try complete(["headway", "to"]) == ["token"])
        #expect(try complete(["headway", "token", ""]).prefix(3) == ["create", "list", "revoke"])
        #expect(try complete(["headway", "--server", "x", "token", "create", "--s"]) == ["--scope", "--server"])
        #expect(try complete(["headway", "db", "backup", "--d"]) == ["--db"])
    }

    /// fish completes subcommands and options, with their help as descriptions.
    @Test func fishCompletesNestedCommands() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try headway("completion", "fish").output.write(toFile: directory.file("headway.fish"), atomically: true, encoding: .utf8)
        func complete(_ line: String) throws -> [String] {
            let result = try runToEnd("/usr/bin/fish", ["--no-config", "-c",
                                                         "source \(directory.file("headway.fish")); complete -C '\(line)'"],
                                      environment: ["PATH": "/usr/bin:/bin", "HOME": directory.path])
            #expect(result.status == 0, "\(result.errors)")
            return result.output.split(separator: "\n").map { String($0.split(separator: "\t").first ?? "") }
        }
        #expect(try complete("headway to") == ["token"])
        #expect(try complete("headway token ") == ["create", "list", "revoke"])
        #expect(try complete("headway db backup --d") == ["--db"])
        #expect(try complete("headway watch --u") == ["--until-done"])
    }

    /// zsh, in a real terminal, completes a subcommand and an option on Tab.
    @Test func zshCompletesInATerminal() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("functions"), withIntermediateDirectories: true)
        try headway("completion", "zsh").output.write(toFile: directory.file("functions/_headway"), atomically: true, encoding: .utf8)
        let terminal = try TmuxPane(columns: 100, rows: 20,
                                    command: "env -i PATH=/usr/bin:/bin TERM=xterm-256color HOME=\(directory.path) zsh -f")
        defer { terminal.close() }
        terminal.sendKeys("fpath=(\(directory.file("functions")) $fpath); autoload -U compinit; compinit -u; PS1='%% '", "Enter")
        #expect(waitUntil(10) { terminal.screen().split(separator: "\n").contains("%") }, "the new prompt: \(terminal.screen())")
        terminal.sendKeys("headway tok", "Tab")
        #expect(waitUntil(10) { terminal.screen().contains("% headway token") }, "\(terminal.screen())")
        terminal.sendKeys("C-u", "headway watch --until", "Tab")
        #expect(waitUntil(10) { terminal.screen().contains("% headway watch --until-done") }, "\(terminal.screen())")
        terminal.sendKeys("C-u", "headway token ", "Tab")
        #expect(waitUntil(10) { terminal.screen().contains("create") && terminal.screen().contains("revoke") },
                "\(terminal.screen())")
    }

    /// The help of each admin command equals its golden file (`golden/help-token-create.txt`).
    @Test(arguments: ["token", "token create", "token list", "token revoke", "webhook", "webhook create", "webhook list",
                      "webhook test", "webhook delete", "webhook deliveries", "db", "db status", "db check",
                      "db backup", "completion"])
    func adminHelpMatchesItsGoldenFile(command: String) throws {
        let words = command.split(separator: " ").map(String.init)
        let result = try runBuilt("headway", words + ["--help"])
        let name = words.isEmpty ? "headway" : words.joined(separator: "-")
        let golden = try String(contentsOf: packageRoot.appendingPathComponent("Tests/HeadwayCLITests/golden/help-\(name).txt"),
                                encoding: .utf8)
        #expect(result.status == 0)
        #expect(result.output == golden)
    }
}

/// A value shared between the test and its writer thread.
final class SharedValue<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
