import Testing
@testable import HeadwayCore

@Suite struct JSONParserTests {
    @Test(arguments: [
        "NaN", "Infinity", "-Infinity", "{", #"{"a":}"#, "{} trailing", "'x'", "", "[1,]", #"{"a":1,}"#,
        "01", "1.", ".5", "+1", "1e", "-", "tru", "nul", "[1 2]", #"{"a" 1}"#, "{1:2}", #""\x""#,
        #""\ud800""#, #""\udc00x""#, #""\ud800\u0041""#, "\"tab\there\"", "1e999", "-1e400", #"{"a":1,"a":2}"#,
    ])
    func refusesWhatIsNotJSON(_ text: String) {
        #expect(JSONValue.parse(Array(text.utf8)) == nil, "\(text)")
    }

    @Test func refusesInvalidUTF8() {
        #expect(JSONValue.parse([0x22, 0xFF, 0xFE, 0x22]) == nil)
        #expect(JSONValue.parse([0x22, 0xC3, 0x22]) == nil)
    }

    @Test func refusesDeepNestingWithoutCrashing() {
        #expect(JSONValue.parse(Array(String(repeating: "[", count: 100_000).utf8)) == nil)
        let depth = JSONParser.maximumDepth
        let deepest = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(JSONValue.parse(Array(deepest.utf8)) != nil)
        #expect(JSONValue.parse(Array(("[" + deepest + "]").utf8)) == nil)
    }

    @Test func readsStringsWithEveryEscape() {
        let text = #""a\"b\\c\/d\be\ff\ng\rh\ti\u00e9\ud83d\ude00""#
        #expect(JSONValue.parse(Array(text.utf8)) == .string("a\"b\\c/d\u{8}e\u{c}f\ng\rh\ti\u{e9}\u{1F600}"))
        #expect(JSONValue.parse(Array("\"héllo 😀\"".utf8)) == .string("héllo 😀"))
        #expect(JSONValue.parse([0xEF, 0xBB, 0xBF] + Array("{}".utf8)) == .object([:]), "a byte-order mark is skipped")
    }

    @Test func wholeNumbersStayExactIntegers() {
        let cases: [(String, JSONValue)] = [
            ("0", .integer(0)), ("-0", .integer(0)), ("9007199254740993", .integer(9_007_199_254_740_993)),
            ("1.0", .integer(1)), ("1e3", .integer(1000)), ("2.5E+1", .integer(25)), ("1.5", .number(1.5)),
            ("-2.25e-2", .number(-0.0225)), ("99999999999999999999", .number(1e20)),
        ]
        for (text, value) in cases { #expect(JSONValue.parse(Array(text.utf8)) == value, "\(text)") }
    }

    @Test func saysWhereTheTextBreaks() {
        #expect(describe(#"{"name": "x" "total": 5}"#) == "expected ',' or '}' at byte 13")
        #expect(describe(#"{"a":1, "a":2}"#) == #"duplicate member name "a" at byte 8"#)
        #expect(describe("[1, 2") == "unexpected end of text at byte 5")
    }

    private func describe(_ text: String) -> String? {
        guard case .failure(let failure) = JSONParser.parse(Array(text.utf8)) else { return nil }
        return failure.description
    }
}
