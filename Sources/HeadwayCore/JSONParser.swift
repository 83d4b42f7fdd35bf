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

    private let bytes: [UInt8]
    private var position = 0

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Parses one JSON text (an optional UTF-8 byte-order mark is skipped).
    public static func parse<Bytes: Collection<UInt8>>(_ input: Bytes) -> Result<JSONValue, Failure> {
        var parser = JSONParser(Array(input))
        if parser.bytes.starts(with: [0xEF, 0xBB, 0xBF]) { parser.position = 3 }
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

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw failure("nested too deeply") }
        position += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        // Room for a request's members at once, rather than growing at 1, 2, 4 and 8.
        members.reserveCapacity(12)
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw failure("expected a member name") }
            let nameOffset = position
            let name = try string()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw failure("expected ':'") }
            position += 1
            let member = try value(depth: depth)
            guard members.updateValue(member, forKey: name) == nil else {
                throw Failure(offset: nameOffset, reason: "duplicate member name \"\(name)\"")
            }
            skipWhitespace()
            guard position < bytes.count else { throw failure("unexpected end of text") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "}") { position += 1; return .object(members) }
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
        // Fast path: no escapes.
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let text = try utf8(bytes[start..<position])
                position += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw failure("control character in a string") }
            position += 1
        }
        var decoded = Array(bytes[start..<position])
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return try utf8(decoded[...])
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

    private func utf8(_ slice: ArraySlice<UInt8>) throws(Failure) -> String {
        // Validated as one contiguous buffer (the generic path goes byte by byte); ASCII,
        // the common case, needs no validation at all.
        let text = slice.withUnsafeBufferPointer { buffer in
            buffer.allSatisfy { $0 < 0x80 } ? String(decoding: buffer, as: UTF8.self) : String(validating: buffer, as: UTF8.self)
        }
        guard let text else { throw failure("invalid UTF-8") }
        return text
    }

    private mutating func number() throws(Failure) -> JSONValue {
        let start = position
        var isWhole = true
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, isDigit(bytes[position]) else { throw failure("invalid number") }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
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
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if isWhole, let integer = Int64(text) { return .integer(integer) }
        guard let real = Double(text), real.isFinite else { throw Failure(offset: start, reason: "number out of range") }
        // An integral value written with a fraction or exponent (1.0, 1e3) is still a whole number.
        if real == real.rounded(), abs(real) < 9.2e18 { return .integer(Int64(real)) }
        return .number(real)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
