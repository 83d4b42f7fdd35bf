extension ProgressUpdate {
    /// The update in a body of the shape runners send, read straight from its bytes without
    /// building a `JSONValue` tree: one flat object whose members are known ones, each at
    /// most once, and whose values are `null`, whole numbers of at most 15 plain digits (so
    /// within `0…Limits.maxCount`), or strings of printable ASCII without escapes that
    /// begin with a visible character and fit their field.
    ///
    /// Nil for any other body, valid or not, which `parse` then reads and judges: so a
    /// result is exactly what `parse(JSONParser.parse(body))` gives for the same bytes, and
    /// every refusal, with its message, comes from the one general path. Building and
    /// reading the tree was about 4 % of the CPU of a progress update.
    public static func readPlain(_ body: UnsafeBufferPointer<UInt8>) -> ProgressUpdate? {
        var scanner = PlainBodyScanner(body)
        return scanner.progressUpdate()
    }
}

/// Reads `ProgressUpdate.readPlain`'s shape of body; every method returns nil (or false) at
/// the first byte outside that shape.
private struct PlainBodyScanner {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// A progress body's members, with the bit each sets in a mask of those read.
    private enum Member: UInt8 {
        case completed = 1, increment = 2, total = 4, unit = 8, label = 16, seq = 32

        /// The member named by `name` (its bytes between the quotes), if it is one.
        init?(_ name: UnsafeBufferPointer<UInt8>) {
            // A loop over the bytes: `elementsEqual` is generic and cost several times more.
            func named(_ text: StaticString) -> Bool {
                let expected = text.utf8Start
                for index in 0..<name.count where name[index] != expected[index] { return false }
                return true
            }
            switch name.count {
            case 3 where named("seq"): self = .seq
            case 4 where named("unit"): self = .unit
            case 5 where named("total"): self = .total
            case 5 where named("label"): self = .label
            case 9 where named("completed"): self = .completed
            case 9 where named("increment"): self = .increment
            default: return nil
            }
        }

        /// The longest string the member takes, in characters (nil: it takes a number).
        var maximumLength: Int? {
            switch self {
            case .unit: Limits.unitLength
            case .label: Limits.labelLength
            case .completed, .increment, .total, .seq: nil
            }
        }
    }

    /// A member's value: absent (`null`), a whole number or a string.
    private enum Value {
        case absent
        case integer(Int64)
        case string(String)
    }

    mutating func progressUpdate() -> ProgressUpdate? {
        skipWhitespace()
        guard take(UInt8(ascii: "{")) else { return nil }
        var update = ProgressUpdate()
        var read: UInt8 = 0
        skipWhitespace()
        if !take(UInt8(ascii: "}")) {
            while true {
                skipWhitespace()
                guard let name = quotedASCII(), let member = Member(name), read & member.rawValue == 0 else { return nil }
                read |= member.rawValue
                skipWhitespace()
                guard take(UInt8(ascii: ":")) else { return nil }
                skipWhitespace()
                guard let value = value(for: member) else { return nil }
                store(value, as: member, in: &update)
                skipWhitespace()
                if take(UInt8(ascii: ",")) { continue }
                guard take(UInt8(ascii: "}")) else { return nil }
                break
            }
        }
        skipWhitespace()
        return position == bytes.count ? update : nil
    }

    private func store(_ value: Value, as member: Member, in update: inout ProgressUpdate) {
        switch (member, value) {
        case (_, .absent): break
        case (.completed, .integer(let number)): update.completed = number
        case (.increment, .integer(let number)): update.increment = number
        case (.total, .integer(let number)): update.total = number
        case (.seq, .integer(let number)): update.runnerSeq = number
        case (.unit, .string(let text)): update.unit = text
        case (.label, .string(let text)): update.label = text
        default: preconditionFailure("value(for:) reads the kind of value the member takes")
        }
    }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    /// Steps over `byte` if it comes next.
    private mutating func take(_ byte: UInt8) -> Bool {
        guard position < bytes.count, bytes[position] == byte else { return false }
        position += 1
        return true
    }

    /// The bytes between the quotes of a member name or a string value made of printable
    /// ASCII without escapes; the position is then after its closing quote.
    private mutating func quotedASCII() -> UnsafeBufferPointer<UInt8>? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        // A local index over the base address: the loop keeps it in a register.
        let start = position
        guard let base = bytes.baseAddress else { return nil }
        var end = start
        while end < bytes.count {
            let byte = base[end]
            if byte == UInt8(ascii: "\"") { break }
            // 0x20…0x7E in one comparison (what is below 0x20 wraps around to above).
            guard byte &- 0x20 < 0x5F, byte != UInt8(ascii: "\\") else { return nil }
            end += 1
        }
        guard end < bytes.count else { return nil }
        position = end + 1
        return UnsafeBufferPointer(start: base + start, count: end - start)
    }

    /// `null`, or the kind of value `member` takes in the plain shape.
    private mutating func value(for member: Member) -> Value? {
        guard position < bytes.count else { return nil }
        if bytes[position] == UInt8(ascii: "n") {
            guard bytes.count - position >= 4, bytes[position + 1] == UInt8(ascii: "u"),
                  bytes[position + 2] == UInt8(ascii: "l"), bytes[position + 3] == UInt8(ascii: "l") else { return nil }
            position += 4
            return .absent
        }
        if let maximumLength = member.maximumLength {
            guard let text = quotedASCII(), let first = text.first, first > 0x20, text.count <= maximumLength else { return nil }
            return .string(String(decoding: text, as: UTF8.self))
        }
        return wholeNumber().map(Value.integer)
    }

    /// Plain digits: `0`, or up to 15 digits without a leading zero, followed by neither
    /// another digit nor a fraction or exponent.
    private mutating func wholeNumber() -> Int64? {
        let start = position
        var number: Int64 = 0
        while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
            number = number * 10 + Int64(bytes[position] - UInt8(ascii: "0"))
            position += 1
            if position - start > 15 { return nil }
        }
        let digits = position - start
        guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
        if position < bytes.count {
            switch bytes[position] {
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): return nil
            default: break
            }
        }
        return number
    }
}
