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
