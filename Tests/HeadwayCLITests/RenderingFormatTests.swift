import HeadwayCore
import Testing
@testable import HeadwayCLI

@Suite struct RenderingFormatTests {
    @Test func counts() {
        #expect(Formatting.count(0) == "0")
        #expect(Formatting.count(999) == "999")
        #expect(Formatting.count(1200) == "1,200")
        #expect(Formatting.count(1_234_567) == "1,234,567")
        #expect(Formatting.count(9_007_199_254_740_991) == "9,007,199,254,740,991")
    }

    @Test func rates() {
        #expect(Formatting.rate(12.34, unit: "files") == "12.3 files/s")
        #expect(Formatting.rate(1250.4, unit: "files") == "1,250 files/s")
        #expect(Formatting.rate(3, unit: nil) == "3.0/s")
        #expect(Formatting.rate(0.25, unit: "") == "0.25/s")
        #expect(Formatting.rate(0.001, unit: "rows") == "<0.01 rows/s")
        #expect(Formatting.rate(0, unit: "rows") == "0.00 rows/s")
        #expect(Formatting.rate(99.96, unit: "MB") == "100 MB/s")
        #expect(Formatting.rate(-1, unit: nil) == nil)
        #expect(Formatting.rate(.infinity, unit: nil) == nil)
    }

    @Test func etas() {
        #expect(Formatting.eta(nil) == nil)
        #expect(Formatting.eta(.nan) == nil)
        #expect(Formatting.eta(0.2) == "~1 s")
        #expect(Formatting.eta(35.1) == "~35 s")
        #expect(Formatting.eta(59.6) == "~1 min")
        #expect(Formatting.eta(245) == "~4 min")
        #expect(Formatting.eta(3600) == "~1 h")
        #expect(Formatting.eta(7500) == "~2 h 5 min")
        #expect(Formatting.eta(3 * 86400 + 4 * 3600) == "~3 d 4 h")
        #expect(Formatting.eta(1e300) == "~694,444,444,444 d 10 h")
    }

    @Test func ages() {
        #expect(Formatting.age(milliseconds: -5) == "0 s")
        #expect(Formatting.age(milliseconds: 42_999) == "42 s")
        #expect(Formatting.age(milliseconds: 239_000) == "3 min")
        #expect(Formatting.age(milliseconds: 7_500_000) == "2 h 5 min")
        #expect(Formatting.age(milliseconds: 2 * 86_400_000) == "2 d")
    }

    @Test func barsRoundDownAndAreFullOnlyWhenComplete() {
        #expect(Formatting.barWithPercent(0.64, percent: 64, cells: 10) == "▕██████▍   ▏ 64%")
        #expect(Formatting.bar(0, cells: 4, complete: false) == "▕    ▏")
        #expect(Formatting.bar(0.125, cells: 1, complete: false) == "▕▏▏")
        #expect(Formatting.bar(0.999, cells: 10, complete: false) == "▕█████████▉▏")
        #expect(Formatting.bar(1, cells: 10, complete: false) == "▕█████████▉▏")
        #expect(Formatting.bar(1, cells: 10, complete: true) == "▕██████████▏")
        #expect(Formatting.bar(0.5, cells: 0, complete: false) == "▕▏")
        #expect(Formatting.percent(0.999) == 99)
        #expect(Formatting.percent(1) == 100, "100% exactly when the fraction is 1")
        #expect(Formatting.percent(0.0999) == 9)
        #expect(Formatting.percent(0.29) == 29, "0.29 × 100 is 28.999… in binary")
        #expect(Formatting.percentText(5) == "  5%")
        #expect(Formatting.percentText(100) == "100%")
        for cells in [1, 5, 10] {
            var previous = -1
            for step in 0...200 {
                let bar = Formatting.bar(Double(step) / 200, cells: cells, complete: false)
                #expect(DisplayWidth.of(bar) == cells + 2)
                let filled = eighths(bar)
                #expect(filled >= previous && filled <= step * cells * 8 / 200)
                previous = filled
            }
        }
    }

    /// The eighths a bar fills.
    func eighths(_ bar: String) -> Int {
        let partial: [Character: Int] = ["▏": 1, "▎": 2, "▍": 3, "▌": 4, "▋": 5, "▊": 6, "▉": 7, "█": 8]
        return bar.dropFirst().dropLast().reduce(0) { $0 + (partial[$1] ?? 0) }
    }

    @Test func displayWidths() {
        #expect(DisplayWidth.of("abc") == 3)
        #expect(DisplayWidth.of("▕██▍ ▏") == 6)
        #expect(DisplayWidth.of("写真") == 4)
        #expect(DisplayWidth.of("📸") == 2)
        #expect(DisplayWidth.of("👩‍💻") == 2)
        #expect(DisplayWidth.of("e\u{301}") == 1)
        #expect(DisplayWidth.of("한국어") == 6)
        #expect(DisplayWidth.truncate("Copy photos", to: 6) == "Copy …")
        #expect(DisplayWidth.truncate("写真のアップロード", to: 6) == "写真…")
        #expect(DisplayWidth.truncate("写真のアップロード", to: 5) == "写真…")
        #expect(DisplayWidth.truncate("short", to: 5) == "short")
        #expect(DisplayWidth.truncate("x", to: 0) == "")
        #expect(DisplayWidth.pad("写", to: 4) == "写  ")
    }

    @Test func sanitizedForTheTerminal() {
        #expect(DisplayWidth.sanitize("plain") == "plain")
        #expect(DisplayWidth.sanitize("\u{1B}[1;31mred\u{1B}[0m text") == "red text")
        #expect(DisplayWidth.sanitize("a\tb\r\nc") == "a b  c")
        #expect(DisplayWidth.sanitize("\u{1B}]0;title\u{07}x\u{1B}") == "x")
        #expect(DisplayWidth.sanitize("invoice\u{202E}fdp.exe\u{2066}x\u{2069}") == "invoicefdp.exex", "bidi controls go")
        let task = RenderingFixtures.task(#""id":"t","name":"two\nlines","label":"\u001b[32m50%\u001b[0m done","state":"running""#)
        #expect(task.name == "two lines" && task.label == "50% done")
    }

    @Test func colorPolicy() {
        #expect(Style.useColor(isTTY: true, environment: [:]))
        #expect(!Style.useColor(isTTY: false, environment: [:]))
        #expect(!Style.useColor(isTTY: true, environment: ["NO_COLOR": "1"]))
        #expect(Style.useColor(isTTY: true, environment: ["NO_COLOR": ""]))
        #expect(!Style.useColor(isTTY: true, environment: ["TERM": "dumb"]))
        #expect(Style.red.apply("x", enabled: true) == "\u{1B}[31mx\u{1B}[0m")
        #expect(Style.red.apply("x", enabled: false) == "x")
    }

    @Test func terminalWidthFallback() {
        #expect(TerminalSize.fallbackColumns(environment: [:]) == 80)
        #expect(TerminalSize.fallbackColumns(environment: ["COLUMNS": "132"]) == 132)
        #expect(TerminalSize.fallbackColumns(environment: ["COLUMNS": "0"]) == 80)
        #expect(TerminalSize.fallbackColumns(environment: ["COLUMNS": "wide"]) == 80)
        #expect(TerminalSize.columns(environment: ["COLUMNS": "77"]) > 0)
        #expect(TerminalSize.rows(environment: ["LINES": "40"]) > 0)
    }

    @Test func sparklines() {
        #expect(Sparkline.render([0, 0.25, 0.5, 0.75, 1], maxWidth: 10, range: 0...1) == "▁▃▅▆█")
        #expect(Sparkline.render([1, 2, 3, 5, 8], maxWidth: 3) == "▁▄█")
        #expect(Sparkline.render([4, 4], maxWidth: 5) == "▁▁")
        #expect(Sparkline.render([-1e308, 0, 1e308], maxWidth: 5) == "▁▅█", "extremes whose difference overflows")
        #expect(Sparkline.render([-.greatestFiniteMagnitude, .greatestFiniteMagnitude], maxWidth: 5) == "▁█")
        #expect(Sparkline.render([], maxWidth: 5) == "")
        let history = JSONValue.parse(Array(#"{"task_id":"t","points":[{"t":"2026-11-30T12:00:00.000Z","completed":1,"total":4,"fraction":0.25},{"t":"2026-11-30T12:00:01.000Z","completed":4,"total":4,"fraction":1}]}"#.utf8))!
        #expect(Sparkline.render(history: history, maxWidth: 20) == "▃█")
        let indeterminate = JSONValue.parse(Array(#"{"task_id":"t","points":[{"t":"x","completed":0,"total":null,"fraction":null},{"t":"y","completed":10,"total":null,"fraction":null}]}"#.utf8))!
        #expect(Sparkline.render(history: indeterminate, maxWidth: 20) == "▁█")
    }

    @Test func taskViewDecodesTolerantly() throws {
        let full = RenderingFixtures.tasks[2]
        #expect(full.id == "backup-db-3" && full.state == .running && !full.isQuantified)
        #expect(full.stalled && full.stallReason == "silent")
        #expect(full.stalledSince == RenderingFixtures.now - 42_000)
        let minimal = try #require(TaskView(json: .object(["id": .string("x")])))
        #expect(minimal.name == "" && minimal.state == .running && !minimal.isQuantified && minimal.total == nil)
        let odd = try #require(TaskView(json: .object([
            "id": .string("y"), "state": .string("paused"), "total": .integer(10), "completed": .number(4),
            "rate": .string("fast"), "fraction": .number(1.5),
        ])))
        #expect(odd.state == .other("paused") && odd.isQuantified && odd.completed == 4 && odd.rate == nil && odd.fraction == 1)
        #expect(TaskView(json: .array([])) == nil)
        #expect(TaskView(json: .object(["name": .string("no id")])) == nil)
    }
}
