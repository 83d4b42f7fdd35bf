import Dispatch
import Glibc

/// SQLite's own busy timeout (`sqlite3_busy_timeout`) as a busy handler of Swift's that
/// also tells a `LockWaits` of each long wait. Used on the connection's thread only.
final class ReportingBusyHandler {
    let waits: LockWaits
    let timeoutNanoseconds: UInt64
    /// When the current wait began, and whether it is long.
    private var started: UInt64 = 0
    private var isLong = false

    init(waits: LockWaits, timeoutMilliseconds: Int32) {
        self.waits = waits
        timeoutNanoseconds = UInt64(timeoutMilliseconds) * 1_000_000
    }

    /// SQLite's sleeps between tries (`sqliteDefaultBusyCallback`), in milliseconds; then 100 each.
    private static let delays: [UInt64] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100]

    /// Whether SQLite should try again (after a sleep), the `count`-th call of one wait.
    func shouldRetry(count: Int32) -> Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        if count == 0 {
            started = now
            isLong = false
        }
        let waited = now &- started
        guard waited < timeoutNanoseconds else {
            statementReturned()
            return false
        }
        if waited >= LockWaits.longWaitNanoseconds {
            waits.longWaitGoesOn(becameLong: !isLong)
            isLong = true
        }
        let delay = Self.delays[min(Int(count), Self.delays.count - 1)] * 1_000_000
        usleep(UInt32(min(delay, timeoutNanoseconds - waited) / 1000))
        return true
    }

    /// The statement that waited has returned (holding its lock, or failed): its wait is over.
    func statementReturned() {
        guard isLong else { return }
        isLong = false
        waits.longWaitEnded()
    }

    /// The handler as SQLite calls it, with the handler lent as its context.
    static let callback: @convention(c) (UnsafeMutableRawPointer?, Int32) -> Int32 = { context, count in
        guard let context else { return 0 }
        return Unmanaged<ReportingBusyHandler>.fromOpaque(context).takeUnretainedValue().shouldRetry(count: count) ? 1 : 0
    }
}
