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
}
