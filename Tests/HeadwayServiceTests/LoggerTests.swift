import Foundation
import Testing
@testable import HeadwayService

/// Log lines: logfmt, values quoted only when they must be.
@Suite struct LoggerTests {
    private final class Lines: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [String] = []
        func append(_ line: String) { lock.withLock { items.append(line) } }
        var all: [String] { lock.withLock { items } }
    }

    @Test func writesOneLogfmtLinePerEvent() throws {
        let lines = Lines()
        let logger = Logger(minimumLevel: .info, sink: { lines.append($0) })
        logger.log(.debug, "not.shown")
        logger.log(.info, "x.y", ["a": "plain", "b": "two words", "c": "q\"uo\\te\nnext", "d": "", "e": "k=v"])
        #expect(lines.all.count == 1)
        let line = try #require(lines.all.first)
        #expect(line.hasPrefix("ts=") && line.hasSuffix("\n"))
        let afterTimestamp = line.drop { $0 != " " }
        #expect(afterTimestamp == #" level=info event=x.y a=plain b="two words" c="q\"uo\\te\nnext" d="" e="k=v""# + "\n")
        #expect(line.dropFirst(3).prefix(24).count == 24 && line.dropFirst(3).prefix(24).hasSuffix("Z"))
    }

    /// A value from a client cannot forge a line or reach the terminal raw: CR, LF, tab,
    /// ESC and every other control character (C0, DEL, C1) are escaped.
    @Test func escapesEveryControlCharacter() throws {
        let lines = Lines()
        let logger = Logger(minimumLevel: .info, sink: { lines.append($0) })
        logger.log(.info, "x", ["path": "/v1/tasks/a\r\nts=0 level=error\u{1B}[2J\t\u{0}\u{7F}\u{9B}é"])
        let line = try #require(lines.all.first)
        #expect(line.hasSuffix(#" path="/v1/tasks/a\r\nts=0 level=error\u001b[2J\t\u0000\u007f\u009bé""# + "\n"))
        #expect(!line.dropLast().contains { $0.unicodeScalars.contains { $0.properties.generalCategory == .control } })
    }
}
