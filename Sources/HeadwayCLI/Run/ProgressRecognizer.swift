import Foundation

/// How far a wrapped command says it has come, read from one line of its output.
public struct ProgressReading: Equatable, Sendable {
    public let completed: Int64
    public let total: Int64
    /// True when `completed` is a percent of a `total` of 100: the command has shown only
    /// percents, and the task is reported with the unit `%` (a count it never showed).
    public let isPercent: Bool

    public init(completed: Int64, total: Int64, isPercent: Bool = false) {
        self.completed = completed
        self.total = total
        self.isPercent = isPercent
    }

    var fraction: Double { Double(completed) / Double(total) }
}

/// Reads progress from output lines: a `--progress-pattern` with the named groups
/// `completed` and (optionally) `total` — without it `completed` is a percent — or else
/// the built-in forms `N/M` and `NN%`, whichever a line shows last.
///
/// The latest reading is followed, whatever its form; a percent is a fraction of the
/// work, never a count. The first form sets the scale: after counts (`12/40`) a percent
/// is that share of their total (`50%` is 20/40); after percents alone, a count is read
/// as its percent. Only forward progress comes out: a reading that would move back is
/// dropped (the server refuses a count that falls).
public struct ProgressRecognizer {
    let pattern: NSRegularExpression?
    /// The last reading given out; later ones must not fall behind it.
    private(set) var last: ProgressReading?

    /// `N/M`, either side with up to 6 decimals (pip's `1.2/3.4 MB`); not rsync's
    /// `to-chk=N/M` and `ir-chk=N/M`, which count the files left to check.
    static let fraction = try! NSRegularExpression(
        pattern: #"(?<![\d./])(?<!-chk=)(\d{1,18}(?:\.\d{1,6})?)\s*/\s*(\d{1,18}(?:\.\d{1,6})?)(?![\d/]|\.\d)"#)
    static let percent = try! NSRegularExpression(pattern: #"(?<![\d.])(\d{1,3})(?:\.\d+)?\s*%"#)

    /// A recognizer with `pattern` (already checked by `compile`) or the built-in forms.
    public init(pattern: NSRegularExpression?) { self.pattern = pattern }

    /// `text` as a progress pattern, or a usage problem saying what is wrong with it.
    public static func compile(_ text: String) throws -> NSRegularExpression {
        let expression: NSRegularExpression
        do {
            expression = try NSRegularExpression(pattern: text)
        } catch {
            throw UsageError("--progress-pattern is not a regular expression: '\(text)'")
        }
        guard text.contains("(?<completed>") else {
            throw UsageError("--progress-pattern needs a named group (?<completed>…)")
        }
        return expression
    }

    /// The new reading `line` shows, or nil when it shows none or no forward progress.
    public mutating func read(_ line: String) -> ProgressReading? {
        parse(line).flatMap { follow($0) }
    }

    /// `reading` on the scale of the readings before it; nil when it does not move forward.
    public mutating func follow(_ reading: ProgressReading) -> ProgressReading? {
        var scaled = reading
        if let last {
            if reading.isPercent && !last.isPercent {
                scaled = ProgressReading(completed: Self.share(reading.fraction, of: last.total), total: last.total)
            } else if !reading.isPercent && last.isPercent {
                scaled = ProgressReading(completed: Self.share(reading.fraction, of: 100), total: 100, isPercent: true)
            } else if reading.completed < last.completed && reading.fraction > last.fraction {
                // Further along in counts of another total: the same share of the last one.
                scaled = ProgressReading(completed: Self.share(reading.fraction, of: last.total), total: last.total)
            }
            guard scaled != last, scaled.completed >= last.completed, scaled.fraction >= last.fraction else { return nil }
        }
        last = scaled
        return scaled
    }

    /// `fraction` of `total`, rounded down (exactly `total` only for a fraction of 1).
    static func share(_ fraction: Double, of total: Int64) -> Int64 {
        fraction >= 1 ? total : min(total - 1, Int64((fraction * Double(total)).rounded(.down)))
    }

    /// The reading in `line`, whether or not it moves forward.
    func parse(_ line: String) -> ProgressReading? {
        let range = NSRange(line.startIndex..., in: line)
        /// A group's whole number; a decimal one (`42.5` percent) counts its whole part.
        func integer(_ match: NSTextCheckingResult, _ range: NSRange) -> Int64? {
            guard range.location != NSNotFound, let swiftRange = Range(range, in: line) else { return nil }
            let text = line[swiftRange]
            if let whole = Int64(text) { return whole }
            guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) || $0 == UInt8(ascii: ".") }),
                  let number = Double(text), number < 9e15 else { return nil }
            return Int64(number)
        }
        func valid(_ completed: Int64?, _ total: Int64?) -> ProgressReading? {
            // The API takes counts up to 2^53 - 1 (exact in a JSON number).
            guard let completed, let total, total > 0, completed >= 0, completed <= total,
                  total <= 9_007_199_254_740_991 else { return nil }
            return ProgressReading(completed: completed, total: total)
        }
        if let pattern {
            guard let match = pattern.matches(in: line, range: range).last else { return nil }
            let completed = integer(match, match.range(withName: "completed"))
            // Without a `total` group the `completed` group reads a percent.
            guard declares(group: "total", in: pattern) else { return valid(completed, 100).map(Self.asPercent) }
            return valid(completed, integer(match, match.range(withName: "total")))
        }
        // Most output shows no progress: the forms need a slash or a percent sign.
        guard line.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "%") }) else { return nil }
        // Both forms on one line: the one shown last ("file 3/40 … 37%" is at 37%).
        /// The two sides of a count as whole numbers: with decimals, both scaled by the
        /// same power of ten (`1.2/3.45` is 120/345).
        func counts(_ match: NSTextCheckingResult) -> (Int64?, Int64?) {
            guard let first = Range(match.range(at: 1), in: line), let second = Range(match.range(at: 2), in: line)
            else { return (nil, nil) }
            let sides = [line[first], line[second]].map { $0.split(separator: ".", omittingEmptySubsequences: false) }
            let decimals = sides.map { $0.count > 1 ? $0[1].count : 0 }.max() ?? 0
            let whole = sides.map { parts in
                Int64(parts[0] + (parts.count > 1 ? parts[1] : "") + String(repeating: "0", count: decimals - (parts.count > 1 ? parts[1].count : 0)))
            }
            return (whole[0], whole[1])
        }
        let count = Self.fraction.matches(in: line, range: range).last.flatMap { match in
            let (completed, total) = counts(match)
            return valid(completed, total).map { (match.range.location, $0) }
        }
        let percent = Self.percent.matches(in: line, range: range).last.flatMap { match in
            valid(integer(match, match.range(at: 1)), 100).map { (match.range.location, Self.asPercent($0)) }
        }
        switch (count, percent) {
        case let (count?, percent?): return percent.0 > count.0 ? percent.1 : count.1
        default: return (count ?? percent)?.1
        }
    }

    static func asPercent(_ reading: ProgressReading) -> ProgressReading {
        ProgressReading(completed: reading.completed, total: 100, isPercent: true)
    }

    /// A line of `HEADWAY_PROGRESS_FILE`: `12/40` or `37%` (decimals cut), then blanks and
    /// a label, if any. Nil for any other line.
    public static func progressFileLine(_ line: String) -> (reading: ProgressReading, label: String?)? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        let head = trimmed.prefix { !$0.isWhitespace }
        let rest = trimmed.dropFirst(head.count).trimmingCharacters(in: .whitespaces)
        let label = LineSplitter.label(rest)
        if head.hasSuffix("%") {
            let number = head.dropLast()
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                  let value = Double(number), value <= 100 else { return nil }
            return (ProgressReading(completed: Int64(value), total: 100, isPercent: true), label)
        }
        let parts = head.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let completed = Int64(parts[0]), let total = Int64(parts[1]),
              parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
              total > 0, completed >= 0, completed <= total, total <= 9_007_199_254_740_991 else { return nil }
        return (ProgressReading(completed: completed, total: total), label)
    }

    /// Whether `pattern` declares the named group `name`.
    private func declares(group name: String, in pattern: NSRegularExpression) -> Bool {
        pattern.pattern.contains("(?<\(name)>")
    }
}

/// Cuts a stream of output bytes into lines (at `\n` or `\r`, as progress bars redraw
/// with `\r`) and keeps the latest non-blank one, sanitized, as a label.
struct LineSplitter {
    /// The longest line kept whole; the rest of a longer line is dropped.
    static let maximumLineBytes = 4096
    /// The most lines of one chunk handed out: the last ones. Only the latest label and
    /// reading matter, and a command printing a million lines must pass through fast.
    static let linesPerChunk = 8
    private var pending: [UInt8] = []

    /// The complete lines ending in `bytes` (the first with what came before), as text:
    /// the last `linesPerChunk` of them, in order.
    mutating func lines(in bytes: UnsafeRawBufferPointer) -> [String] {
        // Line breaks from the end, one more than the lines kept (to find where the
        // earliest kept line starts).
        var breaks: [Int] = []
        var index = bytes.count - 1
        while index >= 0 && breaks.count <= Self.linesPerChunk {
            if bytes[index] == UInt8(ascii: "\n") || bytes[index] == UInt8(ascii: "\r") { breaks.append(index) }
            index -= 1
        }
        guard let lastBreak = breaks.first else {
            append(bytes[...], to: &pending)
            return []
        }
        var lines: [String] = []
        let kept = min(breaks.count, Self.linesPerChunk)
        for position in (0..<kept).reversed() {
            let end = breaks[position]
            if position + 1 < breaks.count {
                var line: [UInt8] = []
                append(bytes[(breaks[position + 1] + 1)..<end], to: &line)
                lines.append(String(decoding: line, as: UTF8.self))
            } else {
                // The chunk's first line: it continues what came before.
                append(bytes[0..<end], to: &pending)
                lines.append(String(decoding: pending, as: UTF8.self))
            }
        }
        pending.removeAll(keepingCapacity: true)
        append(bytes[(lastBreak + 1)...], to: &pending)
        return lines
    }

    /// Appends `bytes` to `line` up to `maximumLineBytes` in all.
    private func append(_ bytes: Slice<UnsafeRawBufferPointer>, to line: inout [UInt8]) {
        let room = Self.maximumLineBytes - line.count
        guard room > 0 else { return }
        line.append(contentsOf: bytes.prefix(room))
    }

    /// The line still open (no break after it yet) when it looks whole: it does not end
    /// in a digit, as a count cut in the middle would (`15/20` of `15/200`). A progress
    /// bar redrawn with `\r` shows its state here until its next redraw.
    var settledOpenLine: String? {
        guard let last = pending.last, !(0x30...0x39).contains(last) else { return nil }
        return String(decoding: pending, as: UTF8.self)
    }

    /// The last line when the stream ends without a line break.
    mutating func finish() -> String? {
        defer { pending.removeAll() }
        return pending.isEmpty ? nil : String(decoding: pending, as: UTF8.self)
    }

    /// `line` as a task label: sanitized, trimmed, at most `limit` scalars; nil when blank.
    static func label(_ line: String, limit: Int = 500) -> String? {
        let clean = DisplayWidth.sanitize(line).trimmingCharacters(in: .whitespaces)
        guard !clean.isEmpty else { return nil }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: clean.unicodeScalars.prefix(limit))
        return String(scalars)
    }
}

/// Cuts a command's output into the lines a terminal would show, for the task's output
/// tail: a line ends at `\n`, and of what `\r` redrew within it (a progress bar) only the
/// last non-empty part counts. Lines are sanitized, trailing blanks cut, blank ones
/// dropped, each at most `maximumCharacters`; of a chunk only the last `kept` lines come
/// out (the server keeps no more), so a command printing a million lines costs little.
struct OutputLines {
    /// The longest line sent (the API's limit).
    static let maximumCharacters = 1000
    /// The most lines one chunk hands out.
    static let kept = 50
    private var segment: [UInt8] = []
    private var shown: [UInt8] = []

    /// The lines that `bytes` ends, oldest first.
    mutating func lines(in bytes: UnsafeRawBufferPointer) -> [String] {
        guard !bytes.isEmpty else { return [] }
        // Only the last `kept` lines matter: start after the line break before them.
        var start = 0, breaks = 0, index = bytes.count - 1
        while index >= 0 {
            if bytes[index] == UInt8(ascii: "\n") {
                breaks += 1
                if breaks > Self.kept {
                    start = index + 1
                    segment.removeAll(keepingCapacity: true)
                    shown.removeAll(keepingCapacity: true)
                    break
                }
            }
            index -= 1
        }
        var out: [String] = []
        for byte in bytes[start...] {
            switch byte {
            case UInt8(ascii: "\n"):
                endSegment()
                if let line = Self.text(shown) { out.append(line) }
                shown.removeAll(keepingCapacity: true)
            case UInt8(ascii: "\r"):
                endSegment()
            default:
                if segment.count < Self.maximumCharacters * 4 { segment.append(byte) }
            }
        }
        return out
    }

    /// The last line when the output ends without a line break.
    mutating func finish() -> String? {
        endSegment()
        defer { shown.removeAll() }
        return Self.text(shown)
    }

    private mutating func endSegment() {
        if !segment.isEmpty { shown = segment }
        segment.removeAll(keepingCapacity: true)
    }

    static func text(_ bytes: [UInt8]) -> String? {
        var clean = DisplayWidth.sanitize(String(decoding: bytes, as: UTF8.self))
        while clean.last?.isWhitespace == true { clean.removeLast() }
        guard !clean.isEmpty else { return nil }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: clean.unicodeScalars.prefix(maximumCharacters))
        return String(scalars)
    }
}

/// `HEADWAY_PROGRESS_FILE`: a file `headway run` makes (mode 0600, in `TMPDIR`) and names
/// in the command's environment, for a command whose output cannot carry its progress
/// (it is a file, or shows something else): each line it appends (or writes anew) is
/// `12/40 label` or `37% label`, and the last whole line is read about four times a
/// second. The file is removed when the command ends.
final class ProgressFile {
    let path: String
    private var lastLook: (size: Int, seconds: Int, nanoseconds: Int, inode: UInt) = (-1, 0, 0, 0)

    /// Makes the file; nil when it cannot be made (the command runs without it).
    init?(environment: [String: String]) {
        let folder = environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((folder + "/headway-progress-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { return nil }
        close(fd)
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The last whole line of the file, when it changed since the last look.
    func changedLine() -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let look = (Int(info.st_size), Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec), UInt(info.st_ino))
        guard look != lastLook else { return nil }
        lastLook = look
        // The command may have put something else at the path: a FIFO would block a plain
        // open (and with it `run`'s whole loop) until a writer came, so it is opened
        // without waiting and only a regular file is read.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var opened = stat()
        guard fstat(fd, &opened) == 0, opened.st_mode & S_IFMT == S_IFREG else { return nil }
        let length = min(look.0, 4096)
        guard length > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: length)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(look.0 - length)) }
        guard count > 0 else { return nil }
        var bytes = Array(buffer[0..<count])
        // Only whole lines: a line still being written waits for its line break.
        guard let end = bytes.lastIndex(of: UInt8(ascii: "\n")) else { return nil }
        bytes = Array(bytes[..<end])
        let start = bytes.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
        return String(decoding: bytes[start...], as: UTF8.self)
    }

    /// Removes the file.
    func remove() { unlink(path) }
}
