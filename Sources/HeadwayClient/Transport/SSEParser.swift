/// A Server-Sent Events parser (the WHATWG "event stream interpretation"), pure and
/// incremental: feed it the body's bytes chunk by chunk as they arrive, in any split, and
/// it returns the events completed so far.
///
/// Lines end with CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of
/// the next are one line break). A blank line dispatches the event being built; lines
/// starting with `:` are comments; `field: value` loses one leading space of its value;
/// `data` lines join with LF; `id` sets the last event id (kept for the next events too,
/// ignored when it contains NUL); `retry` with only ASCII digits sets the reconnection
/// delay. A leading byte order mark is skipped.
package struct SSEParser: Sendable {
    /// One dispatched event.
    package struct Event: Equatable, Sendable {
        /// The `event` field; `message` when the event had none.
        package var name: String
        /// The `data` lines joined with LF.
        package var data: String
        /// The last event id in force when the event was dispatched ("" when none yet).
        package var lastEventID: String

        package init(name: String, data: String, lastEventID: String) {
            self.name = name
            self.data = data
            self.lastEventID = lastEventID
        }
    }

    /// The last event id seen, kept across events; send it as `Last-Event-ID` to resume.
    package private(set) var lastEventID = ""
    /// The reconnection delay the server last asked for, in milliseconds.
    package private(set) var retryMilliseconds: Int?
    /// How many comment lines were seen (the server's keep-alives).
    package private(set) var commentCount = 0

    private var line: [UInt8] = []
    private var afterCR = false
    private var atStart = true
    private var eventName = ""
    private var data = ""
    private var hasData = false

    /// The most bytes one event (its lines together) may hold; past it the parser stops.
    package let maximumEventBytes: Int
    /// Whether an event grew past `maximumEventBytes`: nothing more is parsed.
    package private(set) var overflowed = false
    private var eventBytes = 0

    /// A parser; `maximumEventBytes` bounds the memory a stream that never ends a line or
    /// an event can take (a snapshot of many tasks is one large event).
    package init(maximumEventBytes: Int = 256 << 20) { self.maximumEventBytes = maximumEventBytes }

    /// Parses the next chunk of the stream and returns the events it completed.
    package mutating func feed(_ bytes: some Sequence<UInt8>) -> [Event] {
        var events: [Event] = []
        guard !overflowed else { return events }
        for byte in bytes {
            eventBytes += 1
            if eventBytes > maximumEventBytes {
                overflowed = true
                line = []
                data = ""
                return events
            }
            if afterCR {
                afterCR = false
                if byte == 0x0A { continue }
            }
            switch byte {
            case 0x0D:
                afterCR = true
                if let event = endLine() { events.append(event) }
            case 0x0A:
                if let event = endLine() { events.append(event) }
            default:
                line.append(byte)
            }
        }
        return events
    }

    /// Handles the line collected so far; returns an event when it was a blank line.
    private mutating func endLine() -> Event? {
        var bytes = line[...]
        line.removeAll(keepingCapacity: true)
        if atStart {
            atStart = false
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        }
        if bytes.isEmpty { return dispatch() }
        if bytes.first == UInt8(ascii: ":") {
            commentCount += 1
            return nil
        }
        let field: String
        let value: Substring
        if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            field = String(decoding: bytes[..<colon], as: UTF8.self)
            var rest = bytes[(colon + 1)...]
            if rest.first == UInt8(ascii: " ") { rest = rest.dropFirst() }
            value = Substring(String(decoding: rest, as: UTF8.self))
        } else {
            field = String(decoding: bytes, as: UTF8.self)
            value = ""
        }
        switch field {
        case "event":
            eventName = String(value)
        case "data":
            if hasData { data += "\n" }
            data += value
            hasData = true
        case "id":
            if !value.contains("\u{0}") { lastEventID = String(value) }
        case "retry":
            if !value.isEmpty, value.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let milliseconds = Int(value) {
                retryMilliseconds = milliseconds
            }
        default:
            break
        }
        return nil
    }

    /// Ends the event being built: an event when it had data, else nothing.
    private mutating func dispatch() -> Event? {
        defer {
            eventBytes = 0
            eventName = ""
            data = ""
            hasData = false
        }
        guard hasData else { return nil }
        return Event(name: eventName.isEmpty ? "message" : eventName, data: data, lastEventID: lastEventID)
    }
}
