import HeadwayCore

/// The `headway tasks` table (and the frame of `headway watch`): one line per task with
/// id, name, state and progress, laid out to fit a terminal width.
///
/// Progress of a quantified task: `▕██████▍   ▏ 64%  768/1,200 files  12.3 files/s  ~35 s`.
/// An indeterminate task: an activity glyph and its label; the glyph is a spinner frame
/// picked by a counter the caller advances when the task signals, and a fixed `‖` when it
/// is stalled — a stationary indicator means stalled. A stalled task says why and for how
/// long (`stalled 42 s: no signal`); a finished one shows its outcome and message.
///
/// When the width is short, in this order: the name is cut (with `…`) down to 20 cells,
/// then the label or note; the rate is dropped, then the ETA; name and label are cut
/// further; the bar narrows to 5 cells, then only the percent remains with no count;
/// the id is cut. A line never wraps and never exceeds the width.
public struct TaskTable: Sendable {
    /// Spinner frames of an indeterminate task that is moving.
    public static let spinner: [String] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
    /// The glyph of a stalled indeterminate task: fixed, whatever the frame counter.
    public static let stalledGlyph = "‖"
    /// The glyph of a pending indeterminate task.
    public static let pendingGlyph = "·"

    /// The tasks, in the order shown.
    public var tasks: [TaskView]
    /// The current time, for the age of a stall.
    public var now: EpochMilliseconds
    /// Spinner frame counters by task id (a missing id is frame 0); advance one when that
    /// task signals so its glyph moves only while it is alive.
    public var frames: [String: Int]
    /// Whether to print the header line `ID  NAME  STATE  PROGRESS`.
    public var header: Bool

    public init(tasks: [TaskView], now: EpochMilliseconds, frames: [String: Int] = [:], header: Bool = true) {
        self.tasks = tasks
        self.now = now
        self.frames = frames
        self.header = header
    }

    /// The widest the name column gets; longer names are cut.
    static let nameCap = 40

    /// How much detail a layout keeps.
    struct Level {
        var barCells: Int?   // nil: percent only, no count
        var rate: Bool
        var eta: Bool
        var nameMin: Int
        var tailMin: Int
        var idMax: Int = .max
    }

    static let levels: [Level] = [
        Level(barCells: 10, rate: true, eta: true, nameMin: 20, tailMin: 12),
        Level(barCells: 10, rate: false, eta: true, nameMin: 20, tailMin: 12),
        Level(barCells: 10, rate: false, eta: false, nameMin: 12, tailMin: 8),
        Level(barCells: 5, rate: false, eta: false, nameMin: 10, tailMin: 6),
        Level(barCells: nil, rate: false, eta: false, nameMin: 8, tailMin: 4),
        Level(barCells: nil, rate: false, eta: false, nameMin: 6, tailMin: 1, idMax: 10),
    ]

    /// The progress cell of one task before layout: aligned pieces, then free text.
    struct Progress {
        var quantified: Bool
        var bar: String = ""       // bar + percent, or the glyph
        var count: String = ""
        var rate: String = ""
        var eta: String = ""
        var tail: String = ""      // note and/or label; cut to what is left
        var tailStyle: Style = .plain
    }

    func progress(_ task: TaskView, level: Level) -> Progress {
        var notes: [String] = []
        var tailStyle = Style.plain
        if task.stalled && !task.state.isFinished {
            let reason = task.stallReason == "no_progress" ? "no progress" : "no signal"
            if let since = task.stalledSince {
                notes.append("stalled \(Formatting.age(milliseconds: now - since)): \(reason)")
            } else {
                notes.append("stalled: \(reason)")
            }
            tailStyle = .yellow
        }
        if task.cancelRequested && !task.state.isFinished { notes.append("cancel requested") }
        if task.state.isFinished, let message = task.message, !message.isEmpty { notes.append(message) }

        if task.isQuantified {
            var cell = Progress(quantified: true)
            let complete = task.state == .succeeded
            let fraction = task.displayFraction ?? 0
            if let cells = level.barCells {
                cell.bar = Formatting.barWithPercent(fraction, cells: cells, complete: complete)
                if let total = task.total {
                    cell.count = Formatting.count(task.completed) + "/" + Formatting.count(total)
                    if let unit = task.unit, !unit.isEmpty { cell.count += " " + unit }
                } else {
                    cell.count = Formatting.count(task.completed) + (task.unit.map { " " + $0 } ?? "")
                }
            } else {
                cell.bar = Formatting.percentText(fraction, complete: complete)
            }
            if level.rate, let rate = task.rate {
                // A parent without a total reports its rate as fraction per second.
                cell.rate = task.total == nil
                    ? Formatting.rate(rate * 100, unit: "%") ?? ""
                    : Formatting.rate(rate, unit: task.unit) ?? ""
            }
            if level.eta { cell.eta = Formatting.eta(task.etaSeconds) ?? "" }
            cell.tail = notes.joined(separator: "  ")
            cell.tailStyle = tailStyle
            return cell
        }
        var cell = Progress(quantified: false)
        switch task.state {
        case .succeeded: cell.bar = "✓"
        case .failed: cell.bar = "✗"
        case .canceled: cell.bar = "⊘"
        case .pending: cell.bar = Self.pendingGlyph
        case .running, .other:
            if task.stalled {
                cell.bar = Self.stalledGlyph
            } else {
                let frame = frames[task.id] ?? 0
                let count = Self.spinner.count
                cell.bar = Self.spinner[((frame % count) + count) % count]
            }
        }
        if let label = task.label, !label.isEmpty, !task.state.isFinished || notes.isEmpty { notes.append(label) }
        cell.tail = notes.joined(separator: "  ")
        cell.tailStyle = tailStyle
        return cell
    }

    /// The table's lines (no newlines, no trailing spaces), each at most `width` cells
    /// when printed; styled only when `color` is true (decide with `Style.useColor`).
    /// `Int.max` lays out without a limit (one plain line per task for a pipe).
    public func render(width: Int, color: Bool = false) -> [String] {
        let width = max(1, width)
        var chosen: [String]? = nil
        for (index, level) in Self.levels.enumerated() {
            if let lines = layout(level: level, width: width, color: color, force: index == Self.levels.count - 1) {
                chosen = lines
                break
            }
        }
        return chosen ?? []
    }

    private func layout(level: Level, width: Int, color: Bool, force: Bool) -> [String]? {
        let gap = "  "
        let cells = tasks.map { progress($0, level: level) }
        let ids = tasks.map { DisplayWidth.truncate($0.id, to: level.idMax) }
        let idWidth = max(header ? 2 : 0, ids.map(DisplayWidth.of).max() ?? 0)
        let stateWidth = max(header ? 5 : 0, tasks.map { DisplayWidth.of($0.state.text) }.max() ?? 0)
        let nameNatural = max(header ? 4 : 0, tasks.map { DisplayWidth.of($0.name) }.max() ?? 0)

        // Aligned pieces of the progress column.
        func widest(_ piece: (Progress) -> String) -> Int { cells.map { DisplayWidth.of(piece($0)) }.max() ?? 0 }
        let barWidth = widest(\.bar), countWidth = widest(\.count), rateWidth = widest(\.rate), etaWidth = widest(\.eta)
        func prefix(_ cell: Progress) -> [String] {
            guard cell.quantified else { return [DisplayWidth.pad(cell.bar, to: barWidth)] }
            // Aligned sub-columns, but none after the last piece this row has.
            var pieces = [(cell.bar, barWidth)]
            if countWidth > 0 { pieces.append((cell.count, countWidth)) }
            if rateWidth > 0 { pieces.append((cell.rate, rateWidth)) }
            if etaWidth > 0 { pieces.append((cell.eta, etaWidth)) }
            while pieces.count > 1, pieces.last?.0.isEmpty == true { pieces.removeLast() }
            return pieces.map { DisplayWidth.pad($0.0, to: $0.1) }
        }
        let prefixes = cells.map(prefix)
        let prefixWidths = prefixes.map { DisplayWidth.of($0.joined(separator: gap)) }
        let progressFixed = max(header ? 8 : 0, prefixWidths.max() ?? 0)
        let tailNatural = cells.map { $0.tail.isEmpty ? 0 : DisplayWidth.of($0.tail) + 2 }

        let fixed = idWidth + 2 + 2 + stateWidth + 2
        let available = width - fixed   // for name, progress and tails
        // The name keeps up to 40 cells while the longest note or label keeps 26; past
        // that it is cut down to the level's minimum before notes and labels are.
        let comfortable = zip(prefixWidths, tailNatural).map { $0 + min($1, 26) }.max() ?? 0
        var nameWidth = min(nameNatural, Self.nameCap, available - max(progressFixed, comfortable))
        nameWidth = max(nameWidth, min(nameNatural, level.nameMin))
        let fits = available - nameWidth >= progressFixed
            && zip(prefixWidths, tailNatural).allSatisfy { $1 == 0 || available - nameWidth - $0 >= level.tailMin + 2 }
        if !force && !fits { return nil }

        var lines: [String] = []
        if header {
            let line = DisplayWidth.pad("ID", to: idWidth) + gap + DisplayWidth.pad("NAME", to: nameWidth) + gap
                + DisplayWidth.pad("STATE", to: stateWidth) + gap + "PROGRESS"
            lines.append(Style.bold.apply(clip(line, width), enabled: color))
        }
        for (index, task) in tasks.enumerated() {
            let finished = task.state.isFinished
            let other: Style = finished ? .dim : .plain
            var plain: [(String, Style)] = [
                (DisplayWidth.pad(ids[index], to: idWidth) + gap, other),
                (DisplayWidth.pad(DisplayWidth.truncate(task.name, to: nameWidth), to: nameWidth) + gap, other),
                (DisplayWidth.pad(task.state.text, to: stateWidth), Style.of(task)),
                (gap + prefixes[index].joined(separator: gap), other),
            ]
            let cell = cells[index]
            if !cell.tail.isEmpty {
                let used = fixed + nameWidth + prefixWidths[index] + 2
                plain.append(("  ", .plain))
                plain.append((DisplayWidth.truncate(cell.tail, to: width - used), cell.tailStyle == .plain ? other : cell.tailStyle))
            }
            lines.append(render(plain, width: width, color: color))
        }
        return lines
    }

    /// Joins styled pieces, cut at `width` cells and without trailing spaces.
    private func render(_ pieces: [(String, Style)], width: Int, color: Bool) -> String {
        var plainLine = pieces.map(\.0).joined()
        while plainLine.last == " " { plainLine.removeLast() }
        let clipped = clip(plainLine, width)
        guard color else { return clipped }
        // Re-split the clipped plain text along the pieces, then style each part.
        var remaining = Substring(clipped), out = ""
        for (text, style) in pieces {
            guard !remaining.isEmpty else { break }
            let take = remaining.prefix(text.count)
            remaining = remaining.dropFirst(take.count)
            let trimmed = remaining.isEmpty ? String(take.reversed().drop { $0 == " " }.reversed()) : String(take)
            out += style.apply(trimmed, enabled: true)
        }
        return out
    }

    private func clip(_ line: String, _ width: Int) -> String {
        DisplayWidth.of(line) <= width ? line : DisplayWidth.truncate(line, to: width)
    }
}
