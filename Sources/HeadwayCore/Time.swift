import Foundation
import Synchronization

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
public final class ManualClock: WallClock {
    private let current: Atomic<EpochMilliseconds>

    public init(_ start: EpochMilliseconds = 1_800_000_000_000) { current = Atomic(start) }

    public func now() -> EpochMilliseconds { current.load(ordering: .acquiring) }

    /// Moves the clock forward by `milliseconds`.
    public func advance(by milliseconds: Int64) { current.add(milliseconds, ordering: .acquiringAndReleasing) }
}

/// RFC 3339 timestamps in UTC with milliseconds, e.g. `2026-11-30T03:38:28.123Z`.
public enum Timestamp {
    /// The times RFC 3339 can write (years 0000 to 9999).
    public static let writableRange: ClosedRange<EpochMilliseconds> = -62_167_219_200_000...253_402_300_799_999

    /// Formats `milliseconds` since the epoch (days from civil, after Howard Hinnant).
    /// Always RFC 3339 with a 4-digit year: a time beyond years 0–9999 (none the daemon
    /// makes; a row written by hand) is written as the nearest one that can be.
    public static func rfc3339(_ milliseconds: EpochMilliseconds) -> String {
        String(unsafeUninitializedCapacity: length) { buffer in
            write(milliseconds, into: buffer)
            return length
        }
    }

    /// The length of every timestamp `rfc3339` writes.
    public static let length = 24

    /// Writes the timestamp of `rfc3339` into the first `length` bytes of `buffer`, digit
    /// by digit (it runs several times per task reply).
    public static func write(_ milliseconds: EpochMilliseconds, into buffer: UnsafeMutableBufferPointer<UInt8>) {
        let milliseconds = min(max(milliseconds, writableRange.lowerBound), writableRange.upperBound)
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
        // Two digits at a time from a table of the pairs 00…99: a time is written several
        // times per task reply, and a division per digit was most of its cost.
        DecimalPairs.table.withUTF8Buffer { pairs in
            func put2(_ value: Int64, at offset: Int) {
                let index = Int(value) &* 2
                buffer[offset] = pairs[index]
                buffer[offset + 1] = pairs[index + 1]
            }
            put2(year / 100, at: 0)
            put2(year % 100, at: 2)
            put2(month, at: 5)
            put2(day, at: 8)
            put2(hour, at: 11)
            put2(minute, at: 14)
            put2(second, at: 17)
            buffer[20] = UInt8(ascii: "0") + UInt8(millisecond / 100)
            put2(millisecond % 100, at: 21)
        }
        (buffer[4], buffer[7], buffer[10]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "T"))
        (buffer[13], buffer[16], buffer[19]) = (UInt8(ascii: ":"), UInt8(ascii: ":"), UInt8(ascii: "."))
        buffer[23] = UInt8(ascii: "Z")
    }
}

/// The decimal digits of 0 to 99, two bytes each ("00", "01", … "99").
enum DecimalPairs {
    static let table: StaticString = """
        0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
        5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899
        """
}

extension Int64 {
    /// Quotient rounded toward negative infinity, and the non-negative remainder.
    fileprivate func floorDivided(by divisor: Int64) -> (Int64, Int64) {
        let quotient = self / divisor
        let remainder = self % divisor
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}

/// A duration as people write it on a command line: a plain decimal number of seconds,
/// optionally followed by s, m, h or d (`90`, `1.5h`, `7d`). No sign, exponent,
/// hexadecimal, nan or inf.
public enum DurationText {
    /// The seconds `text` says, or nil when it is not such a duration.
    public static func seconds(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var number = Substring(text)
        var scale = 1.0
        if let last = number.last, let unit = units[last] {
            scale = unit
            number = number.dropLast()
        }
        let parts = number.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { ("0"..."9").contains($0) } }),
              let value = Double(number) else { return nil }
        return value * scale
    }
}
