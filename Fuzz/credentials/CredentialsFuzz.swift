import HeadwayCore

/// The credential rules on any input, read three ways: as an `Authorization` header (a
/// bearer credential is what follows the scheme and its spaces, never empty), as a secret
/// (well-formed only when it is exactly `hw_` and 43 base64url characters, and every
/// secret made from 32 bytes is well-formed), and as an RFC 3339 time (a time read is
/// written back and read again the same, and one written as the formatter writes it reads
/// as itself).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCredentials(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    let text = String(decoding: bytes, as: UTF8.self)

    if let credential = TokenSecret.fromAuthorization(text) {
        require(!credential.isEmpty && credential.first != " ", "credential '\(credential)' from '\(text)'")
        require(text.lowercased().hasPrefix("bearer "), "a credential from '\(text)'")
        require(text.hasSuffix(credential), "credential '\(credential)' is not the end of '\(text)'")
    }

    if TokenSecret.isWellFormed(text) {
        require(text.utf8.count == 46 && text.hasPrefix("hw_"), "well-formed '\(text)'")
        require(text.utf8.dropFirst(3).allSatisfy { Base64URL.value(of: $0) != nil }, "well-formed '\(text)'")
    }
    var random = Array(bytes.prefix(32))
    random += Array(repeating: 0, count: 32 - random.count)
    let made = TokenSecret.make(randomBytes: random)
    require(TokenSecret.isWellFormed(made), "made '\(made)' is not well-formed")

    if let time = TokenTimeCheck.read(text) {
        require(Timestamp.parseRFC3339(Timestamp.rfc3339(time)) == time, "\(text) → \(time) does not read back")
        // Strict: a time already written as the formatter writes it (UTC, milliseconds) is
        // read as itself, never moved to another day or second (February 31, second 60).
        if text.utf8.count == 24, text.hasSuffix("Z"), text.utf8[text.utf8.index(text.utf8.startIndex, offsetBy: 10)] == UInt8(ascii: "T") {
            require(Timestamp.rfc3339(time) == text, "\(text) was read as \(Timestamp.rfc3339(time))")
        }
    }
    return 0
}

/// Times the formatter writes in full (years 0 to 9999).
enum TokenTimeCheck {
    static func read(_ text: String) -> EpochMilliseconds? {
        guard let time = Timestamp.parseRFC3339(text), Timestamp.writableRange.contains(time) else {
            return nil
        }
        return time
    }
}
