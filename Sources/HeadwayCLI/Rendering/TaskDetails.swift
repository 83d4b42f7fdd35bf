import HeadwayCore

/// The text of `headway show` and `headway history`: pure functions from the server's
/// JSON to lines (no newlines), texts sanitized for the terminal.
public enum TaskDetails {
    /// The fields of the `Task` schema in the order `openapi.yaml` lists them; fields a
    /// newer server adds follow, sorted by name.
    static let fieldOrder = [
        "id", "name", "label", "parent_id", "weight", "state", "mode", "completed", "total", "unit", "fraction",
        "rate", "eta_seconds", "stalled", "stall_reason", "stalled_since", "stall_timeout_seconds",
        "progress_timeout_seconds", "cancel_requested", "seq", "created_at", "updated_at", "last_progress_at",
        "finished_at", "message", "metadata",
    ]

    /// Every field of a task object as aligned `name: value` lines; `-` for null. The
    /// rate, fraction and ETA are read as people read them (`189.5 images/s`, `25%`,
    /// `~4 s`), the exact numbers staying in `--json`.
    public static func fieldLines(_ task: JSONValue) -> [String] {
        guard case .object(let fields) = task else { return [] }
        let names = fieldOrder.filter { fields[$0] != nil } + fields.keys.filter { !fieldOrder.contains($0) }.sorted()
        // A newer server's field names are shown as they come, made safe for the terminal.
        let width = (names.map { DisplayWidth.of(DisplayWidth.sanitize($0)) }.max() ?? 0) + 1
        let view = TaskView(json: task)
        return names.map { name in
            let json = fields[name] ?? .null
            return DisplayWidth.pad(DisplayWidth.sanitize(name) + ":", to: width) + " "
                + (view.flatMap { readable(name, json, of: $0) } ?? value(json))
        }
    }

    /// The human reading of the rate, fraction or ETA field; nil for the others and nulls.
    static func readable(_ name: String, _ json: JSONValue, of task: TaskView) -> String? {
        switch name {
        case "rate":
            guard let rate = task.rate else { return nil }
            // A parent without a total reports its rate as fraction per second.
            return task.total == nil ? Formatting.rate(rate * 100, unit: "%") : Formatting.rate(rate, unit: task.unit)
        case "fraction":
            switch json {
            case .number(let fraction) where fraction.isFinite: return Formatting.fixed(fraction * 100, decimals: 1) + "%"
            case .integer(let fraction): return Formatting.fixed(Double(fraction) * 100, decimals: 1) + "%"
            default: return nil
            }
        case "eta_seconds":
            return Formatting.eta(task.etaSeconds)
        default:
            return nil
        }
    }

    /// A JSON value as one line: strings without quotes, whole numbers without `.0`,
    /// null as `-`, objects and arrays as compact JSON.
    public static func value(_ json: JSONValue) -> String {
        switch json {
        case .null: "-"
        case .bool(let value): value ? "true" : "false"
        case .integer(let value): String(value)
        case .number(let value): number(value)
        case .string(let text): DisplayWidth.sanitize(text)
        case .array, .object: DisplayWidth.sanitize(json.canonicalText)
        }
    }

    static func number(_ value: Double) -> String {
        if value.isFinite, value.rounded() == value, abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// The children of a task as an aligned table: id, name, state, weight, progress
    /// (percent of a quantified child, else `-`).
    public static func childLines(_ children: [TaskView]) -> [String] {
        let rows: [[String]] = [["ID", "NAME", "STATE", "WEIGHT", "PROGRESS"]] + children.map { child in
            let progress = child.isQuantified
                ? Formatting.percentText(child.displayFraction ?? 0, complete: child.state == .succeeded)
                    .trimmingPrefix(" ")
                : "-"
            return [child.id, DisplayWidth.truncate(child.name, to: 40), child.state.text,
                    child.weight.map(number) ?? "-", String(progress)]
        }
        let widths = (0..<5).map { column in rows.map { DisplayWidth.of($0[column]) }.max() ?? 0 }
        return rows.map { row in
            var line = "  " + zip(row, widths).map { DisplayWidth.pad($0, to: $1) }.joined(separator: "  ")
            while line.last == " " { line.removeLast() }
            return line
        }
    }

    /// The points of a `History` object as lines: time, `completed/total` (or `completed`
    /// without a total), and the fraction as a percent with one decimal (`-` when null).
    public static func historyLines(_ history: JSONValue) -> [String] {
        let rows = points(history).map { point -> [String] in
            var count = point.completed.map(Formatting.count) ?? "-"
            if let total = point.total { count += "/" + Formatting.count(total) }
            let fraction = point.fraction.map { Formatting.fixed($0 * 100, decimals: 1) + "%" } ?? "-"
            return [point.time, count, fraction]
        }
        let countWidth = rows.map { DisplayWidth.of($0[1]) }.max() ?? 0
        let fractionWidth = rows.map { DisplayWidth.of($0[2]) }.max() ?? 0
        return rows.map { row in
            row[0] + "  " + String(repeating: " ", count: countWidth - DisplayWidth.of(row[1])) + row[1] + "  "
                + String(repeating: " ", count: fractionWidth - DisplayWidth.of(row[2])) + row[2]
        }
    }

    /// One point of a history curve.
    struct Point {
        var time: String
        var completed: Int64?
        var total: Int64?
        var fraction: Double?
    }

    static func points(_ history: JSONValue) -> [Point] {
        guard case .object(let fields) = history, case .array(let items)? = fields["points"] else { return [] }
        return items.compactMap { item in
            guard case .object(let point) = item else { return nil }
            func integer(_ key: String) -> Int64? {
                switch point[key] {
                case .integer(let value)?: value
                case .number(let value)? where value.isFinite && abs(value) < 9e15: Int64(value)
                default: nil
                }
            }
            var fraction: Double? = nil
            switch point["fraction"] {
            case .number(let value)? where value.isFinite: fraction = value
            case .integer(let value)?: fraction = Double(value)
            default: break
            }
            var time = "-"
            if case .string(let text)? = point["t"] { time = DisplayWidth.sanitize(text) }
            return Point(time: time, completed: integer("completed"), total: integer("total"), fraction: fraction)
        }
    }

    /// How many points a `History` object has.
    public static func pointCount(_ history: JSONValue) -> Int { points(history).count }
}
