import Testing
@testable import HeadwayCore

/// Query parameters are read strictly: plain decimal numbers only, and an empty choice is
/// an error rather than silently nothing.
@Suite struct QueryReaderTests {
    private enum Color: String { case red, blue }

    private func reader(_ name: String, _ value: String) -> QueryReader {
        QueryReader([(name, value)], allowed: [name])
    }

    @Test(arguments: ["+5", "-1", "0x10", "1e3", " 5", "5 ", "", "5.0", "１"])
    func wholeNumbersAreDigitsOnly(_ text: String) {
        var query = reader("page_size", text)
        #expect(query.integer("page_size", in: 0...1000) == nil, "'\(text)' was read")
        #expect(query.errors.map(\.field) == ["page_size"])
    }

    @Test(arguments: ["0x10", "+1", "1e1", ".5", "5.", "inf", "nan", "1..2", ""])
    func numbersAreDecimalOnly(_ text: String) {
        var query = reader("min_duration", text)
        #expect(query.number("min_duration", in: 0...86_400, unit: "seconds") == nil, "'\(text)' was read")
        #expect(query.errors.first?.message == "must be a number of seconds from 0 to 86400")
    }

    @Test func plainNumbersAreRead() {
        var query = QueryReader([("a", "42"), ("b", "2.5"), ("c", "0")], allowed: ["a", "b", "c"])
        #expect(query.integer("a", in: 0...100) == 42)
        #expect(query.number("b", in: 0...10, unit: "seconds") == 2.5)
        #expect(query.number("c", in: 0...10, unit: "seconds") == 0)
        #expect(query.errors.isEmpty)
    }

    @Test(arguments: ["", ",", "red,", ",blue"])
    func anEmptyChoiceIsAnError(_ text: String) {
        var query = reader("color", text)
        _ = query.choices("color", of: [Color.red, .blue])
        #expect(query.errors.map(\.message) .contains("must be red or blue"), "'\(text)' was accepted")
    }
}
