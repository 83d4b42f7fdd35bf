import HeadwayCore

/// The `Last-Event-ID` reader on any text, against a plain model of the rule: the value is
/// accepted exactly when, without the spaces and tabs around it, it is decimal digits of
/// at most `Int64.max`; an accepted id is never negative and, written back in decimal, is
/// those digits without their leading zeros.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLastEventID(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let text = String(decoding: fuzzInput(start, count), as: UTF8.self)
    let digits = significantDigits(text)
    let id = LastEventID.parse(text)
    guard let digits, fitsInt64(digits) else {
        require(id == nil, "accepted \(text.debugDescription) as \(id!)")
        return 0
    }
    guard let id else {
        require(false, "refused the id \(text.debugDescription)")
        return 0
    }
    require(id >= 0, "accepted a negative id \(id) from \(text.debugDescription)")
    require(Array(String(id).utf8) == digits, "read \(id) from \(text.debugDescription)")
    return 0
}

/// The digits of `text` without the blanks around it and without leading zeros ("0" for
/// zero); nil when it is not only digits.
private func significantDigits(_ text: String) -> [UInt8]? {
    let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
    let core = Array(text.utf8).drop(while: isBlank).reversed().drop(while: isBlank).reversed()
    guard !core.isEmpty, core.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
    let significant = Array(core.drop { $0 == UInt8(ascii: "0") })
    return significant.isEmpty ? [UInt8(ascii: "0")] : significant
}

/// Whether the decimal `digits` (no leading zeros) are at most `Int64.max`.
private func fitsInt64(_ digits: [UInt8]) -> Bool {
    let maximum = Array(String(Int64.max).utf8)
    return digits.count < maximum.count || (digits.count == maximum.count && !maximum.lexicographicallyPrecedes(digits))
}
