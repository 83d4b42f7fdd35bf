import HeadwayCore

/// The credential rules on any input, read three ways: as an `Authorization` header (a
/// bearer credential is what follows the scheme and its spaces, never empty), as a secret
/// (well-formed only when it is exactly `hw_` and 43 base64url characters, and every
/// secret made from 32 bytes is well-formed), and as an RFC 3339 time (a time read is
/// written back and read again the same).
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
    }
    return 0
}

/// Times the formatter writes in full (years 0 to 9999).
enum TokenTimeCheck {
    static func read(_ text: String) -> EpochMilliseconds? {
        guard let time = Timestamp.parseRFC3339(text), (-62_167_219_200_000...253_402_300_799_999).contains(time) else {
            return nil
        }
        return time
    }
}
