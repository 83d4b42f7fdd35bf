import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Telemetry

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

    /// A secret never reaches a line, in a value that needs no quoting (a path whose
    /// segment is a token's secret) as in one that does (an `access_token=` parameter).
    @Test func secretsInPlainValuesAreRedactedToo() throws {
        let lines = Lines()
        let logger = Logger(minimumLevel: .info, sink: { lines.append($0) })
        let secret = TokenSecret.make(randomBytes: Array(repeating: 7, count: 32))
        logger.log(.info, "x", ["path": "/v1/tasks/\(secret)", "query": "access_token=\(secret)", "plain": "/v1/hw/a_b"])
        let line = try #require(lines.all.first)
        #expect(!line.contains(secret))
        #expect(line.hasSuffix(#" path=/v1/tasks/hw_[REDACTED] query="access_token=[REDACTED]" plain=/v1/hw/a_b"# + "\n"))
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

    /// The minimum level changes at run time in every copy of a logger (SIGHUP applies the
    /// configuration file's level so).
    @Test func theMinimumLevelChangesInEveryCopy() throws {
        let lines = Lines()
        let logger = Logger(minimumLevel: .info, sink: { lines.append($0) })
        let copy = logger
        copy.log(.debug, "hidden")
        logger.setMinimumLevel(.debug)
        #expect(copy.minimumLevel == .debug)
        copy.log(.debug, "shown")
        copy.setMinimumLevel(.warn)
        logger.log(.info, "hidden.again")
        logger.log(.warn, "warned")
        #expect(lines.all.map { $0.split(separator: " ")[2] } == ["event=shown\n", "event=warned\n"])
    }

    /// A log file is appended to (mode 0640 when created); after it is moved away (log
    /// rotation), `reopen` sends the next lines to a new file at the path, the lines
    /// waiting before it to the old one. A reopen that fails keeps the old file.
    @Test func aLogFileIsAppendedToAndReopenedAfterRotation() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("headwayd.log")
        try "earlier line\n".write(toFile: path, atomically: true, encoding: .utf8)
        let logger = try Logger(minimumLevel: .info, filePath: path)
        #expect(logger.filePath == path)
        logger.log(.info, "before.rotation")
        try FileManager.default.moveItem(atPath: path, toPath: path + ".1")
        logger.log(.info, "waiting.at.rotation")
        try logger.reopen()
        logger.log(.info, "after.rotation")
        logger.flush()
        let rotated = try String(contentsOfFile: path + ".1", encoding: .utf8)
        #expect(rotated.hasPrefix("earlier line\n"))
        #expect(rotated.contains("event=before.rotation") && rotated.contains("event=waiting.at.rotation"))
        #expect(!rotated.contains("event=after.rotation"))
        let current = try String(contentsOfFile: path, encoding: .utf8)
        #expect(current.split(separator: "\n").count == 1 && current.contains("event=after.rotation"))
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode.map { $0 & ~0o640 } == 0, "0640 less the umask")

        // A directory now stands at the path (unwritable even for root): the reopen fails,
        // lines keep going to the file opened before.
        try FileManager.default.moveItem(atPath: path, toPath: path + ".2")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(throws: LogFileError.self) { try logger.reopen() }
        logger.log(.warn, "after.failed.reopen")
        #expect(try String(contentsOfFile: path + ".2", encoding: .utf8).contains("event=after.failed.reopen"))
    }

    @Test func aLogFileThatCannotBeOpenedSaysWhy() throws {
        let error = #expect(throws: LogFileError.self) {
            _ = try Logger(minimumLevel: .info, filePath: "/nonexistent/headwayd.log")
        }
        #expect(error?.description == "cannot open the log file /nonexistent/headwayd.log: No such file or directory")
    }

    /// A FIFO nobody reads at the log's path is refused at once: opening it must never wait,
    /// on the thread that also handles the signals.
    @Test func aFIFOWithoutReaderIsRefusedAtOnce() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let fifo = directory.file("headwayd.log")
        #expect(mkfifo(fifo, 0o600) == 0)
        let error = #expect(throws: LogFileError.self) { _ = try Logger(minimumLevel: .info, filePath: fifo) }
        #expect(error?.description == "cannot open the log file \(fifo): No such device or address")
    }
}
