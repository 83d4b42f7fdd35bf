import HeadwayCore

/// When the broker thread must act without being told: the next heartbeat, the end of a
/// pacing pause with events waiting, or the next held task coming of age. Pure: monotonic
/// times are nanoseconds and wall times milliseconds, both given by the caller.
struct BrokerSchedule: Equatable {
    /// Time between heartbeats, in nanoseconds.
    let heartbeatInterval: UInt64
    /// When the next heartbeat is due.
    private(set) var nextHeartbeat: UInt64
    /// The shortest sleep, so that a time just passed is not waited for in a busy loop.
    static let minimumDelaySeconds = 0.001

    /// A schedule whose first heartbeat is one interval after `now`.
    init(heartbeatSeconds: Double, now: UInt64) {
        heartbeatInterval = UInt64(max(0, heartbeatSeconds) * 1e9)
        nextHeartbeat = now + heartbeatInterval
    }

    /// Whether a heartbeat is due at `now`; when it is, the next is one interval later.
    mutating func heartbeatIsDue(now: UInt64) -> Bool {
        guard now >= nextHeartbeat else { return false }
        nextHeartbeat = now + heartbeatInterval
        return true
    }

    /// How long the thread may sleep, in seconds, at monotonic `now` and wall time
    /// `wallNow`: until the next heartbeat, the end of a pause (`pauseEnd`, when events wait
    /// for it) or the earliest release of a held task (`nextRelease`), whichever is first,
    /// and at least `minimumDelaySeconds`.
    func delay(now: UInt64, pauseEnd: UInt64?, wallNow: EpochMilliseconds, nextRelease: EpochMilliseconds?) -> Double {
        var seconds = Self.seconds(from: now, to: nextHeartbeat)
        if let pauseEnd { seconds = min(seconds, Self.seconds(from: now, to: pauseEnd)) }
        if let nextRelease { seconds = min(seconds, Double(nextRelease - wallNow) / 1000) }
        return max(Self.minimumDelaySeconds, seconds)
    }

    /// Seconds from one monotonic time to another (negative when `end` is past).
    private static func seconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end) / 1e9 - Double(start) / 1e9
    }
}
