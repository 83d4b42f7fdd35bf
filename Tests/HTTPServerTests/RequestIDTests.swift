import HeadwayTestSupport
import Testing
@testable import HTTPServer

/// The ids the daemon makes up for requests that bring none of their own.
@Suite struct RequestIDTests {
    /// Written digit by digit into one buffer, an id reads as the prefix, a dash and the
    /// number in base 36, as `String(_:radix:)` writes it: at every change of digit count,
    /// at the ends of the range, for seeded random numbers, and with prefixes short enough
    /// for a small string and too long for one.
    @Test func anIDIsThePrefixADashAndTheNumberInBase36() {
        var numbers: [UInt64] = [0, 1, 9, 10, 35, UInt64.max, UInt64.max - 1]
        var power: UInt64 = 36
        while true {
            numbers += [power - 1, power, power + 1]
            let (next, overflow) = power.multipliedReportingOverflow(by: 36)
            if overflow { break }
            power = next
        }
        var generator = SeededGenerator(seed: 16)
        numbers += (0..<2_000).map { _ in UInt64.random(in: 0...UInt64.max, using: &generator) >> UInt64.random(in: 0...63, using: &generator) }
        for prefix in ["", "a", "nane6b", "1z141z3", String(repeating: "p", count: 20), "ünï"] {
            for number in numbers {
                let id = RequestIDs.requestID(prefix: prefix, number: number)
                #expect(id == "\(prefix)-\(String(number, radix: 36))", "\(prefix) \(number)")
            }
        }
    }
}
