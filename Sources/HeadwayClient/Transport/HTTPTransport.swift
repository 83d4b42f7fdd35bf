import CCurl
import Foundation
import HeadwayCore
import Lifecycle

/// One HTTP request as the client sends it.
package struct HTTPRequest: Sendable {
    package var method: String
    /// The path and query, appended to the server's URL (`/v1/tasks`).
    package var path: String
    /// The JSON body; POSTs always send one (empty when nil) with a JSON content type.
    package var jsonBody: String?
    /// More header lines to send (`Last-Event-ID: 1042`).
    package var headers: [String] = []

    package init(method: String, path: String, jsonBody: String? = nil) {
        self.method = method
        self.path = path
        self.jsonBody = jsonBody
    }
}

/// A whole reply.
package struct HTTPResponse: Sendable {
    package var status: Int
    /// The `Content-Type` without parameters, lowercased (`application/problem+json`).
    package var contentType: String?
    package var body: [UInt8]
}

/// Why no reply came: the server could not be reached or the exchange failed midway, or
/// (`replyRefused`) the reply itself was refused: larger than the client takes.
package struct TransportError: Error, Equatable {
    package let message: String
    package var replyRefused = false
}

/// A small HTTP/1.1 client on libcurl: one easy handle per request, connect, total and
/// idle timeouts, JSON bodies, a bearer token. The body arrives through `BodyReceiver`, chunk by
/// chunk, so a streaming reader (SSE) can be given instead of collecting the whole body.
/// Each request blocks the thread that sends it (libcurl's easy interface): `HeadwayClient`
/// sends its async calls from threads of their own.
package struct HTTPTransport: Sendable {
    package let baseURL: String
    package let token: String?
    package let connectTimeoutSeconds: Int
    /// The whole exchange's limit; 0 for none (an event stream).
    package let totalTimeoutSeconds: Int
    /// The longest the reply may go without a byte before the exchange is given up; nil
    /// for no limit. An event stream's keep-alive comments keep a live one under it.
    package let idleTimeoutSeconds: Int?

    package init(baseURL: String, token: String?, connectTimeoutSeconds: Int = 5, totalTimeoutSeconds: Int = 30,
                idleTimeoutSeconds: Int? = nil) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.token = token
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.totalTimeoutSeconds = totalTimeoutSeconds
        self.idleTimeoutSeconds = idleTimeoutSeconds
    }

    /// The server's URL as messages show it: without a `user:password@` part.
    package var displayURL: String {
        guard var components = URLComponents(string: baseURL), components.user != nil || components.password != nil else {
            return baseURL
        }
        components.user = nil
        components.password = nil
        return components.string ?? baseURL
    }

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    /// The largest whole reply `send` keeps (a page of the largest tasks fits many times).
    package static let maximumReplyBytes = 256 << 20

    /// Sends `request` and returns the whole reply.
    package func send(_ request: HTTPRequest, stop: TransferStop? = nil) throws(TransportError) -> HTTPResponse {
        let collector = BodyCollector(limit: Self.maximumReplyBytes)
        do {
            let (status, contentType) = try send(request, receiver: BodyReceiver(collector.receive), stop: stop)
            return HTTPResponse(status: status, contentType: contentType, body: collector.bytes)
        } catch where collector.overflowed {
            throw TransportError(message: "the server's reply is larger than \(Self.maximumReplyBytes >> 20) MiB",
                                 replyRefused: true)
        }
    }

    /// Sends `request`, handing each chunk of the body to `receiver` as it arrives; returns
    /// the status and content type once the body has ended. Setting `stop` ends the
    /// transfer within about a second (libcurl asks its progress callback at least that often).
    package func send(_ request: HTTPRequest, receiver: BodyReceiver, stop: TransferStop? = nil) throws(TransportError) -> (Int, String?) {
        _ = Self.globalInit
        guard let handle = curl_easy_init() else { throw TransportError(message: "libcurl could not start") }
        defer { curl_easy_cleanup(handle) }
        var headers: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headers) }
        headers = curl_slist_append(headers, "Accept: application/json")
        if let token { headers = curl_slist_append(headers, "Authorization: Bearer \(token)") }
        for line in request.headers { headers = curl_slist_append(headers, line) }

        headway_curl_set_string(handle, CURLOPT_URL, baseURL + request.path)
        headway_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)
        headway_curl_set_long(handle, CURLOPT_PATH_AS_IS, 1)   // the path is ours, escaped as meant
        headway_curl_set_long(handle, CURLOPT_CONNECTTIMEOUT, connectTimeoutSeconds)
        headway_curl_set_long(handle, CURLOPT_TIMEOUT, totalTimeoutSeconds)
        headway_curl_set_string(handle, CURLOPT_USERAGENT, "headway/\(HeadwayVersion.current)")
        switch request.method {
        case "GET": break
        case "POST":
            // The server refuses a POST without a JSON content type, even an empty one.
            headers = curl_slist_append(headers, "Content-Type: application/json")
            headers = curl_slist_append(headers, "Expect:")
            let body = request.jsonBody ?? ""
            headway_curl_set_long(handle, CURLOPT_POSTFIELDSIZE, body.utf8.count)
            headway_curl_set_string(handle, CURLOPT_COPYPOSTFIELDS, body)
        default:
            headway_curl_set_string(handle, CURLOPT_CUSTOMREQUEST, request.method)
        }
        headway_curl_set_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headers))

        let context = Unmanaged.passRetained(receiver)
        defer { context.release() }
        headway_curl_set_callback(handle, CURLOPT_WRITEFUNCTION, headwayCurlWrite)
        headway_curl_set_pointer(handle, CURLOPT_WRITEDATA, context.toOpaque())

        let idleWatch = idleTimeoutSeconds != nil || stop != nil
            ? Unmanaged.passRetained(IdleWatch(limitSeconds: idleTimeoutSeconds.map(Double.init), stop: stop)) : nil
        defer { idleWatch?.release() }
        if let idleWatch {
            headway_curl_set_long(handle, CURLOPT_NOPROGRESS, 0)
            headway_curl_set_progress_callback(handle, headwayCurlProgress)
            headway_curl_set_pointer(handle, CURLOPT_XFERINFODATA, idleWatch.toOpaque())
        }

        let result = curl_easy_perform(handle)
        guard result == CURLE_OK else {
            if result == CURLE_ABORTED_BY_CALLBACK, stop?.isSet == true {
                throw TransportError(message: "the request was stopped")
            }
            if result == CURLE_ABORTED_BY_CALLBACK, let idleTimeoutSeconds {
                throw TransportError(message: "no data from the server for \(idleTimeoutSeconds) s")
            }
            throw TransportError(message: String(cString: curl_easy_strerror(result)))
        }
        var status = 0
        headway_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var contentType: UnsafeMutablePointer<CChar>?
        headway_curl_get_string(handle, CURLINFO_CONTENT_TYPE, &contentType)
        let mediaType = contentType.map {
            String(cString: $0).split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        }
        return (status, mediaType)
    }
}

/// Takes a reply's body chunk by chunk as libcurl reads it, on the thread that sends the
/// request (libcurl's easy interface calls back on it).
package final class BodyReceiver {
    /// Called for each chunk; returns false to abort the transfer.
    let receive: (UnsafeRawBufferPointer) -> Bool

    package init(_ receive: @escaping (UnsafeRawBufferPointer) -> Bool) { self.receive = receive }
}

/// Keeps the whole body, up to `limit` bytes (past it the transfer stops). Used by one
/// request on one thread only.
package final class BodyCollector {
    package let limit: Int
    package private(set) var bytes: [UInt8] = []
    package private(set) var overflowed = false

    package init(limit: Int) { self.limit = limit }

    package func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count + chunk.count <= limit else {
            overflowed = true
            return false
        }
        bytes.append(contentsOf: chunk)
        return true
    }
}

/// libcurl's write callback: hands the chunk to the request's `BodyReceiver`.
private func headwayCurlWrite(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                              _ context: UnsafeMutableRawPointer?) -> Int {
    guard let context else { return 0 }
    let receiver = Unmanaged<BodyReceiver>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    let chunk = UnsafeRawBufferPointer(start: data.map(UnsafeRawPointer.init), count: length)
    return receiver.receive(chunk) ? length : 0
}

/// Asks a transfer in progress to stop, from any thread (a canceled Swift task, an event
/// sequence its reader dropped).
package final class TransferStop: Sendable {
    private let flag = Locked(false)

    package init() {}

    package var isSet: Bool { flag.withLock { $0 } }

    package func set() { flag.withLock { $0 = true } }
}

/// Notices a reply that has stopped arriving, or a transfer asked to stop: libcurl reports
/// the bytes received about once a second, even while none come (on the thread that sends
/// the request).
final class IdleWatch {
    let limitSeconds: Double?
    let stop: TransferStop?
    private var received: Int64 = -1
    private var since = DispatchTime.now()

    init(limitSeconds: Double?, stop: TransferStop?) {
        self.limitSeconds = limitSeconds
        self.stop = stop
    }

    /// Whether the transfer should end: asked to stop, or `limitSeconds` without a new byte.
    func idle(received now: Int64) -> Bool {
        if stop?.isSet == true { return true }
        guard let limitSeconds else { return false }
        let clock = DispatchTime.now()
        if now != received {
            received = now
            since = clock
            return false
        }
        return Double(clock.uptimeNanoseconds - since.uptimeNanoseconds) / 1e9 > limitSeconds
    }
}

/// libcurl's progress callback: a non-zero answer aborts a transfer gone idle.
private func headwayCurlProgress(_ context: UnsafeMutableRawPointer?, _ downloadTotal: curl_off_t,
                                 _ downloadNow: curl_off_t, _ uploadTotal: curl_off_t, _ uploadNow: curl_off_t) -> Int32 {
    guard let context else { return 0 }
    let watch = Unmanaged<IdleWatch>.fromOpaque(context).takeUnretainedValue()
    return watch.idle(received: Int64(downloadNow)) ? 1 : 0
}
