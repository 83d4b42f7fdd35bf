import HeadwayCore
import Testing
@testable import HeadwayCLI

/// The pure parts of `tasks`, `show` and `history`: the list API's query and the lines.
@Suite struct QueryRenderingTests {
    /// Every option maps to the parameter `openapi.yaml` names, values escaped.
    @Test func theQueryUsesTheListAPIsParameterNames() {
        #expect(TaskListQuery().path == "/v1/tasks")
        let query = TaskListQuery(states: ["running", "pending"], stalled: true, parentID: "a b&c", root: true,
                                  pageSize: 2, pageToken: "djE6-x_")
        #expect(query.path
                == "/v1/tasks?state=running&state=pending&stalled=true&parent_id=a%20b%26c&root=true&page_size=2&page_token=djE6-x_")
    }

    @Test func repeatedOptionsKeepEveryValueInOrder() throws {
        guard case .run(let command, _) = try HeadwayCommand.parser.parse(
            ["tasks", "--state", "failed", "--state=canceled", "--page-size", "3"], environment: [:]) else {
            Issue.record("not a command to run")
            return
        }
        let tasks = try #require(command as? TasksCommand)
        #expect(tasks.query == TaskListQuery(states: ["failed", "canceled"], pageSize: 3))
    }

    @Test func fieldsAreAlignedInTheSchemasOrderWithUnknownOnesLast() {
        let task = JSONValue.object(["zeta": .bool(true), "name": .string("Copy\u{1B}[2J"), "id": .string("c"),
                                     "weight": .number(0.5), "total": .null, "metadata": .object(["k": .integer(1)])])
        #expect(TaskDetails.fieldLines(task) == [
            "id:       c", "name:     Copy", "weight:   0.5", "total:    -", "metadata: {\"k\":1}", "zeta:     true",
        ])
    }

    /// Rate, fraction and ETA read as people read them; a newer field's name is made safe.
    @Test func rateFractionAndETAAreReadable() {
        let task = JSONValue.object([
            "id": .string("p"), "name": .string("Photos"), "state": .string("running"), "completed": .integer(250),
            "total": .integer(1000), "unit": .string("images"), "fraction": .number(0.25),
            "rate": .number(189.53752843062927), "eta_seconds": .number(4), "x\u{1B}]0;pwn\u{07}y": .integer(1),
        ])
        #expect(TaskDetails.fieldLines(task) == [
            "id:          p", "name:        Photos", "state:       running", "completed:   250", "total:       1000",
            "unit:        images", "fraction:    25.0%", "rate:        190 images/s", "eta_seconds: ~4 s", "xy:          1",
        ])
    }

    @Test func historyPointsAreAlignedLines() {
        let history = JSONValue.object(["task_id": .string("h"), "points": .array([
            .object(["t": .string("2026-11-30T20:00:00.000Z"), "completed": .integer(0), "total": .integer(1200),
                     "fraction": .integer(0)]),
            .object(["t": .string("2026-11-30T20:00:01.000Z"), "completed": .integer(768), "total": .integer(1200),
                     "fraction": .number(0.64)]),
            .object(["t": .string("2026-11-30T20:00:02.000Z"), "completed": .integer(5), "total": .null,
                     "fraction": .null]),
        ])])
        #expect(TaskDetails.historyLines(history) == [
            "2026-11-30T20:00:00.000Z    0/1,200   0.0%",
            "2026-11-30T20:00:01.000Z  768/1,200  64.0%",
            "2026-11-30T20:00:02.000Z          5      -",
        ])
        #expect(TaskDetails.historyLines(.object(["points": .array([])])) == [])
    }
}
