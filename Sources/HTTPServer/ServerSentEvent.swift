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
    public var encoded: String {
        var text = ""
        if let retryMilliseconds { text += "retry: \(retryMilliseconds)\n" }
        if let id { text += "id: \(id)\n" }
        if let event { text += "event: \(event)\n" }
        for line in Self.lines(data) { text += "data: \(line)\n" }
        return text + "\n"
    }

    /// A comment frame (ignored by clients; keeps proxies and dead-peer detection working).
    public static func comment(_ text: String = "") -> String {
        Self.lines(text).map { $0.isEmpty ? ":\n" : ": \($0)\n" }.joined() + "\n"
    }

    /// Splits at CRLF, CR or LF, as the SSE parser does.
    private static func lines(_ text: String) -> [Substring] {
        var lines: [Substring] = []
        var start = text.startIndex
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if character == "\r\n" || character == "\n" || character == "\r" {
                lines.append(text[start..<index])
                start = text.index(after: index)
            }
            index = text.index(after: index)
        }
        lines.append(text[start...])
        return lines
    }
}
