import Foundation
import HeadwayCore

/// The text of `headway show` and `headway history`: pure functions from the server's
/// JSON to lines (no newlines), texts sanitized for the terminal.
public enum TaskDetails {
    /// The fields `fieldLines` reads into its labelled lines; any other field a server
    /// sends follows them under its own name.
    static let knownFields: Set<String> = [
        "id", "name", "label", "parent_id", "weight", "state", "mode", "completed", "total", "unit", "fraction",
        "rate", "eta_seconds", "stalled", "stall_reason", "stalled_since", "stall_timeout_seconds",
        "progress_timeout_seconds", "cancel_requested", "seq", "created_at", "updated_at", "last_progress_at",
        "last_signal_at", "finished_at", "message", "metadata", "children", "attention", "last_output",
        "expected_seconds", "deadline", "min_seconds", "overdue", "overdue_since", "too_quick",
    ]

    /// A task as people read it: labelled lines (`State:`, `Progress:`, `Started:`…),
    /// times in `timeZone` with their age (`2026-12-05 14:05:09 KST (3 min ago)`),
    /// durations and percents in words; fields a newer server adds follow under their
    /// own names. The exact values stay in `--json`.
    public static func fieldLines(_ task: JSONValue, now: EpochMilliseconds, timeZone: TimeZone = .current) -> [String] {
        guard case .object(let fields) = task, let view = TaskView(json: task) else { return [] }
        func moment(_ time: EpochMilliseconds?) -> String? {
            time.map { Formatting.localTime($0, timeZone: timeZone) + " (" + Formatting.relative($0, now: now) + ")" }
        }
        func seconds(_ name: String) -> String? {
            guard let value = fields[name] else { return nil }
            switch value {
            case .integer(let number): return Formatting.age(milliseconds: number * 1000)
            case .number(let number) where number.isFinite: return Formatting.age(milliseconds: Int64(number * 1000))
            case .null: return "off"
            default: return Self.value(value)
            }
        }
        var rows: [(String, String?)] = []
        rows.append(("Name", view.name))
        rows.append(("ID", view.id))
        var state = view.state.text
        if view.stalled && !view.state.isFinished { state += " · stalled: " + TaskTable.stallNote(view, now: now) }
        if view.cancelRequested && !view.state.isFinished { state += " · cancel requested" }
        if let note = TaskTable.runTimeNote(view, now: now) { state += " · " + note }
        rows.append(("State", state))
        if view.isQuantified {
            var progress = Formatting.barWithPercent(view.displayFraction ?? 0, percent: view.percent, cells: 20)
            if let total = view.total, !view.countsPercent {
                progress += "  " + Formatting.count(view.completed) + " of " + Formatting.count(total)
                if let unit = view.unit, !unit.isEmpty { progress += " " + unit }
            }
            if let rate = view.rate {
                let text = view.total == nil ? Formatting.rate(rate * 100, unit: "%")
                    : Formatting.rate(rate, unit: view.countsPercent ? "%" : view.unit)
                if let text { progress += "  " + text }
            }
            if let eta = Formatting.eta(view.etaSeconds) { progress += "  " + eta + " left" }
            rows.append(("Progress", progress))
        } else {
            rows.append(("Progress", "indeterminate"))
        }
        rows.append(("Label", view.label))
        if let message = view.message { rows.append(("Message", message)) }
        if let children = view.children {
            rows.append(("Children", "\(Formatting.count(children.total)): " + children.summary))
        }
        if let attention = view.attention { rows.append(("Attention", attention)) }
        if let parent = view.parentID {
            rows.append(("Parent", parent + (view.weight.map { " (weight " + number($0) + ")" } ?? "")))
        }
        rows.append(("Started", moment(view.createdAt)))
        if view.state.isFinished {
            let ran = Formatting.duration(from: view.createdAt, to: view.finishedAt).map { ", ran " + $0 } ?? ""
            rows.append(("Finished", moment(view.finishedAt).map { $0 + ran }))
        } else if let start = view.createdAt {
            rows.append((view.state == .pending ? "Waiting for" : "Running for", Formatting.age(milliseconds: now - start)))
        }
        rows.append(("Last signal", moment(view.lastSignalAt)))
        rows.append(("Last progress", moment(view.lastProgressAt)))
        rows.append(("Updated", moment(view.updatedAt)))
        if view.stalled, let since = view.stalledSince { rows.append(("Stalled since", moment(since))) }
        rows.append(("Stall timeout", seconds("stall_timeout_seconds")))
        rows.append(("Progress timeout", seconds("progress_timeout_seconds")))
        if fields["expected_seconds"].map({ $0 != .null }) == true { rows.append(("Expected run", seconds("expected_seconds"))) }
        if case .string(let text)? = fields["deadline"] { rows.append(("Deadline", moment(Timestamp.parseRFC3339(text)))) }
        if fields["min_seconds"].map({ $0 != .null }) == true { rows.append(("Shortest run", seconds("min_seconds"))) }
        if view.overdue, let since = view.overdueSince { rows.append(("Overdue since", moment(since))) }
        if let seq = fields["seq"], seq != .null { rows.append(("Sequence", Self.value(seq))) }
        if let metadata = fields["metadata"], metadata != .null { rows.append(("Metadata", Self.value(metadata))) }
        // A newer server's fields are shown as they come, made safe for the terminal.
        for name in fields.keys.filter({ !knownFields.contains($0) }).sorted() {
            rows.append((DisplayWidth.sanitize(name), Self.value(fields[name] ?? .null)))
        }
        let shown = rows.compactMap { row in row.1.map { (row.0, $0) } }
        let width = (shown.map { DisplayWidth.of($0.0) }.max() ?? 0) + 2
        return shown.map { DisplayWidth.pad($0.0 + ":", to: width) + $0.1 }
    }

    /// The output tail (`{lines: [{t, line}]}`) as lines: the local time of day and the
    /// line, oldest first, made safe for the terminal.
    public static func outputLines(_ output: JSONValue, timeZone: TimeZone = .current) -> [String] {
        guard case .object(let fields) = output, case .array(let items)? = fields["lines"] else { return [] }
        return items.compactMap { item in
            guard case .object(let entry) = item, case .string(let line)? = entry["line"] else { return nil }
            var time = ""
            if case .string(let text)? = entry["t"], let at = Timestamp.parseRFC3339(text) {
                time = String(Formatting.localTime(at, timeZone: timeZone).dropFirst(11).prefix(8)) + "  "
            }
            return "  " + time + DisplayWidth.sanitize(line)
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
                ? "\(child.percent)%"
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
