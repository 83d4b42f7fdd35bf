import Foundation

/// Milliseconds since the Unix epoch, the unit every stored time uses.
public typealias EpochMilliseconds = Int64

/// The source of "now" for the domain rules, injected so tests never sleep.
public protocol WallClock: Sendable {
    /// The current time in milliseconds since the Unix epoch.
    func now() -> EpochMilliseconds
}

/// The real clock.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> EpochMilliseconds {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
}

/// A clock that moves only when told to; for tests.
public final class ManualClock: WallClock, @unchecked Sendable {
    private let lock = NSLock()
    private var current: EpochMilliseconds

    public init(_ start: EpochMilliseconds = 1_800_000_000_000) { current = start }

    public func now() -> EpochMilliseconds { lock.withLock { current } }

    /// Moves the clock forward by `milliseconds`.
    public func advance(by milliseconds: Int64) { lock.withLock { current += milliseconds } }
}

/// RFC 3339 timestamps in UTC with milliseconds, e.g. `2026-11-30T03:38:28.123Z`.
public enum Timestamp {
    /// Formats `milliseconds` since the epoch (days from civil, after Howard Hinnant).
    public static func rfc3339(_ milliseconds: EpochMilliseconds) -> String {
        let (days, dayMilliseconds) = milliseconds.floorDivided(by: 86_400_000)
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let hour = dayMilliseconds / 3_600_000
        let minute = dayMilliseconds / 60_000 % 60
        let second = dayMilliseconds / 1000 % 60
        let millisecond = dayMilliseconds % 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(millisecond, 3))Z"
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}

extension Int64 {
    /// Quotient rounded toward negative infinity, and the non-negative remainder.
    fileprivate func floorDivided(by divisor: Int64) -> (Int64, Int64) {
        let quotient = self / divisor
        let remainder = self % divisor
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}
