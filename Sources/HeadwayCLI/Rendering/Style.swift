/// Terminal styles (ANSI SGR) and the decision whether to use them. Layout always works
/// on plain text; a style wraps a cell after its width is fixed, so escape codes never
/// count toward a width.
public enum Style: Sendable {
    case plain, dim, bold, red, green, yellow, cyan, magenta

    /// True when colors should be used: standard output is a terminal, `NO_COLOR` is
    /// absent or empty (no-color.org), and `TERM` is not `dumb`.
    public static func useColor(isTTY: Bool, environment: [String: String]) -> Bool {
        guard isTTY else { return false }
        if let noColor = environment["NO_COLOR"], !noColor.isEmpty { return false }
        return environment["TERM"] != "dumb"
    }

    var code: String {
        switch self {
        case .plain: ""
        case .dim: "2"
        case .bold: "1"
        case .red: "31"
        case .green: "32"
        case .yellow: "33"
        case .cyan: "36"
        case .magenta: "35"
        }
    }

    /// `text` wrapped in this style's escape codes when `enabled`, else unchanged.
    public func apply(_ text: String, enabled: Bool) -> String {
        guard enabled, self != .plain, !text.isEmpty else { return text }
        return "\u{1B}[\(code)m" + text + "\u{1B}[0m"
    }

    /// The style of a task's state word: green succeeded, red failed, yellow canceled or
    /// stalled, magenta running overdue (a stall, more urgent, stays yellow), cyan running,
    /// dim pending.
    public static func of(_ task: TaskView) -> Style {
        switch task.state {
        case .succeeded: .green
        case .failed: .red
        case .canceled: .yellow
        case .running: task.stalled ? .yellow : task.overdue ? .magenta : .cyan
        case .pending: .dim
        case .other: .plain
        }
    }
}
