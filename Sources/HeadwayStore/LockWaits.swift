import CSQLite
import Foundation
import Lifecycle
import Synchronization

/// Whether a connection has waited long for a lock another connection holds, and waits
/// still (on SQLite: another process's write transaction, a `sqlite3` shell in `BEGIN
/// IMMEDIATE` say), as its busy handler reports it (`Database.reportLockWaits(to:)`); and
/// a word, at once, to whoever asked to hear when a wait becomes long. What the readiness
/// probe asks of the writer: a write that waits for such a lock waits up to
/// `Database.busyTimeoutMilliseconds`, and a probe need not wait with it to know that
/// nothing can be written now. A wait is long once it has lasted `longWaitNanoseconds`:
/// a lock held for a moment (a token made by `headwayd token create`, a backup's step)
/// is no reason to say the database takes no writes.
///
/// SQLite tells a busy handler that a wait goes on (at least every 100 ms) but not always
/// that it ended: a long wait counts as under way while the handler was last called less
/// than `staleNanoseconds` ago, so a wait whose end went untold is forgotten by itself.
public final class LockWaits: Sendable {
    /// A wait is long from this on.
    public static let longWaitNanoseconds: UInt64 = 200_000_000
    /// A wait whose busy handler was last called longer ago than this is over.
    public static let staleNanoseconds: UInt64 = 250_000_000

    /// Monotonic nanoseconds of the handler's last call in a long wait (0: none since the
    /// last long wait ended).
    private let lastCall = Atomic<UInt64>(0)
    private struct Listeners {
        var byID: [Int: @Sendable () -> Void] = [:]
        var nextID = 0
    }
    /// Shared by the readiness probes' threads (listen, forget) and the waiting connection's thread (tells).
    private let listeners = Locked(Listeners())
    private let now: @Sendable () -> UInt64

    /// `now`: monotonic nanoseconds (injected by tests).
    public init(now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }) {
        self.now = now
    }

    /// Whether a long wait is under way.
    public var isWaitingLong: Bool {
        let last = lastCall.load(ordering: .acquiring)
        return last != 0 && now() &- last < Self.staleNanoseconds
    }

    /// Calls `listener` once, on the waiting connection's thread, when the next wait
    /// becomes long; returns what `forget` takes to call it off. Returns nil, keeping
    /// nothing, when a long wait is under way already (the caller knows at once).
    public func whenAWaitIsLong(_ listener: @escaping @Sendable () -> Void) -> Int? {
        listeners.withLock { listeners in
            guard !isWaitingLong else { return nil }
            listeners.nextID += 1
            listeners.byID[listeners.nextID] = listener
            return listeners.nextID
        }
    }

    /// Calls off a listener that has not been called (nothing if it has).
    public func forget(_ id: Int) {
        _ = listeners.withLock { $0.byID.removeValue(forKey: id) }
    }

    /// The busy handler was called in a wait that is long (`becameLong`: for the first time).
    func longWaitGoesOn(becameLong: Bool) {
        lastCall.store(max(now(), 1), ordering: .releasing)
        guard becameLong else { return }
        let called = listeners.withLock { listeners in
            defer { listeners.byID = [:] }
            return Array(listeners.byID.values)
        }
        called.forEach { $0() }
    }

    /// A long wait is over: the lock was granted, or the handler gave up (the statement
    /// fails as busy).
    func longWaitEnded() { lastCall.store(0, ordering: .releasing) }
}

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
