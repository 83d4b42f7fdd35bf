/// A strict RFC 8259 parser for request bodies, working on the bytes directly.
///
/// Strict where it matters for an API: no trailing commas, no duplicate member names (two
/// readers could disagree on which one counts), no NaN or Infinity, no raw control
/// characters or invalid UTF-8 in strings, no lone surrogates, at most `maximumDepth`
/// levels of nesting. Whole numbers that fit in 64 bits stay exact integers. Replaces
/// Foundation's JSONDecoder on the hot path, which cost ~15% of the daemon's CPU.
public struct JSONParser {
    /// Why a text is not acceptable JSON, and where.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        /// Byte offset of the problem.
        public var offset: Int
        public var reason: String
        public var description: String { "\(reason) at byte \(offset)" }
    }

    /// Deeper nesting is refused (request bodies are small objects).
    public static let maximumDepth = 64

    /// The text, borrowed for the parse: reads go through the pointer, each after a
    /// check of `position` against `bytes.count`.
    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Parses one JSON text (an optional UTF-8 byte-order mark is skipped).
    public static func parse<Bytes: Collection<UInt8>>(_ input: Bytes) -> Result<JSONValue, Failure> {
        if let result = input.withContiguousStorageIfAvailable({ parse(text: $0) }) { return result }
        return Array(input).withUnsafeBufferPointer { parse(text: $0) }
    }

    private static func parse(text: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, Failure> {
        var parser = JSONParser(text)
        if text.starts(with: [0xEF, 0xBB, 0xBF]) { parser.position = 3 }
        do throws(Failure) {
            let value = try parser.value(depth: 0)
            parser.skipWhitespace()
            guard parser.position == parser.bytes.count else { throw parser.failure("unexpected text after the value") }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    private func failure(_ reason: String) -> Failure { Failure(offset: position, reason: reason) }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(Failure) -> JSONValue {
        skipWhitespace()
        guard position < bytes.count else { throw failure("unexpected end of text") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws(Failure) {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count,
              bytes[position..<position + count].elementsEqual(UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { throw failure("unexpected character") }
        position += count
    }

    /// Objects with more members than this find a repeated name through a set of the
    /// names; smaller ones by a scan of the members read so far.
    private static let scannedMembers = 16

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw failure("nested too deeply") }
        position += 1
        var members: [JSONObject.Element] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(JSONObject())
        }
        // Room for a request's members at once, rather than growing at 1, 2, 4 and 8.
        members.reserveCapacity(8)
        var names: Set<String> = []
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw failure("expected a member name") }
            let nameOffset = position
            let name = try string()
            let repeated: Bool
            if members.count < Self.scannedMembers {
                repeated = members.contains { $0.key == name }
            } else {
                if names.isEmpty { names = Set(members.lazy.map(\.key)) }
                repeated = !names.insert(name).inserted
            }
            guard !repeated else { throw Failure(offset: nameOffset, reason: "duplicate member name \"\(name)\"") }
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw failure("expected ':'") }
            position += 1
            members.append((name, try value(depth: depth)))
            skipWhitespace()
            guard position < bytes.count else { throw failure("unexpected end of text") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "}") { position += 1; return .object(JSONObject(distinctMembers: members)) }
            throw failure("expected ',' or '}'")
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw failure("nested too deeply") }
        position += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(items)
        }
        while true {
            items.append(try value(depth: depth))
            skipWhitespace()
            guard position < bytes.count else { throw failure("unexpected end of text") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "]") { position += 1; return .array(items) }
            throw failure("expected ',' or ']'")
        }
    }

    private mutating func string() throws(Failure) -> String {
        position += 1
        let start = position
        // Fast path: no escapes, and ASCII (which needs no validation) unless a byte says
        // otherwise. A local index, and the bytes' high bits gathered in one mask.
        var index = position
        var highBits: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            highBits |= byte
            index += 1
        }
        position = index
        if position < bytes.count, bytes[position] == UInt8(ascii: "\"") {
            let text = try utf8(UnsafeBufferPointer(rebasing: bytes[start..<position]), isASCII: highBits < 0x80)
            position += 1
            return text
        }
        if position < bytes.count, bytes[position] < 0x20 { throw failure("control character in a string") }
        var decoded = Array(bytes[start..<position])
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return try decoded.withUnsafeBufferPointer { decoded throws(Failure) in try utf8(decoded, isASCII: false) }
            case UInt8(ascii: "\\"):
                position += 1
                guard position < bytes.count else { throw failure("unexpected end of text") }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"),
                              bytes[position + 1] == UInt8(ascii: "u") else { throw failure("lone surrogate") }
                        position += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure("lone surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw failure("lone surrogate")
                    }
                    decoded.append(contentsOf: String(Unicode.Scalar(scalar)!).utf8)
                default:
                    throw failure("invalid escape")
                }
            default:
                if byte < 0x20 { throw failure("control character in a string") }
                decoded.append(byte)
                position += 1
            }
        }
        throw failure("unterminated string")
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard position + 4 <= bytes.count else { throw failure("unexpected end of text") }
        var value: UInt32 = 0
        for byte in bytes[position..<position + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("invalid \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        position += 4
        return value
    }

    private func utf8(_ text: UnsafeBufferPointer<UInt8>, isASCII: Bool) throws(Failure) -> String {
        // Validated as one contiguous buffer (the generic path goes byte by byte); ASCII,
        // the common case, needs no validation at all.
        if isASCII { return String(decoding: text, as: UTF8.self) }
        guard let text = String(validating: text, as: UTF8.self) else { throw failure("invalid UTF-8") }
        return text
    }

    private mutating func number() throws(Failure) -> JSONValue {
        let start = position
        var isWhole = true
        let isNegative = bytes[position] == UInt8(ascii: "-")
        if isNegative { position += 1 }
        guard position < bytes.count, isDigit(bytes[position]) else { throw failure("invalid number") }
        let digitsStart = position
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        let digitsEnd = position
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isWhole = false
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else { throw failure("invalid number") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isWhole = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard position < bytes.count, isDigit(bytes[position]) else { throw failure("invalid number") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        // Up to 18 digits always fit in Int64: summed here, without a String.
        if isWhole, digitsEnd - digitsStart <= 18 {
            var magnitude: Int64 = 0
            for index in digitsStart..<digitsEnd { magnitude = magnitude * 10 + Int64(bytes[index] &- UInt8(ascii: "0")) }
            return .integer(isNegative ? -magnitude : magnitude)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        if isWhole, let integer = Int64(text) { return .integer(integer) }
        guard let real = Double(text), real.isFinite else { throw Failure(offset: start, reason: "number out of range") }
        // An integral value written with a fraction or exponent (1.0, 1e3) is still a whole number.
        if real == real.rounded(), abs(real) < 9.2e18 { return .integer(Int64(real)) }
        return .number(real)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
