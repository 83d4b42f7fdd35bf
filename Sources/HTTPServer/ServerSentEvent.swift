/// One Server-Sent Events frame, encoded exactly as the WHATWG HTML standard parses it.
/// `id` and `event` may not contain CR, LF or NUL (they would end the field early and let
/// the rest be read as other fields); multi-line `data` becomes one `data:` line per line.
public struct ServerSentEvent: Equatable, Sendable {
    public var id: String?
    public var event: String?
    public var data: String
    public var retryMilliseconds: Int?

    /// Why a frame cannot be encoded.
    public enum EncodingError: Error, Equatable {
        case lineBreakInField(String)
    }

    /// Makes a frame; throws when `id` or `event` contains CR, LF or NUL.
    public init(id: String? = nil, event: String? = nil, data: String, retryMilliseconds: Int? = nil) throws(EncodingError) {
        if let id, id.contains(where: Self.isForbidden) { throw .lineBreakInField("id") }
        if let event, event.contains(where: Self.isForbidden) { throw .lineBreakInField("event") }
        self.id = id
        self.event = event
        self.data = data
        self.retryMilliseconds = retryMilliseconds
    }

    private static func isForbidden(_ character: Character) -> Bool {
        character.unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" }
    }

    /// The frame's text, ending with the blank line that dispatches it.
    public var encoded: String { String(decoding: bytes, as: UTF8.self) }

    /// The frame's UTF-8 bytes, ending with the blank line that dispatches it.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.utf8.count + 64)
        if let retryMilliseconds { out += Array("retry: \(retryMilliseconds)\n".utf8) }
        if let id { out += Array("id: \(id)\n".utf8) }
        if let event { out += Array("event: \(event)\n".utf8) }
        let prefix = Array("data: ".utf8)
        var data = data
        data.withUTF8 { utf8 in
            for line in Self.lines(utf8) {
                out += prefix
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[line]))
                out.append(10)
            }
        }
        out.append(10)
        return out
    }

    /// A comment frame (ignored by clients; keeps proxies and dead-peer detection working).
    public static func comment(_ text: String = "") -> String {
        var text = text
        return text.withUTF8 { utf8 in
            lines(utf8).map { line in
                line.isEmpty ? ":\n" : ": " + String(decoding: UnsafeBufferPointer(rebasing: utf8[line]), as: UTF8.self) + "\n"
            }.joined()
        } + "\n"
    }

    /// Where the lines of UTF-8 `text` are, split at CRLF, CR or LF as the SSE parser
    /// splits them (those bytes never occur inside a multi-byte character).
    private static func lines(_ text: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        var lines: [Range<Int>] = []
        var start = 0
        var index = 0
        while index < text.count {
            let byte = text[index]
            if byte == 10 || byte == 13 {
                lines.append(start..<index)
                if byte == 13 && index + 1 < text.count && text[index + 1] == 10 { index += 1 }
                start = index + 1
            }
            index += 1
        }
        lines.append(start..<text.count)
        return lines
    }
}
