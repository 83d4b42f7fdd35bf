import Foundation
@testable import HeadwayCLI
import Testing

/// How `headway run` reads progress from a command's output lines.
@Suite struct ProgressRecognizerTests {
    func reading(_ completed: Int64, _ total: Int64) -> ProgressReading {
        ProgressReading(completed: completed, total: total)
    }

    /// A reading of a percent: a share of 100, reported in units of `%`.
    func percent(_ completed: Int64) -> ProgressReading {
        ProgressReading(completed: completed, total: 100, isPercent: true)
    }

    @Test func builtInFormsReadCountsAndPercents() {
        let recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.parse("copied 12/40 files") == reading(12, 40))
        #expect(recognizer.parse("[ 3 / 9 ]") == reading(3, 9), "blanks around the slash")
        #expect(recognizer.parse("step 1/3, chunk 7/10") == reading(7, 10), "the last form on the line")
        #expect(recognizer.parse("downloading… 42%") == percent(42))
        #expect(recognizer.parse("42.7 % done") == percent(42), "decimals are cut")
        #expect(recognizer.parse("done 100%") == percent(100))
    }

    /// Counts with decimals (pip draws `1.2/3.4 MB`) are scaled, both sides alike, never
    /// cut at the point; rsync's `to-chk=N/M` (files left to check) is not a count.
    @Test func decimalCountsAndRsyncsCheckCounts() {
        let recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.parse("   ━━━━━━━━━━━━━━━━━━━ 1.2/3.4 MB 5.2 MB/s eta 0:00:01") == reading(12, 34))
        #expect(recognizer.parse("0.5/12.25 GB") == reading(50, 1225))
        #expect(recognizer.parse("copied 3/4.") == reading(3, 4), "a full stop after the count")
        #expect(recognizer.parse("1.8/1.8 MB") == reading(18, 18))
        #expect(recognizer.parse("2.5/1.8 MB") == nil, "no more done than the total")
        #expect(recognizer.parse("     1,234,567  45%    1.23MB/s    0:00:01 (xfr#12, to-chk=108/120)") == percent(45))
        #expect(recognizer.parse("        567  10%  1.0MB/s  0:00:00 (xfr#1, ir-chk=1000/1234)") == percent(10))
    }

    @Test func lookAlikesAreNotProgress() {
        let recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.parse("built on 2026/11/30") == nil, "a date is a chain of slashes")
        #expect(recognizer.parse("see /usr/lib/x86_64") == nil)
        #expect(recognizer.parse("12/0 files") == nil, "no total of zero")
        #expect(recognizer.parse("50/40 files") == nil, "no more done than the total")
        #expect(recognizer.parse("growth 1000%") == nil, "more than 100 percent")
        #expect(recognizer.parse("99999999999999999999/99999999999999999999") == nil, "beyond 64 bits")
        #expect(recognizer.parse("") == nil)
    }

    @Test func onlyForwardReadingsComeOut() {
        var recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.read("1/10") == reading(1, 10))
        #expect(recognizer.read("1/10") == nil, "the same again")
        #expect(recognizer.read("5/10") == reading(5, 10))
        #expect(recognizer.read("3/10") == nil, "backwards")
        #expect(recognizer.read("6/100") == nil, "more done but a smaller fraction")
        #expect(recognizer.read("60/100") == reading(60, 100))
        #expect(recognizer.read("no numbers here") == nil)
        #expect(recognizer.last == reading(60, 100))
    }

    @Test func aPatternWithNamedGroups() throws {
        let both = try ProgressRecognizer.compile(#"row (?<completed>\d+) of (?<total>\d+)"#)
        var recognizer = ProgressRecognizer(pattern: both)
        #expect(recognizer.read("row 7 of 20") == reading(7, 20))
        #expect(recognizer.read("7/10 is ignored with a pattern") == nil)
        // Without a total group, the completed group is a percent.
        let percentOnly = try ProgressRecognizer.compile(#"done: (?<completed>\d+)"#)
        var percent = ProgressRecognizer(pattern: percentOnly)
        #expect(percent.read("done: 4") == self.percent(4))
        #expect(percent.read("done: 140") == nil, "more than 100 percent")
    }

    @Test func badPatternsAreUsageErrors() {
        #expect(throws: UsageError.self) { try ProgressRecognizer.compile("(unclosed") }
        #expect(throws: UsageError.self) { try ProgressRecognizer.compile(#"(\d+)/(\d+)"#) }
    }

    @Test func linesSplitAtLineFeedsAndCarriageReturns() {
        var splitter = LineSplitter()
        func feed(_ text: String) -> [String] {
            Array(text.utf8).withUnsafeBytes { splitter.lines(in: $0) }
        }
        #expect(feed("a\nb") == ["a"])
        #expect(feed("c\r 10%\r 20%") == ["bc", " 10%"])
        #expect(splitter.finish() == " 20%")
        #expect(splitter.finish() == nil)
        let long = String(repeating: "x", count: LineSplitter.maximumLineBytes + 100)
        #expect(feed(long + "\n") == [String(repeating: "x", count: LineSplitter.maximumLineBytes)])
        #expect(feed("ab") == [] && feed("c\nd") == ["abc"], "a line over two chunks")
    }

    /// A line redrawn with `\r` is read before its next redraw, unless it ends in a digit
    /// (a count may be cut there).
    @Test func anOpenLineIsReadWhenItLooksWhole() {
        var splitter = LineSplitter()
        #expect(Array("\r[####  ] 40%".utf8).withUnsafeBytes { splitter.lines(in: $0) } == [""])
        #expect(splitter.settledOpenLine == "[####  ] 40%")
        _ = Array("\rcopied 15/20".utf8).withUnsafeBytes { splitter.lines(in: $0) }
        #expect(splitter.settledOpenLine == nil, "15/20 may be the start of 15/200")
        var recognizer = ProgressRecognizer(pattern: nil)
        #expect(recognizer.read("[####  ] 40%") == self.percent(40))
        let decimal = try? ProgressRecognizer.compile(#"step (?<completed>[0-9.]+)"#)
        var percent = ProgressRecognizer(pattern: decimal)
        #expect(percent.read("step 42.5") == self.percent(42), "a decimal percent counts its whole part")
        #expect(recognizer.read("9007199254740992/9007199254740993") == nil, "beyond what the API takes")
    }

    /// A chunk of many lines hands out only its last ones (what came before them is
    /// dropped with the lines it began).
    @Test func aLongChunkGivesItsLastLines() {
        var splitter = LineSplitter()
        let text = "head" + (1...1000).map { "line \($0)\n" }.joined() + "rest"
        let lines = Array(text.utf8).withUnsafeBytes { splitter.lines(in: $0) }
        #expect(lines == (993...1000).map { "line \($0)" })
        #expect(splitter.finish() == "rest")
    }

    @Test func labelsAreSanitizedTrimmedAndBounded() {
        #expect(LineSplitter.label("  \u{1B}[31mred\u{1B}[0m text\t ") == "red text")
        #expect(LineSplitter.label("   ") == nil)
        #expect(LineSplitter.label(String(repeating: "é", count: 600))?.unicodeScalars.count == 500)
    }
}
