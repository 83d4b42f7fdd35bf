/// A parsed JSON value, as strict as the API needs: integers are kept apart from
/// fractional numbers so that "an integer" can be checked exactly.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

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
/// order is fixed and no intermediate objects or strings are built.
public struct JSONText: Sendable {
    /// The UTF-8 bytes written so far.
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// The text written so far.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// Reserves room for `count` bytes of text.
    public mutating func reserveCapacity(_ count: Int) { bytes.reserveCapacity(count) }

    /// Appends `raw` as it is (it must already be valid JSON).
    public mutating func appendRaw(_ raw: String) {
        var raw = raw
        raw.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// Appends one byte of JSON punctuation (`,`, `:`, brackets).
    public mutating func appendByte(_ byte: UInt8) { bytes.append(byte) }

    /// Appends bytes that are already valid JSON text.
    public mutating func appendBytes(_ raw: UnsafeBufferPointer<UInt8>) { bytes.append(contentsOf: raw) }

    /// Appends a JSON string literal with the escapes RFC 8259 requires.
    public mutating func appendString(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        // Fast path: most strings need no escape (no control characters, quotes,
        // backslashes, nor U+2028/U+2029, whose UTF-8 starts with 0xE2); scanned and
        // copied as one contiguous buffer.
        var value = value
        let plain = value.withUTF8 { utf8 in
            for byte in utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0xE2 { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if !plain {
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
                    if scalar.value < 0x20 {
                        let hex = String(scalar.value, radix: 16)
                        appendRaw("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
                    } else {
                        bytes.append(contentsOf: String(scalar).utf8)
                    }
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends a time as a JSON string (`Timestamp.rfc3339`), without building the string.
    public mutating func appendTimestamp(_ milliseconds: EpochMilliseconds) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Timestamp.length + 2) { buffer in
            buffer[0] = UInt8(ascii: "\"")
            Timestamp.write(milliseconds, into: UnsafeMutableBufferPointer(rebasing: buffer[1...]))
            buffer[Timestamp.length + 1] = UInt8(ascii: "\"")
            bytes.append(contentsOf: buffer)
        }
    }

    /// Appends an integer, digit by digit.
    public mutating func appendInteger(_ value: Int64) {
        if value < 0 {
            bytes.append(UInt8(ascii: "-"))
            // The magnitude of Int64.min does not fit in Int64.
            appendDigits(value.magnitude)
        } else {
            appendDigits(UInt64(value))
        }
    }

    private mutating func appendDigits(_ value: UInt64) {
        var digits: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)  // 40 bytes: room for 20 digits
        var count = 0
        var rest = value
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[39 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            } while rest > 0
            bytes.append(contentsOf: buffer[(40 - count)...])
        }
    }

    /// Appends a finite number, or `null` for NaN and infinities (which JSON cannot carry).
    public mutating func appendNumber(_ value: Double) {
        guard value.isFinite else { return appendRaw("null") }
        if value == value.rounded(), abs(value) < 1e15 {
            appendInteger(Int64(value))
        } else {
            appendRaw(value.description)  // the shortest text that reads back as `value`
        }
    }

    /// Appends any parsed value; object keys come out sorted.
    public mutating func append(_ value: JSONValue) {
        switch value {
        case .null: appendRaw("null")
        case .bool(let flag): appendRaw(flag ? "true" : "false")
        case .integer(let number): appendInteger(number)
        case .number(let number): appendNumber(number)
        case .string(let string): appendString(string)
        case .array(let items):
            bytes.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                append(item)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                appendString(key)
                bytes.append(UInt8(ascii: ":"))
                append(members[key]!)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }
}

/// Writes one JSON object member by member, in the order they are given.
public struct JSONObjectWriter: Sendable {
    private var output = JSONText()
    private var isFirst = true

    /// Starts an object; `capacity` is the expected size in bytes (a task is about 700).
    public init(capacity: Int = 64) {
        output.reserveCapacity(capacity)
        output.appendByte(UInt8(ascii: "{"))
    }

    /// Starts an object at the end of `text`, taking its buffer over (so that a list of
    /// objects is written into one buffer, neither copied nor shared while it grows);
    /// `finishAppending(into:)` closes the object and gives the buffer back.
    public init(continuing text: inout JSONText) {
        swap(&output, &text)
        output.appendByte(UInt8(ascii: "{"))
    }

    /// Member names are literals written in the source, which need no escaping: their
    /// bytes are copied as they are.
    private mutating func key(_ name: StaticString) {
        if !isFirst { output.appendByte(UInt8(ascii: ",")) }
        isFirst = false
        output.appendByte(UInt8(ascii: "\""))
        name.withUTF8Buffer { output.appendBytes($0) }
        output.appendByte(UInt8(ascii: "\""))
        output.appendByte(UInt8(ascii: ":"))
    }

    public mutating func string(_ name: StaticString, _ value: String?) {
        key(name)
        if let value { output.appendString(value) } else { output.appendRaw("null") }
    }

    public mutating func integer(_ name: StaticString, _ value: Int64?) {
        key(name)
        if let value { output.appendInteger(value) } else { output.appendRaw("null") }
    }

    public mutating func number(_ name: StaticString, _ value: Double?) {
        key(name)
        if let value { output.appendNumber(value) } else { output.appendRaw("null") }
    }

    /// A time as RFC 3339 text (`Timestamp.rfc3339`), or `null`.
    public mutating func timestamp(_ name: StaticString, _ value: EpochMilliseconds?) {
        key(name)
        if let value { output.appendTimestamp(value) } else { output.appendRaw("null") }
    }

    public mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        output.appendRaw(value ? "true" : "false")
    }

    /// Appends a member whose value is already JSON text (or `null` when nil).
    public mutating func raw(_ name: StaticString, _ json: String?) {
        key(name)
        output.appendRaw(json ?? "null")
    }

    /// Closes the object and gives the buffer back to `text`, the text it continued
    /// (`init(continuing:)`).
    public mutating func finishAppending(into text: inout JSONText) {
        output.appendByte(UInt8(ascii: "}"))
        swap(&output, &text)
    }

    /// The finished object.
    public func finish() -> String {
        var output = output
        output.appendByte(UInt8(ascii: "}"))
        return output.text
    }
}
