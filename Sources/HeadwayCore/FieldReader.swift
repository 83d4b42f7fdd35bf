/// Reads typed fields out of a JSON object and collects one message per bad field, so a
/// client learns everything wrong with a request at once. A `null` member counts as absent.
public struct FieldReader {
    /// The object's members. The objects read are small (a body's dozen fields at most,
    /// once unknown ones are refused) with short names, which a scan compares for less
    /// than hashing them would cost.
    private let members: JSONObject
    /// The messages collected so far.
    public private(set) var errors: [FieldError] = []

    /// Starts reading `value`, which must be an object whose keys are all in `allowed`.
    public init(_ value: JSONValue, allowed: [String]) {
        guard case .object(let object) = value else {
            members = JSONObject()
            errors.append(FieldError(field: "(body)", message: "must be a JSON object, not \(value.typeName)"))
            return
        }
        members = object
        // Sorted (for a stable order of the messages) only when there is something to say.
        guard !object.members.allSatisfy({ member in allowed.contains { $0.isSameText(as: member.key) } }) else { return }
        for key in object.keys.sorted() where !allowed.contains(key) {
            errors.append(FieldError(field: key, message: "is not a known field"))
        }
    }

    private mutating func fail<Value>(_ field: String, _ message: String) -> Value? {
        errors.append(FieldError(field: field, message: message))
        return nil
    }

    private func present(_ field: String) -> JSONValue? {
        guard let value = members[field] else { return nil }
        if case .null = value { return nil }
        return value
    }

    /// A string of 1…`maxLength` Unicode scalars that is not only white space.
    public mutating func string(_ field: String, maxLength: Int, required: Bool = false) -> String? {
        guard let value = present(field) else {
            return required ? fail(field, "is required") : nil
        }
        guard case .string(let text) = value else { return fail(field, "must be a string, not \(value.typeName)") }
        // A scalar takes one to four bytes: a text of at most `maxLength` bytes is short enough.
        if text.utf8.count > maxLength {
            let length = text.unicodeScalars.count
            if length > maxLength { return fail(field, "must be at most \(maxLength) characters (got \(length))") }
        }
        // A text that begins with a visible ASCII character is not blank, and needs no look
        // at Unicode's properties.
        let startsVisible = text.utf8.first.map { $0 > 0x20 && $0 < 0x7F } ?? false
        if !startsVisible && text.allSatisfy(\.isWhitespace) { return fail(field, "must not be empty or blank") }
        // U+0000 is the only scalar whose UTF-8 holds a zero byte.
        if text.withUTF8Bytes({ $0.contains(0) }) { return fail(field, "must not contain NUL") }
        return text
    }

    /// A task id (`[A-Za-z0-9._~:-]{1,128}`), not `.` or `..` (a URL path cannot carry
    /// those: browsers fold them away, even percent-encoded).
    public mutating func id(_ field: String, required: Bool = false) -> String? {
        guard let value = present(field) else {
            return required ? fail(field, "is required") : nil
        }
        guard case .string(let text) = value else { return fail(field, "must be a string, not \(value.typeName)") }
        guard TaskID.isValid(text) else { return fail(field, "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}") }
        guard !TaskID.isDotSegment(text) else { return fail(field, "must not be '.' or '..' (a URL cannot name it)") }
        return text
    }

    /// A whole number in `range` (0…2^53−1 unless narrower).
    public mutating func integer(_ field: String, in range: ClosedRange<Int64> = 0...Limits.maxCount) -> Int64? {
        guard let value = present(field) else { return nil }
        switch value {
        case .integer(let number) where range.contains(number):
            return number
        case .integer:
            return fail(field, "must be between \(range.lowerBound) and \(range.upperBound)")
        case .number(let number) where number == number.rounded():
            return fail(field, "must be between \(range.lowerBound) and \(range.upperBound)")
        case .number:
            return fail(field, "must be a whole number")
        default:
            return fail(field, "must be a number, not \(value.typeName)")
        }
    }

    /// A finite number in `range`.
    public mutating func number(_ field: String, in range: ClosedRange<Double>) -> Double? {
        guard let value = present(field) else { return nil }
        let number: Double
        switch value {
        case .integer(let whole): number = Double(whole)
        case .number(let real): number = real
        default: return fail(field, "must be a number, not \(value.typeName)")
        }
        guard range.contains(number) else {
            return fail(field, "must be between \(JSONValue.number(range.lowerBound).canonicalText) and \(JSONValue.number(range.upperBound).canonicalText)")
        }
        return number
    }

    /// An RFC 3339 date-time with its offset (`Timestamp.parseRFC3339`), as milliseconds since the epoch.
    public mutating func timestamp(_ field: String) -> EpochMilliseconds? {
        guard let value = present(field) else { return nil }
        guard case .string(let text) = value, let milliseconds = Timestamp.parseRFC3339(text) else {
            return fail(field, "must be an RFC 3339 date-time with an offset, such as 2026-12-05T09:30:00Z")
        }
        return milliseconds
    }

    /// One of the raw values of `Choice`, limited to `allowed`.
    public mutating func choice<Choice: RawRepresentable<String>>(_ field: String, of allowed: [Choice],
                                                                 required: Bool = false) -> Choice? {
        guard let value = present(field) else {
            return required ? fail(field, "is required") : nil
        }
        let names = allowed.map(\.rawValue)
        guard case .string(let text) = value, names.contains(text), let choice = Choice(rawValue: text) else {
            return fail(field, "must be one of: \(names.joined(separator: ", "))")
        }
        return choice
    }

    /// An array, its items as they are.
    public mutating func array(_ field: String, required: Bool = false) -> [JSONValue]? {
        guard let value = present(field) else {
            return required ? fail(field, "is required") : nil
        }
        guard case .array(let items) = value else { return fail(field, "must be an array, not \(value.typeName)") }
        return items
    }

    /// Lines of output (`OutputTail`): an array of at most `maxCount` strings, each of at
    /// most `maxLength` Unicode scalars and without NUL (empty ones and any other control
    /// character are kept as sent). A bad line is named by its place (`output[3]`).
    public mutating func lines(_ field: String, maxCount: Int, maxLength: Int) -> [String]? {
        guard let value = present(field) else { return nil }
        guard case .array(let items) = value else { return fail(field, "must be an array of strings, not \(value.typeName)") }
        guard items.count <= maxCount else { return fail(field, "must hold at most \(maxCount) lines (got \(items.count))") }
        var lines: [String] = []
        lines.reserveCapacity(items.count)
        var valid = true
        for (index, item) in items.enumerated() {
            let name = "\(field)[\(index)]"
            guard case .string(let text) = item else {
                valid = false
                errors.append(FieldError(field: name, message: "must be a string, not \(item.typeName)"))
                continue
            }
            if text.utf8.count > maxLength, text.unicodeScalars.count > maxLength {
                valid = false
                errors.append(FieldError(field: name, message: "must be at most \(maxLength) characters (got \(text.unicodeScalars.count))"))
            } else if text.withUTF8Bytes({ $0.contains(0) }) {
                valid = false
                errors.append(FieldError(field: name, message: "must not contain NUL"))
            } else {
                lines.append(text)
            }
        }
        return valid ? lines : nil
    }

    /// A JSON object whose canonical text is at most `maxBytes` bytes; returns that text.
    public mutating func object(_ field: String, maxBytes: Int) -> String? {
        guard let value = present(field) else { return nil }
        guard case .object = value else { return fail(field, "must be an object, not \(value.typeName)") }
        let text = value.canonicalText
        guard text.utf8.count <= maxBytes else {
            return fail(field, "must be at most \(maxBytes) bytes as JSON (got \(text.utf8.count))")
        }
        return text
    }
}
