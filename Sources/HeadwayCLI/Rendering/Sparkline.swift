import HeadwayCore

/// A one-line chart of recent values, for `headway show`.
public enum Sparkline {
    static let levels: [Character] = ["▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]

    /// The last `maxWidth` of `values`, one block each: `▁▂▃▅▇`. Scaled to `range` when
    /// given (e.g. `0...1` for fractions), else between the smallest and largest value
    /// shown (all equal → lowest block). Non-finite values are skipped. Empty for no values.
    public static func render(_ values: [Double], maxWidth: Int, range: ClosedRange<Double>? = nil) -> String {
        let shown = values.filter(\.isFinite).suffix(max(0, maxWidth))
        guard let low = range?.lowerBound ?? shown.min(), let high = range?.upperBound ?? shown.max() else { return "" }
        // Halved, the difference of two finite doubles is finite.
        let span = high / 2 - low / 2
        return String(shown.map { value -> Character in
            guard span > 0 else { return levels[0] }
            let position = (min(high, max(low, value)) / 2 - low / 2) / span
            guard position.isFinite else { return levels[0] }
            return levels[min(levels.count - 1, max(0, Int((position * Double(levels.count - 1)).rounded())))]
        })
    }

    /// The sparkline of a `History` object's points: fractions on 0…1 when every point
    /// has one, else `completed` scaled between its extremes.
    public static func render(history: JSONValue, maxWidth: Int) -> String {
        guard case .object(let fields) = history, case .array(let points)? = fields["points"] else { return "" }
        var fractions: [Double] = [], completed: [Double] = []
        var allFractions = true
        for case .object(let point) in points {
            switch point["fraction"] {
            case .number(let value)?: fractions.append(value)
            case .integer(let value)?: fractions.append(Double(value))
            default: allFractions = false
            }
            switch point["completed"] {
            case .integer(let value)?: completed.append(Double(value))
            case .number(let value)?: completed.append(value)
            default: break
            }
        }
        if allFractions && !fractions.isEmpty { return render(fractions, maxWidth: maxWidth, range: 0...1) }
        return render(completed, maxWidth: maxWidth)
    }
}
