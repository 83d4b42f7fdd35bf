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

    /// The whole percent, rounded down, capped at 99 unless `complete`: a bar never
    /// claims more than was done. `fraction` is clamped to 0…1.
    public static func percent(_ fraction: Double, complete: Bool) -> Int {
        if complete { return 100 }
        let clamped = fraction.isFinite ? min(1, max(0, fraction)) : 0
        return min(99, Int((clamped * 100).rounded(.down)))
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
    public static func barWithPercent(_ fraction: Double, cells: Int, complete: Bool) -> String {
        bar(fraction, cells: cells, complete: complete) + percentText(fraction, complete: complete)
    }

    /// The percent right-aligned in 4 cells: ` 64%`, `100%`.
    public static func percentText(_ fraction: Double, complete: Bool) -> String {
        let text = "\(percent(fraction, complete: complete))%"
        return String(repeating: " ", count: max(0, 4 - text.count)) + text
    }
}
