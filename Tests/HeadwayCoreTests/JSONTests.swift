import Testing
import Foundation
@testable import HeadwayCore

@Suite struct JSONValueTests {
    @Test func keepsIntegersApartFromFractions() {
        #expect(JSONValue.parse(Array("[1, 1.5, true, null, \"x\"]".utf8))
            == .array([.integer(1), .number(1.5), .bool(true), .null, .string("x")]))
    }


    @Test func canonicalTextSortsKeysAndEscapes() {
        let value = JSONValue.object(["b": .integer(2), "a": .string("line\n\"q\"\u{1}")])
        #expect(value.canonicalText == #"{"a":"line\n\"q\"\u0001","b":2}"#)
    }

    @Test func numbersAreWrittenExactly() {
        var text = JSONText()
        text.appendNumber(0.4)
        text.appendRaw(" ")
        text.appendNumber(1)
        text.appendRaw(" ")
        text.appendNumber(.nan)
        #expect(text.text == "0.4 1 null")
    }

    @Test func integersAreWrittenDigitByDigit() {
        var text = JSONText()
        for (index, number) in [Int64(0), 7, -7, 1_000_000, .max, .min].enumerated() {
            if index > 0 { text.appendByte(UInt8(ascii: ",")) }
            text.appendInteger(number)
        }
        #expect(text.text == "0,7,-7,1000000,9223372036854775807,-9223372036854775808")
    }

    /// A copy of a text is a value of its own: writing to either leaves the other as it
    /// was, however far the buffers grow.
    @Test func aCopiedTextIsItsOwnValue() {
        var first = JSONText()
        first.appendRaw("[")
        var second = first
        for index in 0..<1_000 { first.appendInteger(Int64(index)); first.appendByte(UInt8(ascii: ",")) }
        second.appendString(String(repeating: "é", count: 300))
        let third = first
        first.appendByte(UInt8(ascii: "]"))
        #expect(first.text == "[" + (0..<1_000).map { "\($0)," }.joined() + "]")
        #expect(third.count == first.count - 1)
        #expect(second.text == "[\"" + String(repeating: "é", count: 300) + "\"")
        var object = JSONObjectWriter(continuing: &second)
        object.bool("b", true)
        object.raw("r", nil)
        object.finishAppending(into: &second)
        #expect(second.text.hasSuffix(#"{"b":true,"r":null}"#))
    }

    /// Random runs of appends, copies and writes through the copies give the bytes that
    /// plain arrays written alongside give: the buffer grows, copies and ends right.
    @Test func randomWritesMatchPlainArrays() {
        var random = SeededGenerator(seed: 0x5EED)
        for _ in 0..<300 {
            var texts = [JSONText(capacity: Int(random.next() % 8))]
            var expected: [[UInt8]] = [[]]
            for _ in 0..<60 {
                let which = Int(random.next() % UInt64(texts.count))
                switch random.next() % 6 {
                case 0:
                    let byte = UInt8(truncatingIfNeeded: random.next() % 26) + UInt8(ascii: "a")
                    texts[which].appendByte(byte)
                    expected[which].append(byte)
                case 1:
                    let number = Int64(bitPattern: random.next()) >> (random.next() % 64)
                    texts[which].appendInteger(number)
                    expected[which] += Array(String(number).utf8)
                case 2:
                    let raw = String(repeating: "x", count: Int(random.next() % 300))
                    texts[which].appendRaw(raw)
                    expected[which] += Array(raw.utf8)
                case 3:
                    let count = Int(random.next() % 40)
                    texts[which].appendString(String(repeating: "é\"", count: count))
                    expected[which] += Array(("\"" + String(repeating: "é\\\"", count: count) + "\"").utf8)
                case 4 where texts.count < 4:
                    texts.append(texts[which])
                    expected.append(expected[which])
                default:
                    texts[which].appendLiteral("null")
                    expected[which] += Array("null".utf8)
                }
            }
            for (text, bytes) in zip(texts, expected) {
                #expect(text.bytes == bytes)
                #expect(text.count == bytes.count)
            }
        }
    }

    @Test func stringsKeepNonASCIIAndEscapeSeparators() {
        var text = JSONText()
        text.appendString("Größe \u{2028}ok\u{2029} 🚀\t")
        #expect(text.text == #""Größe \u2028ok\u2029 🚀\t""#)
    }

    /// Every control character is written as a `\u` escape: C0 (those without a short
    /// escape), DEL and C1, which a terminal acts on (U+009B is CSI, U+009D OSC); the
    /// characters on either side of the C1 range stay as they are. The text reads back the same.
    @Test func controlsAreEscapedDELAndC1Too() {
        let value = "a\u{1B}[31m\u{7F}\u{80}\u{9B}2J\u{9D}0;x\u{7}\u{9F}~\u{A0}é\u{1}"
        var text = JSONText()
        text.appendString(value)
        #expect(text.text == #""a\u001b[31m\u007f\u0080\u009b2J\u009d0;x\u0007\u009f~\#u{A0}é\u0001""#)
        #expect(!text.bytes.contains { $0 < 0x20 || $0 == 0x7F })
        #expect(!zip(text.bytes, text.bytes.dropFirst()).contains { $0 == 0xC2 && $1 < 0xA0 })
        #expect(JSONValue.parse(text.bytes) == .string(value))
        // Every scalar of both ranges, alone and in a longer text (the word-at-a-time path).
        for scalar in (0x00...0x1F).compactMap(Unicode.Scalar.init) + (0x7F...0x9F).compactMap(Unicode.Scalar.init) {
            for padded in [String(scalar), "0123456789" + String(scalar) + "abcdefgh"] {
                let written = JSONValue.string(padded).canonicalText
                #expect(written.unicodeScalars.allSatisfy { $0.value >= 0x20 && !(0x7F...0x9F).contains($0.value) },
                        "U+\(String(scalar.value, radix: 16))")
                #expect(JSONValue.parse(Array(written.utf8)) == .string(padded))
            }
        }
    }

    /// The eight-bytes-at-a-time scan for bytes to escape agrees with a byte-by-byte one, at
    /// every length and alignment, with the special bytes at every position.
    @Test func theWordScanFindsEveryByteToEscape() {
        let special: [UInt8] = [0x00, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7E, 0x7F, 0x80, 0x9F, 0xA0,
                                0xC1, 0xC2, 0xC3, 0xE1, 0xE2, 0xE3, 0xFF, 0x01]
        var generator = SeededGenerator(seed: 2026)
        let reference = { (bytes: ArraySlice<UInt8>) in
            !bytes.indices.contains { index in
                let byte = bytes[index]
                let c1 = byte == 0xC2 && index + 1 < bytes.endIndex && bytes[index + 1] < 0xA0
                return byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xE2 || c1
            }
        }
        var flagged = 0
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...40, using: &generator)
            var bytes = (0..<length + 3).map { _ in UInt8.random(in: 0x23...0x5B, using: &generator) }
            // Mostly plain text, with a few special bytes anywhere (borrows across lanes).
            for _ in 0..<Int.random(in: 0...2, using: &generator) where length > 0 {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = special.randomElement(using: &generator)!
            }
            let start = Int.random(in: 0...3, using: &generator)  // every alignment
            let slice = bytes[start..<min(bytes.count, start + length)]
            let scanned = slice.withUnsafeBufferPointer { JSONText.needsNoEscape($0) }
            #expect(scanned == reference(slice), "\(Array(slice))")
            if !scanned { flagged += 1 }
        }
        #expect(flagged > 1_000)  // both answers were exercised
    }
}

@Suite struct TimestampTests {
    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z"),
        (Int64(951_782_400_123), "2000-02-29T00:00:00.123Z"),
        (Int64(1_796_009_908_999), "2026-11-30T03:38:28.999Z"),
        (Int64(-1), "1969-12-31T23:59:59.999Z"),
    ])
    func formatsRFC3339WithMilliseconds(_ milliseconds: Int64, _ expected: String) {
        #expect(Timestamp.rfc3339(milliseconds) == expected)
    }

    /// Random times from 1601 to 9999 read the same as the calendar's own fields say.
    @Test func formatsEveryTimeAsTheCalendarDoes() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var generator = SeededGenerator(seed: 3339)
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: -11_644_473_600_000...Timestamp.writableRange.upperBound, using: &generator)
            let date = Date(timeIntervalSince1970: Double(milliseconds.floorDividing(1000)))
            let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.year!, parts.month!, parts.day!,
                                  parts.hour!, parts.minute!, parts.second!, Int(milliseconds.flooredRemainder(1000)))
            #expect(Timestamp.rfc3339(milliseconds) == expected, "\(milliseconds)")
        }
    }
}

@Suite struct TaskIDTests {
    @Test func acceptsThePattern() {
        #expect(TaskID.isValid("build-42.step_3~a:b"))
        #expect(TaskID.isValid(String(repeating: "x", count: 128)))
    }

    @Test(arguments: ["", "has space", "slash/inside", "ünï", String(repeating: "x", count: 129), "a%20b"])
    func refusesEverythingElse(_ id: String) {
        #expect(!TaskID.isValid(id))
    }
}

extension Int64 {
    fileprivate func floorDividing(_ divisor: Int64) -> Int64 { (self - flooredRemainder(divisor)) / divisor }
    fileprivate func flooredRemainder(_ divisor: Int64) -> Int64 { (self % divisor + divisor) % divisor }
}

/// A small seeded generator (xorshift64*), so a random test runs the same way every time.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed == 0 ? 1 : seed }

    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
}
