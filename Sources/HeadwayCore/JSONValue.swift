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

/// Appends JSON text piece by piece; used for replies so that field order is fixed and
/// no intermediate objects are built.
public struct JSONText: Sendable {
    /// The text written so far.
    public private(set) var text = ""

    public init() {}

    /// Reserves room for `bytes` of text.
    public mutating func reserveCapacity(_ bytes: Int) { text.reserveCapacity(bytes) }

    /// Appends `raw` as it is (it must already be valid JSON).
    public mutating func appendRaw(_ raw: String) { text += raw }

    /// Appends a JSON string literal with the escapes RFC 8259 requires.
    public mutating func appendString(_ value: String) {
        // Fast path: most strings need no escape (no control characters, quotes,
        // backslashes, nor U+2028/U+2029, whose UTF-8 starts with 0xE2).
        if value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x22 && $0 != 0x5C && $0 != 0xE2 }) {
            text += "\""
            text += value
            text += "\""
            return
        }
        text.append("\"")
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case "\u{2028}": text += "\\u2028"
            case "\u{2029}": text += "\\u2029"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    text.unicodeScalars.append(scalar)
                }
            }
        }
        text.append("\"")
    }

    /// Appends a finite number, or `null` for NaN and infinities (which JSON cannot carry).
    public mutating func appendNumber(_ value: Double) {
        guard value.isFinite else { text += "null"; return }
        if value == value.rounded(), abs(value) < 1e15 {
            text += String(Int64(value))
        } else {
            text += "\(value)"
        }
    }

    /// Appends any parsed value; object keys come out sorted.
    public mutating func append(_ value: JSONValue) {
        switch value {
        case .null: text += "null"
        case .bool(let flag): text += flag ? "true" : "false"
        case .integer(let number): text += String(number)
        case .number(let number): appendNumber(number)
        case .string(let string): appendString(string)
        case .array(let items):
            text += "["
            for (index, item) in items.enumerated() {
                if index > 0 { text += "," }
                append(item)
            }
            text += "]"
        case .object(let members):
            text += "{"
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { text += "," }
                appendString(key)
                text += ":"
                append(members[key]!)
            }
            text += "}"
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
        output.appendRaw("{")
    }

    private mutating func key(_ name: String) {
        if !isFirst { output.appendRaw(",") }
        isFirst = false
        output.appendString(name)
        output.appendRaw(":")
    }

    public mutating func string(_ name: String, _ value: String?) {
        key(name)
        if let value { output.appendString(value) } else { output.appendRaw("null") }
    }

    public mutating func integer(_ name: String, _ value: Int64?) {
        key(name)
        output.appendRaw(value.map { String($0) } ?? "null")
    }

    public mutating func number(_ name: String, _ value: Double?) {
        key(name)
        if let value { output.appendNumber(value) } else { output.appendRaw("null") }
    }

    public mutating func bool(_ name: String, _ value: Bool) {
        key(name)
        output.appendRaw(value ? "true" : "false")
    }

    /// Appends a member whose value is already JSON text (or `null` when nil).
    public mutating func raw(_ name: String, _ json: String?) {
        key(name)
        output.appendRaw(json ?? "null")
    }

    /// The finished object.
    public func finish() -> String { output.text + "}" }
}
