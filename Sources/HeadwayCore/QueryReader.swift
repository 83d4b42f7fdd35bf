/// Reads typed query parameters (`?state=running&page_size=20`) and collects one message per
/// bad parameter, so a client learns everything wrong with a query at once — the twin of
/// `FieldReader` for request bodies. A parameter given more than once is an error unless it
/// is read as repeatable.
public struct QueryReader {
    private let parameters: [(name: String, value: String)]
    /// The messages collected so far.
    public private(set) var errors: [FieldError] = []

    /// Starts reading `parameters` (in the order sent), whose names must all be in `allowed`.
    public init(_ parameters: [(name: String, value: String)], allowed: Set<String>) {
        self.parameters = parameters
        for parameter in parameters where !allowed.contains(parameter.name) {
            errors.append(FieldError(field: parameter.name, message: "is not a known query parameter"))
        }
    }

    /// Records a message about `name` (for rules that span parameters).
    public mutating func fail(_ name: String, _ message: String) {
        errors.append(FieldError(field: name, message: message))
    }

    /// Every value of a repeatable parameter, in the order sent.
    public func values(_ name: String) -> [String] {
        parameters.filter { $0.name == name }.map(\.value)
    }

    /// The value of a parameter that may be given at most once.
    public mutating func single(_ name: String) -> String? {
        let values = values(name)
        if values.count > 1 { fail(name, "may be given only once") }
        return values.first
    }

    /// `true` or `false`.
    public mutating func boolean(_ name: String) -> Bool? {
        guard let text = single(name) else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default:
            fail(name, "must be true or false")
            return nil
        }
    }

    /// A whole number in `range`.
    public mutating func integer(_ name: String, in range: ClosedRange<Int>) -> Int? {
        guard let text = single(name) else { return nil }
        guard Self.isDecimal(text, fraction: false), let number = Int(text), range.contains(number) else {
            fail(name, "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
            return nil
        }
        return number
    }

    /// A finite number in `range`, e.g. seconds.
    public mutating func number(_ name: String, in range: ClosedRange<Double>, unit: String) -> Double? {
        guard let text = single(name) else { return nil }
        guard Self.isDecimal(text, fraction: true), let number = Double(text), range.contains(number) else {
            fail(name, "must be a number of \(unit) from \(Self.plain(range.lowerBound)) to \(Self.plain(range.upperBound))")
            return nil
        }
        return number
    }

    /// A search text given at most once: 1…`maxLength` Unicode scalars, none of them a
    /// control character (C0, DEL, C1), which no name or id worth finding holds.
    public mutating func searchText(_ name: String, maxLength: Int) -> String? {
        guard let text = single(name) else { return nil }
        let scalars = text.unicodeScalars
        guard !scalars.isEmpty, scalars.count <= maxLength else {
            fail(name, "must be 1 to \(maxLength) characters")
            return nil
        }
        guard !scalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            fail(name, "must not contain control characters")
            return nil
        }
        return text
    }

    /// A task id given at most once.
    public mutating func id(_ name: String) -> String? {
        guard let text = single(name) else { return nil }
        guard TaskID.isValid(text) else {
            fail(name, "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}")
            return nil
        }
        return text
    }

    /// The valid task ids of a repeatable parameter (a message for each invalid one).
    public mutating func ids(_ name: String) -> [String] {
        values(name).filter { text in
            if TaskID.isValid(text) { return true }
            fail(name, "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}")
            return false
        }
    }

    /// The choices of a repeatable parameter whose values may also be comma-separated
    /// (`state=running,pending&state=failed`), each once, in the order first given.
    public mutating func choices<Choice: RawRepresentable<String> & Equatable>(
        _ name: String, of allowed: [Choice]
    ) -> [Choice] {
        var chosen: [Choice] = []
        for text in values(name).flatMap({ $0.split(separator: ",", omittingEmptySubsequences: false) }) {
            guard let choice = Choice(rawValue: String(text)), allowed.contains(choice) else {
                fail(name, "must be \(Self.list(allowed.map(\.rawValue)))")
                continue
            }
            if !chosen.contains(choice) { chosen.append(choice) }
        }
        return chosen
    }

    /// Plain decimal digits (`12`, or with `fraction` also `1.5`): no sign, exponent, hex
    /// or spaces, which Swift's own number parsing would accept (`0x10`, `+5`, `1e3`).
    static func isDecimal(_ text: String, fraction: Bool) -> Bool {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 1 || (fraction && parts.count == 2) else { return false }
        return parts.allSatisfy { part in !part.isEmpty && part.count <= 18 && part.allSatisfy { (48...57).contains($0) } }
    }

    /// "a, b or c".
    private static func list(_ names: [String]) -> String {
        names.count < 2 ? names.joined() : names.dropLast().joined(separator: ", ") + " or " + names.last!
    }

    /// A number without a needless `.0`.
    private static func plain(_ number: Double) -> String {
        number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}
