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

    /// A plain change number, or the id ending a `min_duration` release ("N-T").
    @Test func readsAResumePoint() {
        #expect(LastEventID.resumePoint("42") == ResumePoint(change: 42, releasedAt: nil))
        #expect(LastEventID.resumePoint("42-1800000001000") == ResumePoint(change: 42, releasedAt: 1_800_000_001_000))
        #expect(LastEventID.resumePoint(LastEventID.release(change: 7, at: 9)) == ResumePoint(change: 7, releasedAt: 9))
        #expect(LastEventID.release(change: 7, at: 1_800_000_000_000) == "7-1800000000000")
    }

    @Test(arguments: ["", "-", "-5", "5-", "5--6", "5-6-7", "5-x", "x-5", "5-+6", "5-99999999999999999999", "5.6"])
    func refusesWhatIsNoResumePoint(_ text: String) {
        #expect(LastEventID.resumePoint(text) == nil, "\(text.debugDescription)")
    }
}
