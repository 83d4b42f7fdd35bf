import CSQLite
import Foundation
import Glibc
import HTTPServer
import HeadwayCore
import HeadwayStore
import Lifecycle
import Testing
@testable import Daemon
@testable import HeadwayAPI
@testable import Telemetry

/// SQLite's extended result codes used here (C macros that Swift does not import).
private let SQLITE_IOERR_WRITE: Int32 = SQLITE_IOERR | (3 << 8)
private let SQLITE_READONLY_DBMOVED: Int32 = SQLITE_READONLY | (4 << 8)

/// A storage that refuses writes: each refusal is a 503 with `Retry-After` and no log line
/// of its own; each episode is logged once when it begins and once when writes commit again.
@Suite struct StorageAlarmTests {
    final class Lines: Sendable {
        let lines = Locked<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        var logger: Logger { Logger(minimumLevel: .info, sink: { line in self.lines.withLock { $0.append(line) } }) }
    }

    let request = HTTPRequest(method: "POST", path: "/v1/tasks/t/progress", requestID: "req-7")

    @Test(arguments: [
        (DatabaseError(code: SQLITE_FULL, message: "database or disk is full", sql: "COMMIT"), "storage_full"),
        (DatabaseError(code: SQLITE_IOERR_WRITE, message: "disk I/O error", sql: "COMMIT", systemError: ENOSPC), "storage_full"),
        (DatabaseError(code: SQLITE_IOERR_WRITE, message: "disk I/O error", sql: "COMMIT", systemError: EROFS),
         "storage_read_only"),
        (DatabaseError(code: SQLITE_READONLY_DBMOVED, message: "attempt to write a readonly database", sql: nil),
         "storage_read_only"),
    ])
    func aRefusalOfTheStorageIs503WithRetryAfterAndNoLogLine(_ error: DatabaseError, _ code: String) throws {
        let lines = Lines()
        let response = ErrorReplies(logger: lines.logger).response(for: error, request)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        #expect(response.status == 503)
        #expect(json["code"] as? String == code)
        #expect(response.headers.contains(HTTPField("Retry-After", "\(Problem.storageRetrySeconds)")))
        #expect(lines.all.isEmpty)
    }

    @Test func anotherIOErrorIsStill500AndLogged() {
        let lines = Lines()
        let error = DatabaseError(code: SQLITE_IOERR_WRITE, message: "disk I/O error", sql: "COMMIT", systemError: EIO)
        #expect(ErrorReplies(logger: lines.logger).response(for: error, request).status == 500)
        #expect(lines.all.count == 1)
    }

    @Test func anEpisodeBeginsAtTheFirstRefusedBatchAndEndsAtTheNextWrite() {
        var episode = StorageEpisode()
        #expect(episode.note(committed: true, wrote: true, failure: nil, at: 1) == nil)
        #expect(episode.note(committed: false, wrote: false, failure: nil, at: 2) == nil, "another failure")
        #expect(episode.note(committed: false, wrote: false, failure: .full, at: 10) == .began(.full))
        #expect(episode.note(committed: false, wrote: false, failure: .full, at: 11) == nil)
        #expect(episode.note(committed: true, wrote: false, failure: nil, at: 12) == nil, "a batch that wrote nothing")
        #expect(episode.note(committed: false, wrote: false, failure: .full, at: 13) == nil)
        #expect(episode.note(committed: false, wrote: false, failure: .readOnly, at: 14) == .began(.readOnly))
        #expect(episode.note(committed: true, wrote: true, failure: nil, at: 1_510)
            == .ended(.readOnly, batchesRefused: 4, milliseconds: 1_500))
        #expect(episode == StorageEpisode())
        #expect(episode.note(committed: false, wrote: false, failure: .full, at: 2_000) == .began(.full))
    }

    @Test func theAlarmLogsEachEpisodeOnce() {
        let lines = Lines()
        let clock = ManualClock(5_000)
        let alarm = StorageAlarm(logger: lines.logger, clock: clock)
        let full = DatabaseError(code: SQLITE_FULL, message: "database or disk is full", sql: "COMMIT")
        alarm.observe(.init(jobs: 3, seconds: 0.001, committed: true, changedRows: true))
        for _ in 0..<50 { alarm.observe(.init(jobs: 3, seconds: 0.001, committed: false, error: full)) }
        clock.advance(by: 2_500)
        alarm.observe(.init(jobs: 1, seconds: 0.001, committed: true, changedRows: true))
        let events = lines.all.map { $0.split(separator: " ").filter { $0.hasPrefix("event=") } }
        #expect(events == [["event=storage.full"], ["event=storage.writable"]])
        #expect(lines.all.last?.contains("after=storage_full batches_refused=50 seconds=2.5") == true)
    }
}
