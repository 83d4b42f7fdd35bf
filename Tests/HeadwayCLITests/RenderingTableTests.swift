import HeadwayCore
import Testing
@testable import HeadwayCLI

/// Tasks of every kind, as the server would send them; `now` is 2026-11-30T12:00:00Z.
enum RenderingFixtures {
    static let now: EpochMilliseconds = Timestamp.parseRFC3339("2026-11-30T12:00:00Z")!

    static func task(_ fields: String) -> TaskView {
        let json = JSONValue.parse(Array("{\(fields)}".utf8))!
        return TaskView(json: json)!
    }

    static let tasks: [TaskView] = [
        task(#""id":"photos-1","name":"Copy photos to NAS","label":"Copying IMG_0420.jpg","state":"running","mode":"quantified","completed":768,"total":1200,"unit":"files","fraction":0.64,"rate":12.3,"eta_seconds":35.1,"stalled":false,"stall_reason":null,"stalled_since":null,"cancel_requested":false,"message":null"#),
        task(#""id":"reindex","name":"Rebuild the search index","label":"Scanning shards","state":"running","mode":"indeterminate","completed":0,"total":null,"unit":null,"fraction":null,"rate":null,"eta_seconds":null,"stalled":false"#),
        task(#""id":"backup-db-3","name":"Nightly backup of db-3","label":"Waiting for lock","state":"running","mode":"indeterminate","completed":0,"total":null,"fraction":null,"stalled":true,"stall_reason":"silent","stalled_since":"2026-11-30T11:59:18.000Z""#),
        task(#""id":"upload","name":"写真のアップロード 📸","state":"running","mode":"quantified","completed":5,"total":1000000,"unit":"bytes","fraction":0.000005,"rate":null,"eta_seconds":null,"stalled":true,"stall_reason":"no_progress","stalled_since":"2026-11-30T11:57:00.000Z""#),
        task(#""id":"etl-7","name":"ETL run 7","state":"failed","mode":"quantified","completed":40,"total":100,"unit":"rows","fraction":0.4,"message":"disk full""#),
        task(#""id":"deploy","name":"Deploy web","state":"succeeded","mode":"quantified","completed":3,"total":3,"unit":"steps","fraction":1"#),
        task(#""id":"queue-9","name":"Queued export","state":"pending","mode":"indeterminate","completed":0"#),
    ]
}

/// The `headway tasks` table at fixed widths: exact lines (golden strings), never wider
/// than the width, counted in display cells.
@Suite struct RenderingTableTests {
    func expectTable(width: Int, _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let lines = TaskTable(tasks: RenderingFixtures.tasks, now: RenderingFixtures.now, frames: ["reindex": 3]).render(width: width)
        #expect(lines.joined(separator: "\n") == expected, sourceLocation: sourceLocation)
        for line in lines {
            #expect(DisplayWidth.of(line) <= width, "\(line)", sourceLocation: sourceLocation)
            #expect(!line.hasSuffix(" ") && !line.contains("\n"), sourceLocation: sourceLocation)
        }
    }

    @Test func width40() {
        expectTable(width: 40, """
            NAME    STATE      PROGRESS  ID
            Copy …  running     64%      photos-1
            Rebui…  running    ⠸         reindex
            Night…  running    ‖         backup-db…
            写真…   running      0%      upload
            ETL r…  failed      40%      etl-7
            Deplo…  succeeded  100%      deploy
            Queue…  pending    ·         queue-9
            """)
    }

    @Test func width80() {
        expectTable(width: 80, """
            NAME              STATE      PROGRESS          LABEL                 ID
            Copy photos to …  running    ▕██████▍   ▏ 64%  Copying IMG_0420.jpg  photos-1
            Rebuild the sea…  running    ⠸                 Scanning shards       reindex
            Nightly backup …  running    ‖                 no signal for 42 s …  backup-db-3
            写真のアップロ…   running    ▕          ▏  0%  no progress for 3 m…  upload
            ETL run 7         failed     ▕████      ▏ 40%  disk full             etl-7
            Deploy web        succeeded  ▕██████████▏100%                        deploy
            Queued export     pending    ·                                       queue-9
            """)
    }

    @Test func width120() {
        expectTable(width: 120, """
            NAME                      STATE      PROGRESS                                    LABEL                       ID
            Copy photos to NAS        running    ▕██████▍   ▏ 64%  768/1,200 files    ~35 s  Copying IMG_0420.jpg        photos-1
            Rebuild the search index  running    ⠸                                           Scanning shards             reindex
            Nightly backup of db-3    running    ‖                                           no signal for 42 s · Wait…  backup-db-3
            写真のアップロード 📸     running    ▕          ▏  0%  5/1,000,000 bytes         no progress for 3 min       upload
            ETL run 7                 failed     ▕████      ▏ 40%  40/100 rows               disk full                   etl-7
            Deploy web                succeeded  ▕██████████▏100%  3/3 steps                                             deploy
            Queued export             pending    ·                                                                       queue-9
            """)
    }
}

@Suite struct RenderingRowTests {
    let now = RenderingFixtures.now

    @Test func theIssueExampleRow() {
        let lines = TaskTable(tasks: [RenderingFixtures.tasks[0]], now: now, header: false).render(width: 120)
        #expect(lines == ["Copy photos to NAS  running  ▕██████▍   ▏ 64%  768/1,200 files  12.3 files/s  ~35 s  Copying IMG_0420.jpg  photos-1"])
    }

    @Test func theSpinnerMovesWithTheFrameCounterAndStopsWhenStalled() {
        let moving = RenderingFixtures.tasks[1], stalled = RenderingFixtures.tasks[2]
        let glyphs = (0..<12).map { frame in
            TaskTable(tasks: [moving], now: now, frames: [moving.id: frame], header: false).render(width: 80)[0]
        }
        #expect(glyphs[0] == "Rebuild the search index  running  ⠋  Scanning shards  reindex")
        #expect(glyphs[1] == "Rebuild the search index  running  ⠙  Scanning shards  reindex")
        #expect(glyphs[10] == glyphs[0] && glyphs[11] == glyphs[1])
        let stalledLines = Set((0..<12).map { frame in
            TaskTable(tasks: [stalled], now: now, frames: [stalled.id: frame], header: false).render(width: 100)[0]
        })
        #expect(stalledLines == ["Nightly backup of db-3  running  ‖  no signal for 42 s · Waiting for lock  backup-db-3"])
    }

    @Test func finishedTasksShowTheirOutcome() {
        let tasks = [
            RenderingFixtures.task(#""id":"a","name":"A","state":"succeeded","mode":"indeterminate","completed":0,"label":"done""#),
            RenderingFixtures.task(#""id":"b","name":"B","state":"failed","mode":"indeterminate","completed":0,"message":"exit 2""#),
            RenderingFixtures.task(#""id":"c","name":"C","state":"canceled","mode":"indeterminate","completed":0"#),
            RenderingFixtures.task(#""id":"d","name":"D","state":"running","mode":"quantified","completed":1,"total":4,"fraction":0.25,"cancel_requested":true"#),
        ]
        #expect(TaskTable(tasks: tasks, now: now).render(width: 80) == [
            "NAME  STATE      PROGRESS               LABEL             ID",
            "A     succeeded  ✓                      done              a",
            "B     failed     ✗                      exit 2            b",
            "C     canceled   ⊘                                        c",
            "D     running    ▕██▌       ▏ 25%  1/4  cancel requested  d",
        ])
    }

    /// A parent without a total: its percent and its rate in percent, and no count of its own.
    @Test func aParentWithoutTotalShowsPercentAndRateInPercent() {
        let parent = RenderingFixtures.task(#""id":"p","name":"Parent","state":"running","mode":"quantified","completed":0,"total":null,"fraction":0.5,"rate":0.02,"eta_seconds":25"#)
        #expect(TaskTable(tasks: [parent], now: now, header: false).render(width: 80)
            == ["Parent  running  ▕█████     ▏ 50%  2.0 %/s  ~25 s  p"])
    }

    @Test func unlimitedWidthAndNoTasks() {
        let lines = TaskTable(tasks: [RenderingFixtures.tasks[2]], now: now, header: false).render(width: .max)
        #expect(lines == ["Nightly backup of db-3  running  ‖  no signal for 42 s · Waiting for lock  backup-db-3"])
        #expect(TaskTable(tasks: [], now: now).render(width: 80) == ["NAME  STATE  PROGRESS  ID"])
    }

    @Test func neverWiderThanTheWidthEvenWhenTiny() {
        for width in [1, 5, 10, 20, 25, 30, 33, 47, 60, 99] {
            let lines = TaskTable(tasks: RenderingFixtures.tasks, now: now).render(width: width, color: false)
            #expect(lines.count == RenderingFixtures.tasks.count + 1)
            for line in lines { #expect(DisplayWidth.of(line) <= width, "\(width): \(line)") }
        }
    }

    @Test func colorsWrapCellsAndAreNotCounted() {
        let table = TaskTable(tasks: RenderingFixtures.tasks, now: now)
        for width in [40, 80, 120] {
            let plain = table.render(width: width)
            let colored = table.render(width: width, color: true)
            #expect(colored.map(stripANSI) == plain)
        }
        let colored = table.render(width: 120, color: true)
        #expect(colored[0] == "\u{1B}[1mNAME                      STATE      PROGRESS                                    LABEL                       ID\u{1B}[0m")
        #expect(colored[1].contains("\u{1B}[36mrunning  \u{1B}[0m"))
        #expect(colored[3].contains("\u{1B}[33mno signal for 42 s · Wait…\u{1B}[0m"))
        #expect(colored[5].contains("\u{1B}[31mdisk full\u{1B}[0m"), "a failed task's message in red, not dimmed")
        #expect(colored[5].contains("\u{1B}[31mfailed   \u{1B}[0m"))
        #expect(colored[6].contains("\u{1B}[32msucceeded\u{1B}[0m"))
    }

    func stripANSI(_ text: String) -> String {
        var out = "", escaping = false
        for character in text {
            if escaping { if character == "m" { escaping = false }; continue }
            if character == "\u{1B}" { escaping = true; continue }
            out.append(character)
        }
        return out
    }
}

/// The run-time note of a task past its due moment says how late in whole units, and
/// "under 1 s" below a second: an age rounds down, and "overdue by 0 s" reads as on time.
@Suite struct RunTimeNoteTests {
    let now = RenderingFixtures.now

    func note(_ fields: String) -> String? {
        TaskTable.runTimeNote(RenderingFixtures.task(fields), now: now)
    }

    @Test func lateByLessThanASecondSaysUnderOneSecond() {
        #expect(note(#""id":"a","state":"running","overdue":true,"overdue_since":"2026-11-30T11:59:59.600Z""#)
                == "overdue by under 1 s")
        #expect(note(#""id":"b","state":"succeeded","overdue":true,"overdue_since":"2026-11-30T11:59:59.000Z","finished_at":"2026-11-30T11:59:59.999Z""#)
                == "ran under 1 s late")
    }

    @Test func lateByASecondOrMoreSaysHowLong() {
        #expect(note(#""id":"a","state":"running","overdue":true,"overdue_since":"2026-11-30T11:59:59.000Z""#)
                == "overdue by 1 s")
        #expect(note(#""id":"b","state":"failed","overdue":true,"overdue_since":"2026-11-30T11:56:00.000Z","finished_at":"2026-11-30T11:59:59.000Z""#)
                == "ran 3 min late")
        #expect(note(#""id":"c","state":"running","overdue":false"#) == nil)
    }
}
