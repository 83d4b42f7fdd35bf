import HTTPServer
import Synchronization

/// Gives every request an id, under which it is logged and which its reply carries as
/// `X-Request-Id`: the client's own when it sent a plain one (1–64 printable ASCII
/// characters, no quote), else one made up (a random prefix per daemon, a counter).
struct RequestIDMiddleware: HTTPMiddleware {
    private let prefix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
    private let counter = Counter()

    /// The requests numbered so far.
    private final class Counter: Sendable {
        let value = Atomic<UInt64>(0)
    }

    func handle(_ request: HTTPRequest, _ responder: any Responder, next: HTTPHandler) {
        var request = request
        request.requestID = request.header("x-request-id").flatMap(Self.acceptable)
            ?? Self.requestID(prefix: prefix, number: counter.value.add(1, ordering: .relaxed).newValue)
        next(request, AddingHeader(HTTPField("X-Request-Id", request.requestID), to: responder))
    }

    /// `prefix-number`, the number in base 36 (lower case): written into one buffer, where
    /// interpolation builds the number's text and then appends twice, and up to 15 bytes
    /// in all (the usual case) stay a small string, without an allocation.
    static func requestID(prefix: String, number: UInt64) -> String {
        var digitCount = 1
        var scale = number
        while scale >= 36 {
            scale /= 36
            digitCount += 1
        }
        let prefixLength = prefix.utf8.count
        return String(unsafeUninitializedCapacity: prefixLength + 1 + digitCount) { buffer in
            _ = buffer.initialize(fromContentsOf: prefix.utf8)
            buffer[prefixLength] = UInt8(ascii: "-")
            var rest = number
            for index in stride(from: prefixLength + digitCount, to: prefixLength, by: -1) {  // the last digit first
                let digit = UInt8(rest % 36)
                buffer[index] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                rest /= 36
            }
            return prefixLength + 1 + digitCount
        }
    }

    /// A client's id, if it is plain enough to log and send back as it is.
    static func acceptable(_ id: String) -> String? {
        id.utf8.count <= 64 && !id.isEmpty && id.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "\"") }) ? id : nil
    }

    /// Adds one header to the response it passes on.
    private struct AddingHeader: Responder {
        let field: HTTPField
        let base: any Responder

        init(_ field: HTTPField, to base: any Responder) {
            self.field = field
            self.base = base
        }

        func respond(_ response: consuming HTTPResponse) {
            var response = response
            response.headers.append(field)
            base.respond(response)
        }

        func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { base.onComplete(handler) }
    }
}

/// Logs one `http.request` line per request when its exchange is over (an event stream: when
/// it ends), with its id, method, path, the route pattern matched, the status sent and the
/// time taken; and counts it in the metrics (by method, route pattern and status, and its
/// duration by route pattern: the pattern, never the raw path, so the series stay few).
struct AccessLogMiddleware: HTTPMiddleware {
    let logger: Logger
    var metrics: ServiceMetrics?

    func handle(_ request: HTTPRequest, _ responder: any Responder, next: HTTPHandler) {
        let logs = logger.minimumLevel <= .info
        guard logs || metrics != nil else { return next(request, responder) }
        var request = request
        let route = MatchedRoute()
        request.matchedRoute = route
        let (id, method, path) = (request.requestID, request.method, request.path)
        responder.onComplete { [logger, metrics] completion in
            let matched = RouteLabel(route: route.route)
            if let metrics {
                metrics.httpRequests.add(HTTPExchangeLabels(method: MethodLabel(method), route: matched,
                                                            status: completion.status ?? 0))
                metrics.httpDuration.observe(Double(completion.durationMicroseconds) / 1e6, matched)
            }
            if logs {
                logger.log(.info, "http.request", [
                    "request_id": id, "method": method, "path": path, "route": matched.route?.text ?? "-",
                    "status": String(completion.status ?? 0), "duration_us": String(completion.durationMicroseconds),
                ])
            }
        }
        next(request, responder)
    }
}
