import Testing
@testable import HeadwayCore

/// `ProgressUpdate.readPlain` reads the bodies runners send as the general path would, and
/// leaves every other body to it.
@Suite struct PlainProgressBodyTests {
    /// What the general path makes of `text`: the update, or nil for a refusal.
    private static func general(_ text: [UInt8]) -> ProgressUpdate? {
        guard let value = JSONValue.parse(text) else { return nil }
        return try? ProgressUpdate.parse(value)
    }

    private static func plain(_ text: [UInt8]) -> ProgressUpdate? {
        text.withUnsafeBufferPointer(ProgressUpdate.readPlain)
    }

    @Test(arguments: [
        (#"{"increment":1,"label":"Copying photos to archive volume 3 (batch 000001)","unit":"files"}"#,
         ProgressUpdate(increment: 1, unit: "files", label: "Copying photos to archive volume 3 (batch 000001)")),
        (#"{"completed":0,"total":250000,"seq":7}"#, ProgressUpdate(completed: 0, total: 250_000, runnerSeq: 7)),
        (" {\n\t\"completed\" : 999999999999999 , \"label\" : null }\r\n", ProgressUpdate(completed: 999_999_999_999_999)),
        ("{}", ProgressUpdate()),
        (#"{"unit":"x","label":"~ leading visible, trailing space "}"#, ProgressUpdate(unit: "x", label: "~ leading visible, trailing space ")),
    ])
    func readsTheShapesRunnersSend(_ text: String, _ expected: ProgressUpdate) {
        let bytes = Array(text.utf8)
        #expect(Self.plain(bytes) == expected, "\(text)")
        #expect(Self.general(bytes) == expected, "\(text)")
    }

    /// Each of these is left to the general path: it is refused there, or read there
    /// because it needs what the plain reader does not do (escapes, non-ASCII, numbers
    /// written otherwise).
    @Test(arguments: [
        #"{"increment":1,"increment":2}"#,  // a repeated member
        #"{"increment":1,"colour":"red"}"#,  // an unknown member
        #"{"increment":01}"#, #"{"increment":-1}"#, #"{"increment":1.0}"#, #"{"increment":1e2}"#,
        #"{"completed":1000000000000000}"#,  // 16 digits
        #"{"completed":9007199254740992}"#,  // past Limits.maxCount
        #"{"label":""}"#, #"{"label":"   "}"#, #"{"label":" padded"}"#,  // empty, blank, blank start
        #"{"label":"tab\there"}"#,  // an escape
        #"{"label":"caf\u00e9"}"#, "{\"label\":\"café\"}",  // an escape, non-ASCII
        #"{"label":1}"#, #"{"increment":"1"}"#, #"{"increment":true}"#, #"{"increment":[1]}"#,
        #"{"unit":"\#(String(repeating: "u", count: Limits.unitLength + 1))"}"#,
        #"{"increment":1,}"#, #"{"increment":1} x"#, #"{"increment" 1}"#, #"{"increment":nul}"#, #"{"increment":"#,
        "\u{FEFF}{\"increment\":1}", "[]", "1", "",
        "{\"label\":\"a\u{7F}\"}", "{\"label\":\"a\u{1}\"}", "{\"label\":\"a\u{0}\"}",  // DEL, a control, NUL
        "{\"unit\":\"files\"\u{C}}",  // a form feed is no JSON white space
        #"{"increment":nulx}"#, #"{"increment":nulll}"#, #"{"se\u0071":1}"#,  // an escaped name
        #"{"completed":999999999999999.5}"#, #"{"completed":999999999999999,"total":1000000000000000}"#,
    ])
    func leavesEverythingElseToTheGeneralPath(_ text: String) {
        #expect(Self.plain(Array(text.utf8)) == nil, "\(text)")
    }

    @Test func readsFieldsUpToTheirLimits() {
        let label = String(repeating: "l", count: Limits.labelLength)
        let unit = String(repeating: "u", count: Limits.unitLength)
        let bytes = Array(#"{"label":"\#(label)","unit":"\#(unit)","total":9}"#.utf8)
        #expect(Self.plain(bytes) == ProgressUpdate(total: 9, unit: unit, label: label))
    }

    /// Bodies made of the pieces of both shapes, and then with one byte changed: whenever the
    /// plain reader reads one, the general path reads the same update from it. The plain
    /// reader must also read a good share of them (more than 500 of the 4,000 with this
    /// seed), or the comparison would hold for want of anything read.
    @Test func whatItReadsTheGeneralPathReadsAlike() {
        var random = SeededGenerator(seed: 0x9_1A1D)
        var readPlainly = 0
        for round in 0..<4_000 {
            var bytes = Array(Self.randomBody(&random).utf8)
            if round % 2 == 1, !bytes.isEmpty {
                bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            guard let update = Self.plain(bytes) else { continue }
            readPlainly += 1
            #expect(Self.general(bytes) == update, "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(readPlainly > 500)
    }

    private static func randomBody(_ random: inout SeededGenerator) -> String {
        let names = ["completed", "increment", "total", "unit", "label", "seq", "seq", "colour"]
        let values = ["0", "7", "42", "999999999999999", "1000000000000000", "01", "-3", "2.5", "1e3", "null", "true",
                      #""files""#, #""Copying photos""#, #""""#, #"" x""#, #""   ""#, #""a\"b""#, #""é""#, #""\u0041""#, "[]", "{}"]
        let spaces = ["", "", "", " ", "\n", "\t", "\r\n "]
        var members: [String] = []
        for _ in 0..<Int.random(in: 0...5, using: &random) {
            let name = names.randomElement(using: &random)!
            // Mostly a value of the member's own kind, so that many bodies are plain.
            let value = Bool.random(using: &random)
                ? (["unit", "label"].contains(name) ? #""text \#(Int.random(in: 0...99, using: &random))""# : "\(Int.random(in: 0...9_999, using: &random))")
                : values.randomElement(using: &random)!
            var around: [String] = []
            for _ in 0..<4 { around.append(spaces.randomElement(using: &random)!) }
            members.append(around[0] + "\"\(name)\"" + around[1] + ":" + around[2] + value + around[3])
        }
        return spaces.randomElement(using: &random)! + "{" + members.joined(separator: ",") + "}" + spaces.randomElement(using: &random)!
    }
}
