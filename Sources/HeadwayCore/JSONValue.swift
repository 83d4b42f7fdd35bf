/// A parsed JSON value, as strict as the API needs: integers are kept apart from
/// fractional numbers so that "an integer" can be checked exactly.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// Parses UTF-8 JSON text strictly (see `JSONParser`); nil when it is not acceptable.
    public static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> JSONValue? {
        try? JSONParser.parse(bytes).get()
    }

    /// The canonical text of this value: no spaces, object keys sorted.
    public var canonicalText: String {
        var out = JSONText()
        out.append(self)
        return out.text
    }

    /// A short name of the value's JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .integer, .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

/// Appends JSON text piece by piece into a byte buffer; used for replies so that field
/// order is fixed and no intermediate objects or strings are built. A task is some thirty
/// members of two or three pieces each, so each piece is copied through the buffer's
/// pointer (`JSONBytes`) rather than by Array's generic append.
public struct JSONText: Sendable {
    private var storage: JSONBytes

    /// An empty text with room for `capacity` bytes before it grows.
    public init(capacity: Int = 64) { storage = JSONBytes(capacity: Swift.max(capacity, 1)) }

    /// An empty text sharing one buffer with every other such text, so that it costs no
    /// allocation: the first write gives it a buffer of its own.
    static var shared: JSONText { JSONText(storage: sharedStorage) }
    private static let sharedStorage = JSONBytes(capacity: 1)
    private init(storage: JSONBytes) { self.storage = storage }

    /// The UTF-8 bytes written so far.
    public var bytes: [UInt8] { storage.withBytes { Array($0) } }

    /// How many bytes were written so far.
    public var count: Int { storage.count }

    /// The text written so far.
    public var text: String { storage.withBytes { String(decoding: $0, as: UTF8.self) } }

    /// Reserves room for `count` bytes of text.
    public mutating func reserveCapacity(_ count: Int) { writable(count - storage.count) }

    /// The storage, made this text's own and with room for `extra` more bytes.
    @discardableResult
    private mutating func writable(_ extra: Int) -> JSONBytes {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        storage.reserve(extra)
        return storage
    }

    /// Appends `raw` as it is (it must already be valid JSON).
    public mutating func appendRaw(_ raw: String) {
        var raw = raw
        raw.withUTF8 { appendBytes($0) }
    }

    /// Appends a literal of the source that is JSON text (`null`, `true`), without the
    /// String machinery.
    public mutating func appendLiteral(_ literal: StaticString) {
        literal.withUTF8Buffer { appendBytes($0) }
    }

    /// Appends one byte of JSON punctuation (`,`, `:`, brackets).
    public mutating func appendByte(_ byte: UInt8) { writable(1).append(byte) }

    /// Appends bytes that are already valid JSON text.
    public mutating func appendBytes(_ raw: UnsafeBufferPointer<UInt8>) { writable(raw.count).append(raw) }

    /// Appends `"name":` (after a `,` if `afterComma`) for a member name that needs no
    /// escaping.
    mutating func appendKey(_ name: StaticString, afterComma: Bool) {
        name.withUTF8Buffer { name in
            let storage = writable(name.count + 4)
            if afterComma { storage.append(UInt8(ascii: ",")) }
            storage.append(UInt8(ascii: "\""))
            storage.append(name)
            storage.append(UInt8(ascii: "\""))
            storage.append(UInt8(ascii: ":"))
        }
    }

    /// Appends a JSON string literal with the escapes RFC 8259 requires, and `\u` escapes
    /// for DEL and the C1 controls (U+007F–U+009F) too: RFC 8259 lets them through raw, but
    /// a terminal that shows the text acts on them (U+009B starts a CSI sequence, U+009D an
    /// OSC), and task fields are anyone's text.
    public mutating func appendString(_ value: String) {
        // Fast path: most strings need no escape (no control characters, quotes,
        // backslashes, nor U+2028/U+2029, whose UTF-8 starts with 0xE2); scanned and
        // copied as one contiguous buffer.
        var value = value
        let plain = value.withUTF8 { utf8 in
            guard Self.needsNoEscape(utf8) else { return false }
            let storage = writable(utf8.count + 2)
            storage.append(UInt8(ascii: "\""))
            storage.append(utf8)
            storage.append(UInt8(ascii: "\""))
            return true
        }
        guard !plain else { return }
        appendByte(UInt8(ascii: "\""))
        do {
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": appendRaw("\\\"")
                case "\\": appendRaw("\\\\")
                case "\n": appendRaw("\\n")
                case "\r": appendRaw("\\r")
                case "\t": appendRaw("\\t")
                case "\u{2028}": appendRaw("\\u2028")
                case "\u{2029}": appendRaw("\\u2029")
                default:
                    if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                        let hex = String(scalar.value, radix: 16)
                        appendRaw("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
                    } else {
                        var text = String(scalar)
                        text.withUTF8 { appendBytes($0) }
                    }
                }
            }
        }
        appendByte(UInt8(ascii: "\""))
    }

    /// Whether `utf8` holds no byte a JSON string must escape (a C0 control, `"`, `\\`, DEL),
    /// nor the first byte of a C1 control (0xC2 before 0x80–0x9F) or of U+2028/U+2029
    /// (0xE2, escaped for JavaScript's sake). Eight bytes at a time: a chunk with a control
    /// character, `"`, `\\`, DEL or any non-ASCII byte is looked at byte by byte.
    @inline(__always)
    static func needsNoEscape(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = utf8.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        let count = utf8.count
        var offset = 0
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        while offset + 8 <= count {
            let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            // A byte below 0x20, equal to 0x22, 0x5C or 0x7F, or with its high bit set, sets
            // the high bit of its lane (the borrow of a lower lane can only flag lanes above
            // a flagged one, which the byte check below then clears up).
            let control = word &- ones &* 0x20
            let quote = (word ^ (ones &* 0x22)) &- ones
            let backslash = (word ^ (ones &* 0x5C)) &- ones
            let delete = (word ^ (ones &* 0x7F)) &- ones
            if ((control | quote | backslash | delete) & ~word | word) & highs != 0 {
                for index in offset..<offset + 8 where Self.mustEscape(utf8, at: index) { return false }
            }
            offset += 8
        }
        for index in offset..<count where Self.mustEscape(utf8, at: index) { return false }
        return true
    }

    /// Whether the byte at `index` of `utf8` begins something `appendString` escapes.
    @inline(__always)
    private static func mustEscape(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int) -> Bool {
        let byte = utf8[index]
        if byte == 0xC2 { return index + 1 < utf8.count && utf8[index + 1] < 0xA0 }  // U+0080–U+009F
        return byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xE2
    }

    /// Appends a time as a JSON string (`Timestamp.rfc3339`), without building the string.
    public mutating func appendTimestamp(_ milliseconds: EpochMilliseconds) {
        let storage = writable(Timestamp.length + 2)
        storage.append(UInt8(ascii: "\""))
        storage.appendWritten(upTo: Timestamp.length) { Timestamp.write(milliseconds, into: $0); return Timestamp.length }
        storage.append(UInt8(ascii: "\""))
    }

    /// Appends an integer, digit by digit.
    public mutating func appendInteger(_ value: Int64) {
        if value < 0 {
            appendByte(UInt8(ascii: "-"))
            // The magnitude of Int64.min does not fit in Int64.
            appendDigits(value.magnitude)
        } else {
            appendDigits(UInt64(value))
        }
    }

    private mutating func appendDigits(_ value: UInt64) {
        writable(20).appendWritten(upTo: 20) { buffer in  // 20 digits: UInt64.max
            var count = 0
            var rest = value
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            } while rest > 0
            for index in 0..<count / 2 { buffer.swapAt(index, count - 1 - index) }  // most significant first
            return count
        }
    }

    /// Appends a finite number, or `null` for NaN and infinities (which JSON cannot carry).
    public mutating func appendNumber(_ value: Double) {
        guard value.isFinite else { return appendLiteral("null") }
        if value == value.rounded(), abs(value) < 1e15 {
            appendInteger(Int64(value))
        } else {
            appendRaw(value.description)  // the shortest text that reads back as `value`
        }
    }

    /// Appends any parsed value; object keys come out sorted.
    public mutating func append(_ value: JSONValue) {
        switch value {
        case .null: appendLiteral("null")
        case .bool(let flag): appendLiteral(flag ? "true" : "false")
        case .integer(let number): appendInteger(number)
        case .number(let number): appendNumber(number)
        case .string(let string): appendString(string)
        case .array(let items):
            appendByte(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { appendByte(UInt8(ascii: ",")) }
                append(item)
            }
            appendByte(UInt8(ascii: "]"))
        case .object(let object):
            appendByte(UInt8(ascii: "{"))
            // By UTF-8 bytes, a total order: String's `<` is not one between a name written
            // with a combining mark and one with the composed letter (`e\u{301}` against
            // `\u{e9}x`), so the order written would change the text.
            for (index, member) in object.members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) })
                .enumerated() {
                if index > 0 { appendByte(UInt8(ascii: ",")) }
                appendString(member.key)
                appendByte(UInt8(ascii: ":"))
                append(member.value)
            }
            appendByte(UInt8(ascii: "}"))
        }
    }
}

/// Writes one JSON object member by member, in the order they are given.
public struct JSONObjectWriter: Sendable {
    private var output: JSONText
    private var isFirst = true

    /// Starts an object; `capacity` is the expected size in bytes (a task is about 700).
    public init(capacity: Int = 64) {
        output = JSONText(capacity: capacity)
        output.appendByte(UInt8(ascii: "{"))
    }

    /// Starts an object at the end of `text`, taking its buffer over (so that a list of
    /// objects is written into one buffer, neither copied nor shared while it grows);
    /// `finishAppending(into:)` closes the object and gives the buffer back.
    public init(continuing text: inout JSONText) {
        output = JSONText.shared
        swap(&output, &text)
        output.appendByte(UInt8(ascii: "{"))
    }

    /// Member names are literals written in the source, which need no escaping: `,"name":`
    /// is copied in one go.
    private mutating func key(_ name: StaticString) {
        let comma = !isFirst
        isFirst = false
        output.appendKey(name, afterComma: comma)
    }

    /// Writes `null`.
    private mutating func null() { output.appendLiteral("null") }

    public mutating func string(_ name: StaticString, _ value: String?) {
        key(name)
        if let value { output.appendString(value) } else { null() }
    }

    public mutating func integer(_ name: StaticString, _ value: Int64?) {
        key(name)
        if let value { output.appendInteger(value) } else { null() }
    }

    public mutating func number(_ name: StaticString, _ value: Double?) {
        key(name)
        if let value { output.appendNumber(value) } else { null() }
    }

    /// A time as RFC 3339 text (`Timestamp.rfc3339`), or `null`.
    public mutating func timestamp(_ name: StaticString, _ value: EpochMilliseconds?) {
        key(name)
        if let value { output.appendTimestamp(value) } else { null() }
    }

    public mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        output.appendLiteral(value ? "true" : "false")
    }

    /// Appends a member whose value is already JSON text (or `null` when nil).
    public mutating func raw(_ name: StaticString, _ json: String?) {
        key(name)
        if let json { output.appendRaw(json) } else { null() }
    }

    /// Closes the object and gives the buffer back to `text`, the text it continued
    /// (`init(continuing:)`).
    public mutating func finishAppending(into text: inout JSONText) {
        output.appendByte(UInt8(ascii: "}"))
        swap(&output, &text)
    }

    /// The finished object; the writer is done with it (a second call would close the
    /// object again). Mutating, not consuming: a consuming call left the caller's copy
    /// holding the buffer too, so closing the object copied it whole first.
    public mutating func finish() -> String {
        output.appendByte(UInt8(ascii: "}"))  // the buffer is this writer's alone: no copy
        return output.text
    }
}

extension JSONText {
    /// `json`, JSON text written elsewhere (a server's reply), with every control character
    /// written as a `\u` escape: C0 but the whitespace JSON allows between tokens (tab, line
    /// feed, carriage return), DEL and C1. Valid JSON can hold DEL and C1 raw only inside
    /// strings (and those C0 controls nowhere), where the escape stands for the same
    /// character: valid JSON stays valid and means the same, and text that is not JSON
    /// cannot drive the terminal either.
    public static func escapingControls(_ json: String) -> String {
        let scalars = json.unicodeScalars
        let isControl = { (scalar: Unicode.Scalar) -> Bool in
            (scalar.value < 0x20 && scalar != "\t" && scalar != "\n" && scalar != "\r") || (0x7F...0x9F).contains(scalar.value)
        }
        guard scalars.contains(where: isControl) else { return json }
        var escaped = String.UnicodeScalarView()
        for scalar in scalars {
            guard isControl(scalar) else {
                escaped.append(scalar)
                continue
            }
            let hex = String(scalar.value, radix: 16)
            escaped.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
        }
        return String(escaped)
    }
}

/// The bytes of a `JSONText`: a buffer written through its pointer. Callers reserve room
/// first (`reserve`), then append without further checks. A `JSONText` copies it before
/// writing to one it shares, so texts keep value semantics.
private final class JSONBytes: @unchecked Sendable {
    private var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = .allocate(capacity: capacity)
    }

    deinit { base.deallocate() }

    func copy() -> JSONBytes {
        let copy = JSONBytes(capacity: Swift.max(capacity, 1))
        copy.base.update(from: base, count: count)
        copy.count = count
        return copy
    }

    /// Makes room for `extra` more bytes, doubling the buffer when it grows.
    @inline(__always)
    func reserve(_ extra: Int) {
        if count + extra > capacity { grow(toAtLeast: count + extra) }
    }

    private func grow(toAtLeast needed: Int) {
        let larger = Swift.max(needed, capacity * 2)
        let moved = UnsafeMutablePointer<UInt8>.allocate(capacity: larger)
        moved.moveInitialize(from: base, count: count)
        base.deallocate()
        (base, capacity) = (moved, larger)
    }

    /// Appends one byte; room for it was reserved.
    @inline(__always)
    func append(_ byte: UInt8) {
        (base + count).initialize(to: byte)
        count += 1
    }

    /// Appends `bytes`; room for them was reserved.
    @inline(__always)
    func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        (base + count).initialize(from: source, count: bytes.count)
        count += bytes.count
    }

    /// Lets `write` fill at most `limit` bytes (reserved) and keeps the count it returns.
    @inline(__always)
    func appendWritten(upTo limit: Int, _ write: (UnsafeMutableBufferPointer<UInt8>) -> Int) {
        count += write(UnsafeMutableBufferPointer(start: base + count, count: limit))
    }

    func withBytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        body(UnsafeBufferPointer(start: base, count: count))
    }
}

extension JSONText {
    /// `items` as a JSON array of strings.
    package static func stringArray(_ items: [String]) -> String {
        var text = JSONText()
        text.appendRaw("[")
        for (index, item) in items.enumerated() {
            if index > 0 { text.appendRaw(",") }
            text.appendString(item)
        }
        text.appendRaw("]")
        return text.text
    }
}
