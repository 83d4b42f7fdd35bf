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
        func integer(_ match: NSTextCheckingResult, _ range: NSRange) -> Int64? {
            guard range.location != NSNotFound, let swiftRange = Range(range, in: line) else { return nil }
            return Int64(line[swiftRange])
        }
        func valid(_ completed: Int64?, _ total: Int64?) -> ProgressReading? {
            guard let completed, let total, total > 0, completed >= 0, completed <= total else { return nil }
            return ProgressReading(completed: completed, total: total)
        }
        if let pattern {
            guard let match = pattern.matches(in: line, range: range).last else { return nil }
            let completed = integer(match, match.range(withName: "completed"))
            // Without a `total` group the `completed` group reads a percent.
            let total = declares(group: "total", in: pattern) ? integer(match, match.range(withName: "total")) : 100
            return valid(completed, total)
        }
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
    private var pending: [UInt8] = []

    /// The complete lines in `bytes` (with what came before), as text.
    mutating func lines(in bytes: UnsafeRawBufferPointer) -> [String] {
        var lines: [String] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") {
                lines.append(String(decoding: pending, as: UTF8.self))
                pending.removeAll(keepingCapacity: true)
            } else if pending.count < Self.maximumLineBytes {
                pending.append(byte)
            }
        }
        return lines
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
