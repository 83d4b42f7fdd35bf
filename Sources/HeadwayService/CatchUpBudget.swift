import Lifecycle
import HeadwayCore

/// The global bound on catch-up bytes held in memory (`--max-catch-up-bytes`). A catch-up
/// is written to its stream *shared* and does not count against the stream's own cap, so
/// without this bound memory would grow with subscribers × catch-up size.
///
/// Each catch-up read is charged once (`CatchUpCharge`), however many subscribers share it
/// (`CatchUpCache`): the charge counts while at least one stream holds it (`CatchUpHold`),
/// from just after the read until every such stream has sent its catch-up or closed.
/// A new subscriber's catch-up is read only while the charges are below the limit (checked
/// before the read, so a flood of subscribers costs no reads; charged after it, so one
/// catch-up — one per read connection at once — may pass the limit). Past it, the stream
/// gets `retry:` and ends at once: its client reconnects after the hint, by when streams
/// that read have sent theirs and those that do not have been closed by the stall timeout.
/// Ending rather than waiting keeps neither a read connection nor a place in the read
/// queue for a client that may be hostile; the refusals are logged as one count a second.
final class CatchUpBudget: Sendable {
    private struct State {
        var usedBytes = 0
        /// How many streams hold each charge.
        var holders: [ObjectIdentifier: Int] = [:]
        /// Catch-ups refused since the last log line, and when that line was written.
        var refusedSinceLine = 0
        var lastLine: EpochMilliseconds?
        /// A later line is promised for refusals not yet logged (`claimFlush`).
        var flushClaimed = false
    }

    /// The most catch-up bytes held at once (passed by at most the catch-ups being read).
    let limitBytes: Int
    /// Log lines of refusals are at least this far apart.
    static let lineIntervalMilliseconds: Int64 = 1000
    private let state = Locked(State())

    init(limitBytes: Int) {
        self.limitBytes = limitBytes
    }

    /// The bytes charged now.
    var usedBytes: Int { state.withLock { $0.usedBytes } }

    /// Whether a catch-up may be read now.
    var admits: Bool { state.withLock { $0.usedBytes < limitBytes } }

    /// Counts a catch-up refused at `now`; returns the count to log when a line is due
    /// (the first refusal, then at most one line a `lineIntervalMilliseconds`).
    func countRefusal(now: EpochMilliseconds) -> Int? {
        state.withLock { state in
            state.refusedSinceLine += 1
            if let last = state.lastLine, now - last < Self.lineIntervalMilliseconds { return nil }
            state.lastLine = now
            defer { state.refusedSinceLine = 0 }
            return state.refusedSinceLine
        }
    }

    /// Whether the caller should write, after `lineIntervalMilliseconds`, a line for the
    /// refusals counted but not logged (`flush`): true once until that flush, so the last
    /// refusals of a burst are logged too, without a line per refusal.
    func claimFlush() -> Bool {
        state.withLock { state in
            guard state.refusedSinceLine > 0, !state.flushClaimed else { return false }
            state.flushClaimed = true
            return true
        }
    }

    /// The refusals counted since the last line, if any, now logged at `now`.
    func flush(now: EpochMilliseconds) -> Int? {
        state.withLock { state in
            state.flushClaimed = false
            guard state.refusedSinceLine > 0 else { return nil }
            state.lastLine = now
            defer { state.refusedSinceLine = 0 }
            return state.refusedSinceLine
        }
    }

    /// Charges `charge` for one more stream (only the first holder adds its bytes); the
    /// charge lasts until the hold is let go.
    func hold(_ charge: CatchUpCharge) -> CatchUpHold {
        state.withLock { state in
            let holders = state.holders[ObjectIdentifier(charge), default: 0]
            if holders == 0 { state.usedBytes += charge.bytes }
            state.holders[ObjectIdentifier(charge)] = holders + 1
        }
        return CatchUpHold(budget: self, charge: charge)
    }

    /// One stream no longer holds `charge` (the last gives its bytes back).
    fileprivate func release(_ charge: CatchUpCharge) {
        state.withLock { state in
            let holders = state.holders[ObjectIdentifier(charge), default: 1] - 1
            if holders > 0 {
                state.holders[ObjectIdentifier(charge)] = holders
            } else {
                state.holders[ObjectIdentifier(charge)] = nil
                state.usedBytes -= charge.bytes
            }
        }
    }
}

/// One catch-up read, as the budget counts it: its bytes, and an identity shared by every
/// subscriber that is sent the same catch-up (it travels with the `CatchUp` in the cache).
final class CatchUpCharge: Sendable {
    let bytes: Int

    init(bytes: Int) {
        self.bytes = bytes
    }

    /// The charge of `frames`.
    convenience init(_ frames: [[UInt8]]) {
        self.init(bytes: frames.reduce(0) { $0 + $1.count })
    }
}

/// One stream's share of a charge: the charge counts until every hold on it is gone (a
/// hold lets go when it is dropped — the subscriber's catch-up has been sent, the
/// subscriber is gone, or the catch-up never reached it).
final class CatchUpHold: Sendable {
    private let budget: CatchUpBudget
    private let charge: CatchUpCharge

    fileprivate init(budget: CatchUpBudget, charge: CatchUpCharge) {
        self.budget = budget
        self.charge = charge
    }

    deinit { budget.release(charge) }
}
