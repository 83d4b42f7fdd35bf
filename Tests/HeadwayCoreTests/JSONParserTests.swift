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

    @Test func integersAroundTheLimitsOfSixtyFourBits() {
        let cases: [(String, JSONValue)] = [
            ("999999999999999999", .integer(999_999_999_999_999_999)),  // 18 digits
            ("-999999999999999999", .integer(-999_999_999_999_999_999)),
            ("1000000000000000000", .integer(1_000_000_000_000_000_000)),  // 19 digits
            ("9223372036854775807", .integer(.max)), ("-9223372036854775808", .integer(.min)),
            ("9223372036854775808", .number(9_223_372_036_854_775_808)), ("-0.0", .integer(0)),
            ("[12,-3]", .array([.integer(12), .integer(-3)])),
        ]
        for (text, value) in cases { #expect(JSONValue.parse(Array(text.utf8)) == value, "\(text)") }
    }

    @Test func objectsKeepTheirOrderAndCompareWithoutIt() throws {
        let parsed = try #require(JSONValue.parse(Array(#"{"b":1,"a":[true,null],"c":"x"}"#.utf8)))
        guard case .object(let object) = parsed else { Issue.record("not an object"); return }
        #expect(object.keys == ["b", "a", "c"])
        #expect(object["a"] == .array([.bool(true), .null]) && object["z"] == nil && object["ab"] == nil)
        #expect(object["c"] == .string("x") && object["b"] == .integer(1) && object[""] == nil)
        #expect(parsed == .object(["c": .string("x"), "b": .integer(1), "a": .array([.bool(true), .null])]))
        #expect(parsed != .object(["c": .string("x"), "b": .integer(2), "a": .array([.bool(true), .null])]))
        #expect(parsed != .object(["c": .string("x"), "b": .integer(1)]))
        #expect(parsed.canonicalText == #"{"a":[true,null],"b":1,"c":"x"}"#)
    }

    /// The same members in any order give the same canonical text, also when one name has
    /// a combining mark and another the composed letter (which String's `<` cannot order).
    @Test func canonicalTextDoesNotDependOnTheOrderWritten() {
        let one = JSONValue.parse(Array(#"{"e\u0301":1,"\u00e9x":2,"z":3}"#.utf8))
        let other = JSONValue.parse(Array(#"{"z":3,"\u00e9x":2,"e\u0301":1}"#.utf8))
        #expect(one != nil && one == other)
        #expect(one?.canonicalText == other?.canonicalText)
        #expect(one?.canonicalText == "{\"e\u{301}\":1,\"z\":3,\"\u{e9}x\":2}")
    }

    /// A repeated name is found by a scan in a small object and through a set of names in
    /// a larger one: both are refused, at the repeated name.
    @Test(arguments: [3, 15, 16, 17, 40, 300])
    func aRepeatedNameIsRefusedInObjectsOfEverySize(_ count: Int) {
        let members = (0..<count).map { #""m\#($0)":\#($0)"# }
        let distinct = "{" + members.joined(separator: ",") + "}"
        guard case .object(let object)? = JSONValue.parse(Array(distinct.utf8)) else {
            Issue.record("\(count) distinct members refused")
            return
        }
        #expect(object.count == count && object["m\(count - 1)"] == .integer(Int64(count - 1)))
        for repeated in [0, count - 1] {
            let text = "{" + members.joined(separator: ",") + #","m\#(repeated)":0}"#
            #expect(describe(text) == #"duplicate member name "m\#(repeated)" at byte \#(distinct.utf8.count)"#)
        }
    }

    /// Random values written as canonical text parse back equal, whatever their strings
    /// (escapes, controls, non-ASCII), numbers and sizes of objects; the same text with one
    /// byte changed either parses or fails at an offset inside it, never traps.
    @Test func randomValuesReadBackAsWritten() {
        var random = SeededGenerator(seed: 0x5EED_0B1E)
        for _ in 0..<2_000 {
            let value = Self.randomValue(&random, depth: 0)
            let text = Array(value.canonicalText.utf8)
            #expect(JSONValue.parse(text) == value, "\(value.canonicalText)")
            var changed = text
            changed[Int.random(in: 0..<changed.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            if case .failure(let failure) = JSONParser.parse(changed) { #expect((0...changed.count).contains(failure.offset)) }
        }
    }

    private static func randomValue(_ random: inout SeededGenerator, depth: Int) -> JSONValue {
        switch Int.random(in: depth > 3 ? 0...4 : 0...6, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &random) >> Int64.random(in: 0...63, using: &random))
        case 3: return .number(Double.random(in: -1e6...1e6, using: &random) + 0.5)
        case 4: return .string(randomString(&random))
        case 5: return .array((0..<Int.random(in: 0...5, using: &random)).map { _ in randomValue(&random, depth: depth + 1) })
        default:
            var object = JSONObject()
            for _ in 0..<Int.random(in: 0...24, using: &random) { object[randomString(&random)] = randomValue(&random, depth: depth + 1) }
            return .object(object)
        }
    }

    private static func randomString(_ random: inout SeededGenerator) -> String {
        let pieces: [String] = ["a", "Z", "7", " ", "\"", "\\", "/", "\n", "\u{1}", "\u{1F}", "é", "€", "😀", "\u{2028}", "\u{7F}"]
        return String((0..<Int.random(in: 0...12, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined())
    }

    private func describe(_ text: String) -> String? {
        guard case .failure(let failure) = JSONParser.parse(Array(text.utf8)) else { return nil }
        return failure.description
    }
}

