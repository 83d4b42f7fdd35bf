/// The last lines a task's runner sent as `output` (what its command printed), each with the
/// time it arrived: at most `maximumLines` lines (what the store keeps) and, as shown,
/// `maximumBytes` bytes of their UTF-8 text, the oldest dropped first. A line is kept exactly as sent, control characters
/// included: JSON escapes them wherever it is shown (`JSONText.appendString`), and the
/// CLI and the page strip them before display.
public struct OutputTail: Equatable, Sendable {
    /// One line and when it arrived.
    public struct Line: Equatable, Sendable {
        /// When the line arrived, as RFC 3339 text (`Timestamp.rfc3339`).
        public var t: String
        public var line: String

        public init(t: String, line: String) {
            self.t = t
            self.line = line
        }
    }

    /// The most lines a tail keeps.
    public static let maximumLines = 50
    /// The most bytes (UTF-8, of the lines' text) a tail keeps.
    public static let maximumBytes = 8 * 1024
    /// The most lines one request may send.
    public static let maximumLinesPerRequest = 100
    /// The longest line, in characters (Unicode scalars, as every other text field).
    public static let maximumLineLength = 1_000

    /// Oldest first.
    public private(set) var lines: [Line]

    public init(lines: [Line] = []) { self.lines = lines }

    /// The tail with `new` appended (arrived at `t`), within the bounds (`trimmed`).
    public func appending(_ new: [String], at t: EpochMilliseconds) -> OutputTail {
        let time = Timestamp.rfc3339(t)
        return OutputTail(lines: lines + new.suffix(Self.maximumLines).map { Line(t: time, line: $0) }).trimmed()
    }

    /// The newest lines within `maximumLines` lines and `maximumBytes` bytes, the oldest
    /// dropped first. A line is at most 4,000 bytes, so the newest always stays.
    public func trimmed() -> OutputTail {
        var kept = 0
        var bytes = 0
        for line in lines.reversed() {
            let size = line.line.utf8.count
            guard kept < Self.maximumLines, bytes + size <= Self.maximumBytes else { break }
            kept += 1
            bytes += size
        }
        return OutputTail(lines: Array(lines.suffix(kept)))
    }

    /// The lines as the API shows them and the store keeps them: a JSON array of
    /// `{"t": RFC 3339, "line": text}`, oldest first.
    public var json: String {
        var text = JSONText(capacity: 64 + lines.reduce(0) { $0 + $1.line.utf8.count + 48 })
        text.appendByte(UInt8(ascii: "["))
        for (index, line) in lines.enumerated() {
            if index > 0 { text.appendByte(UInt8(ascii: ",")) }
            text.appendRaw(#"{"t":"#)
            text.appendString(line.t)
            text.appendRaw(#","line":"#)
            text.appendString(line.line)
            text.appendByte(UInt8(ascii: "}"))
        }
        text.appendByte(UInt8(ascii: "]"))
        return text.text
    }

    /// Reads `json` (what `json` wrote); nil if it is not such an array.
    public init?(json: String) {
        guard case .array(let items)? = JSONValue.parse(Array(json.utf8)) else { return nil }
        var lines: [Line] = []
        lines.reserveCapacity(items.count)
        for item in items {
            guard case .object(let members) = item, case .string(let t)? = members["t"],
                  case .string(let line)? = members["line"] else { return nil }
            lines.append(Line(t: t, line: line))
        }
        self.lines = lines
    }
}
