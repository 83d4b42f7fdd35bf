import Dispatch
import Synchronization

/// How a service's thread sleeps until there is work: producers change shared state under
/// a `Locked`, then `ring()`; the thread waits in `wait(until:)`, then looks at the state.
///
/// Rings while the thread is awake collapse into one (the bell stays rung until the next
/// `wait`), so a burst of producers costs one wake-up, and none is lost: a ring that comes
/// after the thread woke but before it looked is seen by its look or by its next wait.
public final class Doorbell: Sendable {
    private let rung = Atomic<Bool>(false)
    private let semaphore = DispatchSemaphore(value: 0)

    public init() {}

    /// Wakes the waiting thread, or makes its next `wait` return at once.
    public func ring() {
        if !rung.exchange(true, ordering: .acquiringAndReleasing) { semaphore.signal() }
    }

    /// Sleeps until rung or until `deadline`; returns whether it was rung. Called by one
    /// thread at a time (the service's own).
    @discardableResult
    public func wait(until deadline: DispatchTime = .distantFuture) -> Bool {
        guard semaphore.wait(timeout: deadline) == .success else { return false }
        rung.store(false, ordering: .releasing)
        return true
    }
}
