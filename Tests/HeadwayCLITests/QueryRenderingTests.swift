import Foundation
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
        #expect(tasks.query(parentID: nil) == TaskListQuery(states: ["failed", "canceled"], pageSize: 3))
    }

    /// `show`'s labelled lines: times local with their age, the unknown fields last by name.
    @Test func showsLabelledFieldsWithLocalTimesAndUnknownOnesLast() {
        let task = JSONValue.object(["zeta": .bool(true), "name": .string("Copy\u{1B}[2J"), "id": .string("c"),
                                     "state": .string("running"), "weight": .number(0.5), "total": .null,
                                     "parent_id": .string("p"), "created_at": .string("2026-11-30T11:57:00.000Z"),
                                     "metadata": .object(["k": .integer(1)]), "x\u{1B}]0;pwn\u{07}y": .integer(1)])
        #expect(TaskDetails.fieldLines(task, now: RenderingFixtures.now, timeZone: TimeZone(identifier: "Asia/Seoul")!) == [
            "Name:        Copy", "ID:          c", "State:       running", "Progress:    indeterminate",
            "Parent:      p (weight 0.5)", "Started:     2026-11-30 20:57:00 +09:00 (3 min ago)", "Running for: 3 min",
            "Metadata:    {\"k\":1}", "xy:          1", "zeta:        true",
        ])
    }

    /// Rate, percent and ETA read as people read them.
    @Test func rateFractionAndETAAreReadable() {
        let task = JSONValue.object([
            "id": .string("p"), "name": .string("Photos"), "state": .string("running"), "completed": .integer(250),
            "total": .integer(1000), "unit": .string("images"), "fraction": .number(0.25), "mode": .string("quantified"),
            "rate": .number(189.53752843062927), "eta_seconds": .number(4), "stall_timeout_seconds": .integer(30),
            "progress_timeout_seconds": .null,
        ])
        #expect(TaskDetails.fieldLines(task, now: RenderingFixtures.now).filter { $0.hasPrefix("Progress") || $0.hasPrefix("Stall") } == [
            "Progress:         ▕█████               ▏ 25%  250 of 1,000 images  190 images/s  ~4 s left",
            "Stall timeout:    30 s", "Progress timeout: off",
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
