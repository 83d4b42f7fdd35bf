import Foundation
import HeadwayTestSupport
import HeadwayCore
import Testing

/// The built `headway` against a live `headwayd`: what each command prints and its exit
/// status for every outcome.
@Suite(.serialized) struct LiveServerTests {
    /// A runner's life: start prints the id alone; progress and heartbeat print nothing;
    /// a refusal exits 1 with the problem; after a cancel the runner commands exit 3.
    @Test func aRunnersLifeAndItsExitStatuses() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        // Global options before and after the subcommand.
        let started = try headway("--server", server, "start", "Nightly backup", "--id", "b1", "--total", "10",
                                  "--unit", "files", "--stall-timeout", "60")
        #expect(started.status == 0, "\(started.errors)")
        #expect(started.output == "b1\n")
        let chosen = try headway("start", "Server chooses", "--server", server)
        #expect(chosen.status == 0)
        #expect(!chosen.output.isEmpty && chosen.output.hasSuffix("\n") && !chosen.output.dropLast().contains("\n"))

        let progress = try headway("progress", "b1", "--completed", "3", "--label", "Copying", "--seq", "1", "--server", server)
        #expect(progress.status == 0)
        #expect(progress.output == "")
        let increment = try headway("progress", "b1", "--increment", "2", "--json", environment: ["HEADWAY_URL": server])
        #expect(increment.status == 0)
        guard case .object(let task)? = JSONValue.parse(Array(increment.output.utf8)) else {
            Issue.record("not a JSON object: \(increment.output)")
            return
        }
        #expect(task["completed"] == .integer(5))
        #expect(task["label"] == .string("Copying"))
        #expect(increment.output.hasSuffix("}\n"))

        let regression = try headway("progress", "b1", "--completed", "1", "--server", server)
        #expect(regression.status == 1)
        #expect(regression.errors.hasPrefix("headway: "))
        #expect(regression.errors.hasSuffix(" (progress_regression)\n"), "\(regression.errors)")
        #expect(regression.errors.split(separator: ":").count >= 3, "title: detail (code)")

        #expect(try headway("heartbeat", "b1", "--label", "Waiting", "--server", server).status == 0)
        let cancel = try headway("cancel", "b1", "--server", server)
        #expect(cancel.status == 0)
        #expect(cancel.output == "cancel requested for b1\n")

        let afterCancel = try headway("progress", "b1", "--increment", "1", "--server", server)
        #expect(afterCancel.status == 3)
        #expect(afterCancel.errors == "headway: cancel requested for task b1\n")
        #expect(try headway("heartbeat", "b1", "--server", server).status == 3)
        let finished = try headway("finish", "b1", "--outcome", "canceled", "--message", "stopped", "--server", server)
        #expect(finished.status == 3)

        let missing = try headway("finish", "nope", "--outcome", "succeeded", "--server", server)
        #expect(missing.status == 1)
        #expect(missing.errors.hasSuffix(" (not_found)\n"), "\(missing.errors)")
    }

    @Test func aFinishedTaskReportsOutcomeAndRefusesMore() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        #expect(try headway("start", "Job", "--id", "j", "--server", server).output == "j\n")
        let finished = try headway("finish", "j", "--outcome", "succeeded", "--json", "--server", server)
        #expect(finished.status == 0)
        guard case .object(let task)? = JSONValue.parse(Array(finished.output.utf8)) else {
            Issue.record("not a JSON object: \(finished.output)")
            return
        }
        #expect(task["state"] == .string("succeeded"))
        let late = try headway("heartbeat", "j", "--server", server)
        #expect(late.status == 1)
        #expect(late.errors.hasSuffix(" (task_finished)\n"), "\(late.errors)")
    }

    /// Without a terminal, delete refuses (64) unless given --yes; with it the task goes.
    @Test func deleteNeedsYesWithoutATerminal() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        #expect(try headway("start", "Parent", "--id", "p", "--server", server).status == 0)
        #expect(try headway("start", "Child", "--id", "c", "--parent", "p", "--weight", "2", "--server", server).status == 0)
        let refused = try headway("delete", "p", "--server", server)
        #expect(refused.status == 64)
        #expect(refused.errors == "headway: delete needs --yes when not run from a terminal\nSee 'headway delete --help'.\n")
        #expect(try headway("heartbeat", "c", "--server", server).status == 0, "nothing was deleted")
        let deleted = try headway("delete", "p", "--yes", "--server", server)
        #expect(deleted.status == 0)
        #expect(deleted.output == "deleted p\n")
        let gone = try headway("heartbeat", "c", "--server", server)
        #expect(gone.status == 1)
        #expect(gone.errors.hasSuffix(" (not_found)\n"), "\(gone.errors)")
    }

    /// On a terminal (a pseudo-terminal made by util-linux `script`), delete asks: "n"
    /// keeps the task (exit 1), "y" deletes it.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func deleteAsksOnATerminal() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        #expect(try headway("start", "Kept", "--id", "k", "--server", daemon.url).status == 0)
        let command = builtExecutable("headway") + " delete k --server " + daemon.url
        let declined = try runInTerminal(command, answering: "n\n")
        #expect(declined.status == 1)
        #expect(declined.output.contains("Delete task k and all its descendants? [y/N] "))
        #expect(declined.output.contains("headway: task k not deleted"))
        #expect(try headway("heartbeat", "k", "--server", daemon.url).status == 0)
        let confirmed = try runInTerminal(command, answering: "y\n")
        #expect(confirmed.status == 0)
        #expect(confirmed.output.contains("deleted k"))
        #expect(try headway("heartbeat", "k", "--server", daemon.url).status == 1)
    }

    /// Runs `command` on a pseudo-terminal, typing `answer`; stdout and stderr come back
    /// mixed, as the terminal showed them.
    func runInTerminal(_ command: String, answering answer: String) throws -> ProcessResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-qec", command, "/dev/null"]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data(answer.utf8))
        try input.fileHandleForWriting.close()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return ProcessResult(status: process.terminationStatus, output: text, errors: "")
    }

    /// Once a token exists every request needs one: from --token or HEADWAY_TOKEN.
    @Test func aTokenComesFromTheFlagOrTheEnvironment() throws {
        var secret = ""
        let daemon = try LiveDaemon { database in
            let made = try runBuilt("headwayd", ["token", "create", "--scope", "admin", "--db", database])
            #expect(made.status == 0, "\(made.errors)")
            secret = made.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        defer { daemon.stop() }
        let server = daemon.url
        let without = try headway("start", "Job", "--id", "t1", "--server", server)
        #expect(without.status == 1)
        #expect(without.errors.hasSuffix(" (token_missing)\n"), "\(without.errors)")
        let wrong = try headway("start", "Job", "--id", "t1", "--server", server, "--token", "hw_wrong")
        #expect(wrong.status == 1)
        #expect(wrong.errors.hasPrefix("headway: "))
        let flag = try headway("--token", secret, "start", "Job", "--id", "t1", "--server", server)
        #expect(flag.status == 0, "\(flag.errors)")
        #expect(flag.output == "t1\n")
        let environment = try headway("progress", "t1", "--increment", "1",
                                      environment: ["HEADWAY_URL": server, "HEADWAY_TOKEN": secret])
        #expect(environment.status == 0, "\(environment.errors)")
    }
}
