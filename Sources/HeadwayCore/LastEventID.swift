/// Reads the event id a reconnecting subscriber sends (`Last-Event-ID`, or the
/// `last_event_id` query parameter): the change number of the last event it received.
public enum LastEventID {
    /// The change number in `text`: decimal digits only, with optional spaces or tabs
    /// around them (HTTP's optional white space), and at most `Int64.max`. Anything else —
    /// a sign, a fraction, another character, an empty value — is nil, and such a client
    /// gets a fresh snapshot instead of a resume.
    public static func parse(_ text: String) -> Int64? {
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let bytes = text.utf8
        guard let first = bytes.firstIndex(where: { !isBlank($0) }),
              let last = bytes.lastIndex(where: { !isBlank($0) }) else { return nil }
        let digits = bytes[first...last]
        guard digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int64(String(decoding: digits, as: UTF8.self))
    }
}
