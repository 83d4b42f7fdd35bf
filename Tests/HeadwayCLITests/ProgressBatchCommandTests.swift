import Foundation
import HeadwayCLI
import HeadwayCore
import HeadwayTestSupport
import Testing

/// `headway progress-batch` against a live `headwayd`: JSON lines sent in order, in
/// requests of at most 1,000 updates; refusals printed with their line; exit statuses.
@Suite(.serialized) struct ProgressBatchCommandTests {
    /// The task's `completed`, as `headway show --json` prints it.
    private func completed(_ id: String, _ server: String) throws -> Int64? {
        guard case .object(let task)? = JSONValue.parse(Array(try headway("show", id, "--json", "--server", server).output.utf8)),
              case .integer(let completed)? = task["completed"] else { return nil }
        return completed
    }

    @Test func linesAreSentInOrderAndRefusalsNamedByTheirLine() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        #expect(try headway("start", "Shards", "--id", "a", "--total", "5000", "--server", server).status == 0)
        #expect(try headway("start", "Small", "--id", "b", "--total", "5", "--server", server).status == 0)
        // 1,501 updates: two requests; a blank line, and one refusal on line 1,001.
        var lines = Array(repeating: #"{"task_id":"a","increment":1}"#, count: 1_000)
        lines.append(#"{"task_id":"b","completed":9}"#)
        lines.append("")
        lines += Array(repeating: #"{"task_id":"a","increment":2}"#, count: 499)
        lines.append(#"{"task_id":"b","completed":5,"seq":7}"#)
        let file = daemon.directory.file("updates.jsonl")
        try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)

        let sent = try headway("progress-batch", file, "--server", server)
        #expect(sent.status == 1)
        #expect(sent.output == "")
        #expect(sent.errors == "headway: line 1001: Completed exceeds total: completed would be 9 but total is 5. "
                + "(completed_exceeds_total)\nheadway: 1 of 1501 updates refused\n")
        #expect(try completed("a", server) == 1_000 + 2 * 499)
        #expect(try completed("b", server) == 5)

        // With --json: one result a line; a repeated seq is acknowledged, not applied.
        let again = try headway("progress-batch", file, "--json", "--server", server)
        let results = again.output.split(separator: "\n").map { JSONValue.parse(Array($0.utf8)) }
        #expect(results.count == 1_501)
        guard case .object(let last)?? = results.last else {
            Issue.record("not a JSON object: \(again.output.suffix(200))")
            return
        }
        #expect(last["status"] == .integer(200))
        #expect(last["unchanged"] == .bool(true))
        guard case .object(let refusal)? = results[1_000], case .object(let problem)? = refusal["problem"] else {
            Issue.record("no problem for line 1001")
            return
        }
        #expect(problem["code"] == .string("completed_exceeds_total"))
        #expect(refusal["status"] == .integer(422))
    }

    @Test func aCancelExits3AndABadLineSendsNothing() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let server = daemon.url
        #expect(try headway("start", "Job", "--id", "j", "--server", server).status == 0)
        #expect(try headway("cancel", "j", "--server", server).status == 0)
        let file = daemon.directory.file("updates.jsonl")
        try "{\"task_id\":\"j\",\"increment\":1}\r\n".write(toFile: file, atomically: true, encoding: .utf8)
        let canceled = try headway("progress-batch", file, "--server", server)
        #expect(canceled.status == 3)
        #expect(canceled.errors == "headway: cancel requested for task j\n")
        #expect(try completed("j", server) == 1)

        try "{\"task_id\":\"j\",\"increment\":1}\nnot json\n".write(toFile: file, atomically: true, encoding: .utf8)
        let bad = try headway("progress-batch", file, "--server", server)
        #expect(bad.status == 64)
        #expect(bad.errors == "headway: line 2 is not a JSON object\nSee 'headway progress-batch --help'.\n")
        #expect(try completed("j", server) == 1, "nothing was sent")
        let missing = try headway("progress-batch", daemon.directory.file("none.jsonl"), "--server", server)
        #expect(missing.status == 64)
        #expect(try headway("progress-batch", file, "--batch-size", "0", "--server", server).status == 64)

        // `-` reads stdin.
        try "{\"task_id\":\"j\",\"increment\":4}\n".write(toFile: file, atomically: true, encoding: .utf8)
        let piped = try runToEnd("/bin/sh", ["-c", "exec \"$0\" progress-batch - --server \"$1\" < \"$2\"",
                                             builtExecutable("headway"), server, file],
                                 environment: ["PATH": "/usr/bin:/bin"], timeout: 20)
        #expect(piped.status == 3, "\(piped.errors)")
        #expect(try completed("j", server) == 5)
    }
}
