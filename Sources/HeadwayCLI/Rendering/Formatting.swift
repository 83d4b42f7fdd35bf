import Foundation
import HeadwayCore

/// Plain-text formatting of the numbers a task carries. Pure functions; no locale (the
/// separator is always `,`, the decimal point `.`), so output is the same everywhere.
public enum Formatting {
    /// `1200` → `1,200`.
    public static func count(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return value < 0 ? "-" + out : out
    }

    /// `value` with exactly `decimals` digits after the point, thousands separated.
    static func fixed(_ value: Double, decimals: Int) -> String {
        var scale: Double = 1
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (value * scale).rounded()
        guard scaled.isFinite, abs(scaled) < 9e18 else { return "∞" }
        let units = Int64(scaled)
        let whole = count(units / Int64(scale))
        guard decimals > 0 else { return whole }
        var fraction = String((units % Int64(scale)).magnitude)
        while fraction.count < decimals { fraction = "0" + fraction }
        return whole + "." + fraction
    }

    /// A rate: `12.3 files/s`, `1,250 files/s`, `0.25/s` (no unit). Three significant
    /// digits at most below 100, whole numbers above; `<0.01` for a tiny positive rate.
    /// nil for a negative or non-finite value.
    public static func rate(_ perSecond: Double, unit: String?) -> String? {
        guard perSecond.isFinite, perSecond >= 0 else { return nil }
        let number: String
        if perSecond >= 99.95 { number = fixed(perSecond, decimals: 0) }
        else if perSecond >= 0.995 { number = fixed(perSecond, decimals: 1) }
        else if perSecond >= 0.005 || perSecond == 0 { number = fixed(perSecond, decimals: 2) }
        else { number = "<0.01" }
        if let unit, !unit.isEmpty { return number + " " + unit + "/s" }
        return number + "/s"
    }

    /// A human estimate of the time left: `~35 s`, `~4 min`, `~2 h 5 min`, `~3 d 4 h`;
    /// nil when the server gave none (never a made-up figure).
    public static func eta(_ seconds: Double?) -> String? {
        guard let seconds, seconds.isFinite, seconds >= 0 else { return nil }
        let whole = seconds.rounded()
        if whole < 60 { return "~\(max(1, Int(whole))) s" }
        return "~" + duration(minutes: Int64(min(seconds / 60, 1e15).rounded()))
    }

    /// How long ago, rounded down: `42 s`, `3 min`, `2 h 5 min`, `3 d 4 h`. Negative → `0 s`.
    public static func age(milliseconds: Int64) -> String {
        let seconds = max(0, milliseconds / 1000)
        if seconds < 60 { return "\(seconds) s" }
        return duration(minutes: seconds / 60)
    }

    private static func duration(minutes: Int64) -> String {
        if minutes < 60 { return "\(minutes) min" }
        let hours = minutes / 60
        if hours < 48 {
            let rest = minutes % 60
            return rest == 0 ? "\(hours) h" : "\(hours) h \(rest) min"
        }
        let days = count(hours / 24), rest = hours % 24
        return rest == 0 ? "\(days) d" : "\(days) d \(rest) h"
    }

    /// The whole percent of `fraction` (clamped to 0…1), rounded down: 100 only when it
    /// is exactly 1, so a bar never claims more than was done. A product a hair under a
    /// whole number (0.29 × 100 = 28.999…) counts as that number.
    public static func percent(_ fraction: Double) -> Int {
        let clamped = fraction.isFinite ? min(1, max(0, fraction)) : 0
        if clamped == 1 { return 100 }
        return min(99, Int((clamped * 100 + 1e-9).rounded(.down)))
    }

    private static let eighths = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"]

    /// A bar `cells` wide inside `▕…▏` with eighth-block resolution, rounded down; full
    /// only when `complete`. `bar(0.64, cells: 10, complete: false)` → `▕██████▍   ▏`.
    public static func bar(_ fraction: Double, cells: Int, complete: Bool) -> String {
        let cells = max(0, cells)
        let clamped = fraction.isFinite ? min(1, max(0, fraction)) : 0
        var filled = complete ? cells * 8 : Int((clamped * Double(cells * 8)).rounded(.down))
        if !complete { filled = min(filled, max(0, cells * 8 - 1)) }
        let full = filled / 8, part = filled % 8
        var out = "▕" + String(repeating: "█", count: full) + eighths[part]
        out += String(repeating: " ", count: cells - full - (part > 0 ? 1 : 0))
        return out + "▏"
    }

    /// `bar` followed by the percent right-aligned in 4 cells: `▕██████▍   ▏ 64%`.
    public static func barWithPercent(_ fraction: Double, percent: Int, cells: Int) -> String {
        bar(fraction, cells: cells, complete: percent == 100) + percentText(percent)
    }

    /// The percent right-aligned in 4 cells: ` 64%`, `100%`.
    public static func percentText(_ percent: Int) -> String {
        let text = "\(percent)%"
        return String(repeating: " ", count: max(0, 4 - text.count)) + text
    }

    /// How long a task has run or ran, in the words of `age`; nil without both times.
    public static func duration(from start: EpochMilliseconds?, to end: EpochMilliseconds?) -> String? {
        guard let start, let end else { return nil }
        return age(milliseconds: end - start)
    }

    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    private static func parts(_ time: EpochMilliseconds, _ timeZone: TimeZone) -> DateComponents {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar.dateComponents([.year, .month, .day, .hour, .minute, .second],
                                       from: Date(timeIntervalSince1970: Double(time) / 1000))
    }

    private static func two(_ value: Int?) -> String {
        let value = value ?? 0
        return value < 10 ? "0\(value)" : "\(value)"
    }

    /// A time of day in `timeZone`: `14:05` on the day of `now`, else `Dec 3 14:05`.
    public static func clock(_ time: EpochMilliseconds, now: EpochMilliseconds, timeZone: TimeZone) -> String {
        let at = parts(time, timeZone), today = parts(now, timeZone)
        let hour = two(at.hour) + ":" + two(at.minute)
        if at.year == today.year && at.month == today.month && at.day == today.day { return hour }
        let month = monthNames[max(0, min(11, (at.month ?? 1) - 1))]
        return at.year == today.year ? "\(month) \(at.day ?? 0) \(hour)" : "\(at.year ?? 0) \(month) \(at.day ?? 0) \(hour)"
    }

    /// A moment in `timeZone`, to the second, with its offset from UTC (`UTC` when none):
    /// `2026-12-05 14:05:09 +09:00`. An offset rather than a zone's abbreviation, which
    /// Foundation spells `GMT+9` on Linux.
    public static func localTime(_ time: EpochMilliseconds, timeZone: TimeZone) -> String {
        let at = parts(time, timeZone)
        let offset = timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(time) / 1000)) / 60
        let zone = offset == 0 ? "UTC" : (offset < 0 ? "-" : "+") + two(abs(offset) / 60) + ":" + two(abs(offset) % 60)
        return "\(at.year ?? 0)-\(two(at.month))-\(two(at.day)) \(two(at.hour)):\(two(at.minute)):\(two(at.second)) \(zone)"
    }

    /// How long ago `time` was, from `now`: `3 min ago`, `42 s ago`; `in 5 s` for a time
    /// ahead of `now` (a clock that differs from the server's).
    public static func relative(_ time: EpochMilliseconds, now: EpochMilliseconds) -> String {
        now >= time ? age(milliseconds: now - time) + " ago" : "in " + age(milliseconds: time - now)
    }
}
