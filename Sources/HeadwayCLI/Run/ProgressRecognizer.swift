import Foundation

/// How far a wrapped command says it has come, read from one line of its output.
public struct ProgressReading: Equatable, Sendable {
    public let completed: Int64
    public let total: Int64
}

/// Reads progress from output lines: a `--progress-pattern` with the named groups
/// `completed` and (optionally) `total` — without it `completed` is a percent — or else
/// the built-in forms `N/M` and `NN%`.
/// Only forward progress comes out: a reading that would move back is dropped.
public struct ProgressRecognizer {
    let pattern: NSRegularExpression?
    /// The last reading given out; later ones must not fall behind it.
    private(set) var last: ProgressReading?

    static let fraction = try! NSRegularExpression(pattern: #"(?<![\d/])(\d{1,18})\s*/\s*(\d{1,18})(?![\d/])"#)
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
        guard let reading = parse(line) else { return nil }
        if let last {
            let fractionHolds = Double(reading.completed) / Double(reading.total)
                >= Double(last.completed) / Double(last.total)
            guard reading != last, reading.completed >= last.completed, fractionHolds else { return nil }
        }
        last = reading
        return reading
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
            let total = declares(group: "total", in: pattern) ? integer(match, match.range(withName: "total")) : 100
            return valid(completed, total)
        }
        // Most output shows no progress: the forms need a slash or a percent sign.
        guard line.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "%") }) else { return nil }
        if let match = Self.fraction.matches(in: line, range: range).last,
           let reading = valid(integer(match, match.range(at: 1)), integer(match, match.range(at: 2))) {
            return reading
        }
        if let match = Self.percent.matches(in: line, range: range).last {
            return valid(integer(match, match.range(at: 1)), 100)
        }
        return nil
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
