import Foundation
import HeadwayCore
import Testing
@testable import HeadwayCLI

/// How the command line shows the run-time flags (`overdue`, `too_quick`): in the LABEL
/// column before the label, like a stall's note, in magenta (a stall stays yellow), in
/// `headway show`, and first in `headway watch`.
@Suite struct RunTimeRenderingTests {
    static let tasks: [TaskView] = [
        RenderingFixtures.task(#""id":"late","name":"Nightly export","label":"Writing part 9","state":"running","mode":"indeterminate","completed":0,"stalled":false,"overdue":true,"overdue_since":"2026-11-30T11:56:00.000Z","expected_seconds":600,"created_at":"2026-11-30T11:46:00.000Z""#),
        RenderingFixtures.task(#""id":"ran-late","name":"Backup db-3","state":"succeeded","mode":"quantified","completed":3,"total":3,"fraction":1,"overdue":true,"overdue_since":"2026-11-30T11:50:00.000Z","finished_at":"2026-11-30T11:52:30.000Z""#),
        RenderingFixtures.task(#""id":"quick","name":"Backup db-4","state":"succeeded","mode":"indeterminate","completed":0,"too_quick":true,"min_seconds":60,"finished_at":"2026-11-30T11:59:00.000Z""#),
        RenderingFixtures.task(#""id":"both","name":"Stuck and late","state":"running","mode":"indeterminate","completed":0,"stalled":true,"stall_reason":"silent","last_signal_at":"2026-11-30T11:59:00.000Z","overdue":true,"overdue_since":"2026-11-30T11:59:30.000Z""#),
    ]

    @Test func theLabelSaysOverdueLateOrTooQuick() {
        let lines = TaskTable(tasks: Self.tasks, now: RenderingFixtures.now, timeZone: TimeZone(identifier: "UTC")!)
            .render(width: 120)
        #expect(lines.joined(separator: "\n") == """
            NAME            STATE      PROGRESS               TIME    LABEL                                  ID
            Nightly export  running    ⠋                      14 min  overdue by 4 min · Writing part 9      late
            Backup db-3     succeeded  ▕██████████▏100%  3/3          ran 2 min late · ended 11:52           ran-late
            Backup db-4     succeeded  ✓                              too quick (under 1 min) · ended 11:59  quick
            Stuck and late  running    ‖                              no signal for 1 min · overdue by 30 s  both
            """)
    }

    @Test func overdueHasItsOwnColourAndAStallKeepsYellow() {
        let lines = TaskTable(tasks: Self.tasks, now: RenderingFixtures.now, header: false, timeZone: TimeZone(identifier: "UTC")!)
            .render(width: 100, color: true)
        let magenta = "\u{1B}[35m", yellow = "\u{1B}[33m"
        #expect(lines[0].contains(magenta + "running") && lines[0].contains(magenta + "overdue by 4 min"))
        #expect(lines[1].contains(magenta + "ran 2 min late"))
        #expect(lines[2].contains(magenta + "too quick"))
        #expect(lines[3].contains(yellow + "running") && lines[3].contains(yellow + "no signal for 1 min"))
        #expect(!lines[3].contains(magenta))
    }

    @Test func showNamesTheRulesAndTheFlag() {
        let json = JSONValue.parse(Array(#"{"id":"late","name":"Nightly export","state":"running","mode":"indeterminate","completed":0,"stalled":false,"overdue":true,"overdue_since":"2026-11-30T11:56:00.000Z","expected_seconds":600,"deadline":"2026-11-30T13:00:00.000Z","min_seconds":30,"too_quick":false,"created_at":"2026-11-30T11:46:00.000Z","stall_timeout_seconds":30,"progress_timeout_seconds":null}"#.utf8))!
        let lines = TaskDetails.fieldLines(json, now: RenderingFixtures.now, timeZone: TimeZone(identifier: "UTC")!)
        #expect(lines.contains("State:            running · overdue by 4 min"))
        #expect(lines.contains("Expected run:     10 min"))
        #expect(lines.contains("Deadline:         2026-11-30 13:00:00 UTC (in 1 h)"))
        #expect(lines.contains("Shortest run:     30 s"))
        #expect(lines.contains("Overdue since:    2026-11-30 11:56:00 UTC (4 min ago)"))
        #expect(!lines.contains { $0.hasPrefix("overdue") || $0.hasPrefix("too_quick") }, "no raw field repeated")
    }

    @Test func watchPutsOverdueTasksFirst() {
        let plain = RenderingFixtures.task(#""id":"ok","name":"Fine","state":"running","mode":"indeterminate","completed":0"#)
        let (shown, _) = WatchState.fit([plain, Self.tasks[0]], rows: 5)
        #expect(shown.map(\.id) == ["late", "ok"])
    }

    @Test func tasksAsksForOverdueOnly() {
        #expect(TaskListQuery(states: ["running"], overdue: true).path == "/v1/tasks?state=running&overdue=true")
    }
}
