import Foundation

/// The replies the accept loop sends by itself, before any daemon has read the request.
extension MicroHTTPServer {
    /// The whole reply to a request refused before any daemon read it (`HeadScreen`): the
    /// pipeline's answer to `refusal`, with `Date`, its `X-Request-Id` (if the pipeline gives
    /// ids), `Content-Length` and `Connection: close`.
    static func closingReply(to refusal: HTTPRefusal, method: String, path: String, _ pipeline: HTTPPipeline) -> [UInt8] {
        var request = HTTPRequest(method: method, path: path)
        request.isRefused = true
        if let requestIDs = pipeline.requestIDs { request.requestID = requestIDs.id(for: request) }
        let response = pipeline.response(for: refusal, request)
        var head = "HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\nDate: \(httpDate())\r\n"
        for field in response.headers where !["connection", "content-length"].contains(field.name.lowercased()) {
            head += "\(field.name): \(field.value)\r\n"
        }
        if !request.requestID.isEmpty { head += "X-Request-Id: \(request.requestID)\r\n" }
        head += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + response.body
    }

    /// The reason phrase of a status the server sends by itself.
    private static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 431: "Request Header Fields Too Large"
        case 505: "HTTP Version Not Supported"
        default: "Error"
        }
    }

    /// Now as an HTTP date (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`).
    private static func httpDate() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
