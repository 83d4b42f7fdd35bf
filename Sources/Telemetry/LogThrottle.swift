import Lifecycle

/// Lets a line that may repeat many times a second through at most once per interval,
/// counting those held back in between.
package final class LogThrottle: Sendable {
    private let interval: UInt64
    private let state = Locked<(lastLogged: UInt64?, heldBack: Int)>((nil, 0))

    package init(nanoseconds interval: UInt64) { self.interval = interval }

    /// Whether to log at `now` (monotonic nanoseconds): nil to hold the line back, else how
    /// many were held back since the last one logged.
    package func admit(now: UInt64) -> Int? {
        state.withLock { state in
            if let last = state.lastLogged, now &- last < interval {
                state.heldBack += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.heldBack
        }
    }
}
