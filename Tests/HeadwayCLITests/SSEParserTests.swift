@testable import HeadwayCLI
import HeadwayClient
import HeadwayCore
import Testing

/// The SSE parser: fields, multi-line data, comments, retry, line endings, partial chunks.
@Suite struct SSEParserTests {
    func parse(_ chunks: [String]) -> (events: [SSEParser.Event], parser: SSEParser) {
        var parser = SSEParser()
        var events: [SSEParser.Event] = []
        for chunk in chunks { events += parser.feed(Array(chunk.utf8)) }
        return (events, parser)
    }

    @Test func fieldsMakeEvents() {
        let (events, parser) = parse(["retry: 3000\nid: 7\nevent: snapshot\ndata: {\"tasks\":[]}\n\nid: 8\nevent: task.updated\ndata: {}\n\n"])
        #expect(events == [SSEParser.Event(name: "snapshot", data: "{\"tasks\":[]}", lastEventID: "7"),
                           SSEParser.Event(name: "task.updated", data: "{}", lastEventID: "8")])
        #expect(parser.retryMilliseconds == 3000)
        #expect(parser.lastEventID == "8")
    }

    @Test func multiLineDataJoinsWithLineFeedsAndDefaultsToMessage() {
        let (events, _) = parse(["data: one\ndata:two\ndata\ndata:  three\n\n"])
        #expect(events == [SSEParser.Event(name: "message", data: "one\ntwo\n\n three", lastEventID: "")])
    }

    @Test func commentsAndEmptyEventsDispatchNothing() {
        let (events, parser) = parse([": keep-alive\n\n:\n\nevent: x\n\nid: 3\n\n"])
        #expect(events.isEmpty)
        #expect(parser.commentCount == 2)
        #expect(parser.lastEventID == "3", "an id without data still counts")
    }

    @Test func anIdLastsUntilChangedAndOneWithNulIsIgnored() {
        let (events, parser) = parse(["id: 5\ndata: a\n\ndata: b\n\nid: 6\u{0}\ndata: c\n\n"])
        #expect(events.map(\.lastEventID) == ["5", "5", "5"])
        #expect(parser.lastEventID == "5")
    }

    @Test func retryNeedsDigitsOnly() {
        #expect(parse(["retry: 12a\n\n"]).parser.retryMilliseconds == nil)
        #expect(parse(["retry: -1\n\n"]).parser.retryMilliseconds == nil)
        #expect(parse(["retry:250\n\n"]).parser.retryMilliseconds == 250)
    }

    @Test func crlfCrAndLfEndLinesAlike() {
        let expected = [SSEParser.Event(name: "a", data: "1", lastEventID: "")]
        #expect(parse(["event: a\r\ndata: 1\r\n\r\n"]).events == expected)
        #expect(parse(["event: a\rdata: 1\r\r"]).events == expected)
        #expect(parse(["\u{FEFF}event: a\ndata: 1\n\n"]).events == expected, "a byte order mark is skipped")
    }

    /// Every split of a stream, byte by byte included (a CRLF cut between chunks, a UTF-8
    /// character cut in the middle), gives the same events.
    @Test func partialChunksGiveTheSameEvents() {
        let stream = Array("id: 1\r\nevent: task.updated\r\ndata: {\"label\":\"Café ⠋\"}\r\n\r\n: ping\r\ndata: x\r\n\r\n".utf8)
        var whole = SSEParser()
        let expected = whole.feed(stream)
        #expect(expected.count == 2)
        for cut in 1..<stream.count {
            var parser = SSEParser()
            let events = parser.feed(stream[..<cut]) + parser.feed(stream[cut...])
            #expect(events == expected, "cut at \(cut)")
        }
        var parser = SSEParser()
        #expect(stream.flatMap { parser.feed([$0]) } == expected)
        #expect(parse(["data: a\r", "\n", "\r\n"]).events.map(\.data) == ["a"], "CR then LF across chunks is one break")
    }
}

/// Bounds on what a server can make the command hold.
@Suite struct ReplyBoundsTests {
    @Test func anEventPastTheLimitStopsTheParser() {
        var parser = SSEParser(maximumEventBytes: 100)
        #expect(parser.feed(Array("data: small\n\n".utf8)).map(\.data) == ["small"])
        #expect(parser.feed([UInt8](repeating: UInt8(ascii: "x"), count: 150)).isEmpty)
        #expect(parser.overflowed)
        #expect(parser.feed(Array("\n\ndata: later\n\n".utf8)).isEmpty, "nothing more is parsed")
    }

    @Test func aReplyPastTheLimitIsRefused() {
        let collector = BodyCollector(limit: 10)
        #expect([UInt8](repeating: 1, count: 6).withUnsafeBytes { collector.receive($0) })
        #expect(![UInt8](repeating: 1, count: 6).withUnsafeBytes { collector.receive($0) })
        #expect(collector.overflowed && collector.bytes.count == 6)
    }

    @Test func totalsThatAreNoCountsDoNotCrash() throws {
        func total(_ value: JSONValue) throws -> (Int64, Int64) {
            let page = try TaskAPI.page(from: .object(["tasks": .array([.object(["id": .string("a")])]), "total_size": value]))
            return (page.totalSize, page.remaining)
        }
        #expect(try total(.number(1e300)) == (1, 0))
        #expect(try total(.integer(.min)) == (0, 0))
        #expect(try total(.integer(5)) == (5, 4))
        #expect(throws: CLIError.self) { try TaskAPI.page(from: .string("html")) }
    }
}
