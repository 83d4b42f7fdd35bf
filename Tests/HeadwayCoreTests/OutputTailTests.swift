import HeadwayCore
import Testing

/// The output tail's bounds (`OutputTail`): the newest lines, at most 50 and 8 KiB.
struct OutputTailTests {
    @Test func keepsTheNewestFiftyLines() {
        var tail = OutputTail()
        tail = tail.appending((0..<30).map { "a\($0)" }, at: 1_000)
        tail = tail.appending((0..<30).map { "b\($0)" }, at: 2_000)
        #expect(tail.lines.count == 50)
        #expect(tail.lines.first == OutputTail.Line(t: "1970-01-01T00:00:01.000Z", line: "a10"))
        #expect(tail.lines.last == OutputTail.Line(t: "1970-01-01T00:00:02.000Z", line: "b29"))
        #expect(OutputTail().appending((0..<80).map(String.init), at: 0).lines.map(\.line) == (30..<80).map(String.init))
    }

    @Test func keepsAtMostEightKibibytesOfText() {
        let line = String(repeating: "x", count: 1_000)
        let tail = OutputTail().appending(Array(repeating: line, count: 9) + ["end"], at: 0)
        #expect(tail.lines.count == 9, "8 lines of 1,000 bytes and one of 3: 8,003 bytes; one more would pass 8,192")
        #expect(tail.lines.reduce(0) { $0 + $1.line.utf8.count } <= OutputTail.maximumBytes)
        let wide = String(repeating: "한", count: 1_000)  // 3,000 bytes
        #expect(OutputTail().appending([wide, wide, wide], at: 0).lines.count == 2)
    }

    @Test func roundTripsThroughItsJSON() throws {
        let tail = OutputTail().appending(["plain", "\u{1B}[1mbold\u{1B}[0m\ttab", "\"quoted\" \\ 한국어", ""], at: 1_800_000_000_123)
        #expect(tail.json.hasPrefix(#"[{"t":"2027-01-15T08:00:00.123Z","line":"plain"},"#), "\(tail.json)")
        #expect(tail.json.contains(#""line":"\u001b[1mbold\u001b[0m\ttab""#))
        #expect(try #require(OutputTail(json: tail.json)) == tail)
        #expect(OutputTail(json: "[]") == OutputTail())
        #expect(OutputTail(json: "{}") == nil)
        #expect(OutputTail(json: #"[{"t":1,"line":"x"}]"#) == nil)
    }
}
