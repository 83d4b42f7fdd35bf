import Foundation
import HeadwayCore

/// The `headway tasks` table (and the frame of `headway watch`): one line per task with
/// name, state, progress, time, label and id, laid out to fit a terminal width.
///
/// `NAME  STATE  PROGRESS  TIME  LABEL  ID`: what a person reads first comes first, the
/// id (what a command is given) last, a generated id shortened to a prefix that tells it
/// apart from the others shown (`IDDisplay`), which every command taking an id resolves.
///
/// Progress of a quantified task: `▕██████▍   ▏ 64%  768/1,200 files  12.3 files/s  ~35 s`.
/// An indeterminate task: an activity glyph; the glyph is a spinner frame picked by a
/// counter the caller advances when the task signals, and a fixed `‖` when it is stalled —
/// a stationary indicator means stalled. TIME is how long a task has been running (how
/// long it ran, once finished). LABEL says why before what: a stall (`no signal for 42 s`,
/// `no progress for 3 min`, counted from `last_signal_at` and `last_progress_at` as the
/// page counts them), a run-time flag (`overdue by 4 min`, `ran 4 min late`, `too quick`,
/// in magenta: `runTimeNote`), a parent's children (`1 of 3 failed · 1 stalled`), a finished
/// task's message and finish time, then the label, then `last signal 8 s ago` once a
/// running task has been quiet for a few seconds.
///
/// When the width is short, in this order: the rate is dropped, then the ETA; the name
/// is cut (with `…`) down to 16 cells; the bar narrows to 5 cells, then the count goes
/// (the bar back at 10) so that the label keeps 12 cells (the rate goes while the
/// label has fewer than 20 cells, the ETA while it has fewer than 16, the count while
/// it has fewer than 18: room for `no signal for 42 s`); then the time goes and the
/// name and label are cut to what is left; only at the very narrowest does the bar give
/// way to its percent and the id get cut. A line never wraps and never exceeds the
/// width.
public struct TaskTable: Sendable {
    /// Spinner frames of an indeterminate task that is moving.
    public static let spinner: [String] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
    /// The glyph of a stalled indeterminate task: fixed, whatever the frame counter.
    public static let stalledGlyph = "‖"
    /// The glyph of a pending indeterminate task.
    public static let pendingGlyph = "·"
    /// How quiet a running task must be before its row says when it last signalled.
    public static let quietAfterMilliseconds: Int64 = 5_000

    /// The tasks, in the order shown.
    public var tasks: [TaskView]
    /// The current time, for ages and elapsed times.
    public var now: EpochMilliseconds
    /// Spinner frame counters by task id (a missing id is frame 0); advance one when that
    /// task signals so its glyph moves only while it is alive.
    public var frames: [String: Int]
    /// Whether to print the header line `NAME  STATE  PROGRESS  TIME  LABEL  ID`.
    public var header: Bool
    /// The zone finish times are shown in (the local one).
    public var timeZone: TimeZone

    public init(tasks: [TaskView], now: EpochMilliseconds, frames: [String: Int] = [:], header: Bool = true,
                timeZone: TimeZone = .current) {
        self.tasks = tasks
        self.now = now
        self.frames = frames
        self.header = header
        self.timeZone = timeZone
    }

    /// The widest the name column gets; longer names are cut.
    static let nameCap = 40
    /// The label keeps this many cells before the name is cut below its natural width.
    static let labelComfort = 26

    /// How much detail a layout keeps.
    struct Level {
        var barCells: Int?   // nil: percent only
        var count = true
        var rate = false
        var eta = false
        var time = true
        var nameMin: Int
        var tailMin: Int
        var idMax: Int = .max
    }

    static let levels: [Level] = [
        Level(barCells: 10, rate: true, eta: true, nameMin: 20, tailMin: 20),
        Level(barCells: 10, eta: true, nameMin: 20, tailMin: 16),
        Level(barCells: 10, nameMin: 16, tailMin: 18),
        Level(barCells: 5, nameMin: 16, tailMin: 18),
        Level(barCells: 10, count: false, nameMin: 16, tailMin: 12),
        Level(barCells: 5, count: false, nameMin: 16, tailMin: 8),
        Level(barCells: 5, count: false, time: false, nameMin: 12, tailMin: 4),
        Level(barCells: 5, count: false, time: false, nameMin: 8, tailMin: 1),
        Level(barCells: nil, count: false, time: false, nameMin: 6, tailMin: 1, idMax: 10),
    ]

    /// The progress cell of one task before layout: aligned pieces.
    struct Progress {
        var quantified: Bool
        var bar: String = ""       // bar + percent, or the glyph
        var count: String = ""
        var rate: String = ""
        var eta: String = ""
    }

    /// What the LABEL column says of `task`, and its style.
    func tail(_ task: TaskView) -> (text: String, style: Style) {
        var notes: [String] = []
        var style = Style.plain
        let finished = task.state.isFinished
        if task.stalled && !finished {
            notes.append(Self.stallNote(task, now: now))
            style = .yellow
        }
        if let note = Self.runTimeNote(task, now: now) {
            notes.append(note)
            if style == .plain { style = .magenta }
        }
        if let children = task.children {
            notes.append(children.summary)
            if task.attention == "failed" { style = .red } else if task.attention == "stalled" { style = .yellow }
        } else if let attention = task.attention, !finished {
            notes.append("a descendant " + attention)
            style = attention == "failed" ? .red : .yellow
        }
        if task.cancelRequested && !finished { notes.append("cancel requested") }
        if finished, let message = task.message, !message.isEmpty {
            notes.append(message)
            if task.state == .failed { style = .red }
        }
        if let label = task.label, !label.isEmpty, !finished || task.message?.isEmpty != false { notes.append(label) }
        if finished, let end = task.finishedAt {
            notes.append("ended " + Formatting.clock(end, now: now, timeZone: timeZone))
        } else if !task.stalled, task.state == .running, let signal = task.lastSignalAt,
                  now - signal >= Self.quietAfterMilliseconds {
            notes.append("last signal \(Formatting.age(milliseconds: now - signal)) ago")
        }
        return (notes.joined(separator: " · "), style)
    }

    /// `no signal for 42 s` or `no progress for 3 min`: the age of what the stall is about,
    /// from the task's own times (the page's words and clock).
    public static func stallNote(_ task: TaskView, now: EpochMilliseconds) -> String {
        if task.stallReason == "no_progress" {
            let since = task.lastProgressAt ?? task.createdAt ?? task.stalledSince
            return since.map { "no progress for \(Formatting.age(milliseconds: now - $0))" } ?? "no progress"
        }
        let since = task.lastSignalAt ?? task.stalledSince ?? task.updatedAt
        return since.map { "no signal for \(Formatting.age(milliseconds: now - $0))" } ?? "no signal"
    }

    /// What the run-time rules say of the task, in magenta, or nil: `overdue by 4 min` while
    /// it runs past its due moment, `ran 4 min late` once finished, `too quick (under 1 min)`
    /// for a success sooner than its `min_seconds`.
    public static func runTimeNote(_ task: TaskView, now: EpochMilliseconds) -> String? {
        if task.tooQuick {
            return "too quick" + (task.minSeconds.map { " (under " + Formatting.age(milliseconds: Int64($0 * 1000)) + ")" } ?? "")
        }
        guard task.overdue else { return nil }
        guard let since = task.overdueSince else { return "overdue" }
        if task.state.isFinished {
            return task.finishedAt.map { "ran \(lateness(milliseconds: $0 - since)) late" } ?? "ran late"
        }
        return "overdue by \(lateness(milliseconds: now - since))"
    }

    /// How late, for `runTimeNote`: under a second is "under 1 s", since an age rounds down
    /// and "overdue by 0 s" would read as on time.
    static func lateness(milliseconds: Int64) -> String {
        milliseconds < 1_000 ? "under 1 s" : Formatting.age(milliseconds: milliseconds)
    }

    /// TIME: how long the task has run, or ran once finished; empty when unknown.
    func time(_ task: TaskView) -> String {
        guard let start = task.createdAt else { return "" }
        return Formatting.age(milliseconds: (task.state.isFinished ? task.finishedAt ?? now : now) - start)
    }

    func progress(_ task: TaskView, level: Level) -> Progress {
        if task.isQuantified {
            var cell = Progress(quantified: true)
            let fraction = task.displayFraction ?? 0
            if let cells = level.barCells {
                cell.bar = Formatting.barWithPercent(fraction, percent: task.percent, cells: cells)
            } else {
                cell.bar = Formatting.percentText(task.percent)
            }
            if level.count, let total = task.total, !task.countsPercent {
                cell.count = Formatting.count(task.completed) + "/" + Formatting.count(total)
                if let unit = task.unit, !unit.isEmpty { cell.count += " " + unit }
            }
            if level.rate, let rate = task.rate {
                // A parent without a total reports its rate as fraction per second.
                cell.rate = task.total == nil
                    ? Formatting.rate(rate * 100, unit: "%") ?? ""
                    : Formatting.rate(rate, unit: task.countsPercent ? "%" : task.unit) ?? ""
            }
            if level.eta { cell.eta = Formatting.eta(task.etaSeconds) ?? "" }
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
        return cell
    }

    /// The table's lines (no newlines, no trailing spaces), each at most `width` cells
    /// when printed; styled only when `color` is true (decide with `Style.useColor`).
    /// `Int.max` lays out without a limit (one plain line per task for a pipe).
    public func render(width: Int, color: Bool = false) -> [String] {
        let width = max(1, width)
        let tails = tasks.map(tail)
        let shortIDs = IDDisplay.shorten(tasks.map(\.id))
        for (index, level) in Self.levels.enumerated() {
            if let lines = layout(level: level, width: width, color: color, tails: tails, shortIDs: shortIDs,
                                  force: index == Self.levels.count - 1) {
                return lines
            }
        }
        return []
    }

    private func layout(level: Level, width: Int, color: Bool, tails: [(text: String, style: Style)], shortIDs: [String],
                        force: Bool) -> [String]? {
        let gap = "  "
        let cells = tasks.map { progress($0, level: level) }
        let ids = shortIDs.map { DisplayWidth.truncate($0, to: level.idMax) }
        let times = level.time ? tasks.map(time) : tasks.map { _ in "" }
        let idWidth = max(header ? 2 : 0, ids.map(DisplayWidth.of).max() ?? 0)
        let stateWidth = max(header ? 5 : 0, tasks.map { DisplayWidth.of($0.state.text) }.max() ?? 0)
        let nameNatural = max(header ? 4 : 0, tasks.map { DisplayWidth.of($0.name) }.max() ?? 0)
        let timeNatural = times.map(DisplayWidth.of).max() ?? 0
        let timeWidth = timeNatural == 0 ? 0 : max(header ? 4 : 0, timeNatural)

        // Aligned pieces of the progress column.
        func widest(_ piece: (Progress) -> String) -> Int { cells.map { DisplayWidth.of(piece($0)) }.max() ?? 0 }
        let barWidth = widest(\.bar), countWidth = widest(\.count), rateWidth = widest(\.rate), etaWidth = widest(\.eta)
        func prefix(_ cell: Progress) -> String {
            guard cell.quantified else { return DisplayWidth.pad(cell.bar, to: barWidth) }
            var pieces = [(cell.bar, barWidth)]
            if countWidth > 0 { pieces.append((cell.count, countWidth)) }
            if rateWidth > 0 { pieces.append((cell.rate, rateWidth)) }
            if etaWidth > 0 { pieces.append((cell.eta, etaWidth)) }
            return pieces.map { DisplayWidth.pad($0.0, to: $0.1) }.joined(separator: gap)
        }
        let prefixes = cells.map(prefix)
        let progressWidth = max(header ? 8 : 0, prefixes.map(DisplayWidth.of).max() ?? 0)
        let tailNatural = tails.map { DisplayWidth.of($0.text) }.max() ?? 0

        // Everything but the name and the label, with the gaps after each column.
        let fixed = stateWidth + 2 + progressWidth + 2 + (timeWidth > 0 ? timeWidth + 2 : 0) + idWidth + 2
        let available = width - fixed   // for the name, and the label with its gap
        let tailWanted = tailNatural == 0 ? 0 : max(header ? 5 : 0, min(tailNatural, Self.labelComfort)) + 2
        var nameWidth = min(nameNatural, Self.nameCap, available - tailWanted)
        nameWidth = max(nameWidth, min(nameNatural, level.nameMin))
        let tailRoom = available - nameWidth - 2
        let fits = available - nameWidth >= 0 && (tailNatural == 0 || tailRoom >= min(tailNatural, level.tailMin))
        if !force && !fits { return nil }
        let tailWidth = tailNatural == 0 ? 0 : max(0, min(max(tailNatural, header ? 5 : 0), tailRoom))

        var lines: [String] = []
        if header {
            var pieces = [DisplayWidth.pad("NAME", to: nameWidth), DisplayWidth.pad("STATE", to: stateWidth),
                          DisplayWidth.pad("PROGRESS", to: progressWidth)]
            if timeWidth > 0 { pieces.append(DisplayWidth.pad("TIME", to: timeWidth)) }
            if tailWidth > 0 { pieces.append(DisplayWidth.pad(DisplayWidth.truncate("LABEL", to: tailWidth), to: tailWidth)) }
            pieces.append("ID")
            var line = pieces.joined(separator: gap)
            while line.last == " " { line.removeLast() }
            lines.append(Style.bold.apply(clip(line, width), enabled: color))
        }
        for (index, task) in tasks.enumerated() {
            var pieces: [(String, Style)] = [
                (DisplayWidth.pad(DisplayWidth.truncate(task.name, to: nameWidth), to: nameWidth) + gap, .plain),
                (DisplayWidth.pad(task.state.text, to: stateWidth), Style.of(task)),
                (gap + DisplayWidth.pad(prefixes[index], to: progressWidth) + gap, .plain),
            ]
            if timeWidth > 0 { pieces.append((DisplayWidth.pad(times[index], to: timeWidth) + gap, .plain)) }
            if tailWidth > 0 {
                let text = DisplayWidth.truncate(tails[index].text, to: tailWidth)
                pieces.append((text, tails[index].style))
                pieces.append((String(repeating: " ", count: tailWidth - DisplayWidth.of(text)) + gap, .plain))
            }
            pieces.append((ids[index], .plain))
            lines.append(render(pieces, width: width, color: color))
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

/// How tables show task ids: a generated id (the server's lowercase UUID) shortened to
/// its first 8 characters, or more when two ids shown share them; any other id whole,
/// as its runner chose it. Commands resolve a shortened id back (`TaskAPI.resolveID`).
public enum IDDisplay {
    /// The fewest characters of a generated id shown.
    public static let shortLength = 8

    /// Whether `id` has the form of an id the server generated: 8-4-4-4-12 lowercase hex.
    public static func isGenerated(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else if !((0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)) {
                return false
            }
        }
        return true
    }

    /// Whether `text` could be the start of a generated id: at least 4 characters of one.
    public static func couldBePrefix(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard (4..<36).contains(bytes.count) else { return false }
        let sample = Array("00000000-0000-0000-0000-000000000000".utf8)
        return bytes.enumerated().allSatisfy { index, byte in
            sample[index] == UInt8(ascii: "-") ? byte == sample[index]
                : (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)
        }
    }

    /// The ids as shown, in order: each generated one cut to the shortest prefix of at
    /// least `shortLength` characters that no other id of `ids` starts with.
    public static func shorten(_ ids: [String]) -> [String] {
        ids.map { id in
            guard isGenerated(id) else { return id }
            var length = shortLength
            while length < id.count {
                let prefix = id.prefix(length)
                if !ids.contains(where: { $0 != id && $0.hasPrefix(prefix) }) { break }
                length += 1
            }
            return String(id.prefix(length))
        }
    }
}
