import Foundation
import Lifecycle
import Testing
@testable import HeadwayStore

/// What a busy handler tells of long lock waits (`LockWaits`), on an injected clock.
@Suite struct LockWaitsTests {
    @Test func aLongWaitIsUnderWayWhileTheHandlerIsCalledAndForgottenSoonAfter() {
        let clock = Locked<UInt64>(1_000)
        let waits = LockWaits(now: { clock.withLock { $0 } })
        #expect(!waits.isWaitingLong)
        waits.longWaitGoesOn(becameLong: true)
        #expect(waits.isWaitingLong)
        clock.withLock { $0 += LockWaits.staleNanoseconds - 1 }
        #expect(waits.isWaitingLong)
        waits.longWaitGoesOn(becameLong: false)
        clock.withLock { $0 += LockWaits.staleNanoseconds }
        #expect(!waits.isWaitingLong, "an end went untold: the handler is called no more")
        waits.longWaitGoesOn(becameLong: true)
        waits.longWaitEnded()
        #expect(!waits.isWaitingLong, "the lock was granted, or the statement failed as busy")
    }

    @Test func listenersHearOnceWhenAWaitBecomesLong() {
        let clock = Locked<UInt64>(1_000)
        let waits = LockWaits(now: { clock.withLock { $0 } })
        let heard = Locked<[String]>([])
        let first = waits.whenAWaitIsLong { heard.withLock { $0.append("first") } }
        let second = waits.whenAWaitIsLong { heard.withLock { $0.append("second") } }
        #expect(first != nil && second != nil)
        waits.forget(second!)
        waits.longWaitGoesOn(becameLong: true)
        waits.longWaitGoesOn(becameLong: false)
        #expect(heard.withLock { $0 } == ["first"], "once, and not the one called off")
        #expect(waits.whenAWaitIsLong { heard.withLock { $0.append("late") } } == nil, "a long wait is under way: known at once")
        waits.longWaitEnded()
        let third = waits.whenAWaitIsLong { heard.withLock { $0.append("third") } }
        #expect(third != nil)
        waits.longWaitGoesOn(becameLong: true)
        #expect(heard.withLock { $0 } == ["first", "third"])
    }

    /// The handler as the writer's connection has it: another connection's lock held for
    /// a moment is waited for without a word; held longer, the wait becomes long, and is
    /// over once the statement returns.
    @Test func theWritersHandlerTellsOfLongWaitsOnly() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("lockwaits-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/db.sqlite"
        let waits = LockWaits()
        let writer = try Database(path: path)
        try writer.execute("PRAGMA journal_mode = WAL")
        writer.reportLockWaits(to: waits)
        let other = try Database(path: path)
        let heard = Locked(0)
        _ = waits.whenAWaitIsLong { heard.withLock { $0 += 1 } }
        try other.execute("BEGIN IMMEDIATE")
        let release = DispatchSemaphore(value: 0)
        Thread {
            _ = release.wait(timeout: .now() + 0.05)
            try? other.execute("ROLLBACK")
        }.start()
        try writer.inTransaction(.immediate) {}
        #expect(heard.withLock { $0 } == 0, "a moment's lock is no long wait")
        try other.execute("BEGIN IMMEDIATE")
        Thread {
            for _ in 0..<1000 where !waits.isWaitingLong { usleep(10_000) }
            try? other.execute("ROLLBACK")
        }.start()
        try writer.inTransaction(.immediate) {}
        #expect(heard.withLock { $0 } == 1, "a long wait was told")
        #expect(!waits.isWaitingLong, "and is over once the transaction began")
        writer.close()
        other.close()
    }
}
