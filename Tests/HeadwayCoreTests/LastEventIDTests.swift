import Testing
import HeadwayCore

@Suite struct LastEventIDTests {
    @Test(arguments: [
        ("0", 0), ("42", 42), (" \t42 \t", 42), ("0007", 7), ("9223372036854775807", Int64.max),
    ] as [(String, Int64)])
    func readsDecimalDigits(_ text: String, _ id: Int64) {
        #expect(LastEventID.parse(text) == id, "\(text.debugDescription)")
    }

    /// A sign, a number too large for a change number, and everything not digits is no id:
    /// the client gets a fresh snapshot.
    @Test(arguments: [
        "", " ", "-5", "+5", "-0", "1.0", "1e3", "0x10", "4 2", "9223372036854775808",
        "99999999999999999999999", "\u{A0}42", "42\n", "٤٢",
    ])
    func refusesWhatIsNotAChangeNumber(_ text: String) {
        #expect(LastEventID.parse(text) == nil, "\(text.debugDescription)")
    }
}
