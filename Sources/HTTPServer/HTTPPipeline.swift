/// A step every request passes through on its way to its route: it may change the request,
/// answer it itself, or wrap the responder to see (or add to) the response — request ids,
/// access logs and token checks are middleware.
public protocol HTTPMiddleware: Sendable {
    /// Handles `request`, usually by calling `next` with it (perhaps changed) and `responder`
    /// (perhaps wrapped).
    func handle(_ request: HTTPRequest, _ responder: any Responder, next: HTTPHandler)
}

/// One exchange, as the server tells it once it is over (`HTTPPipeline.observeExchange`):
/// the request's id, method and path, the pattern of the route it matched, the status sent
/// (nil when the connection went away first) and the time from its head to its end.
public struct ExchangeRecord: Sendable {
    public var requestID: String
    public var method: String
    /// The path as the client sent it: percent-escapes as sent, and every byte outside
    /// printable ASCII percent-encoded (`TargetCheck.pathAsSent`), so a path the library
    /// decoded into something else (cut short at `%00`, say) is shown as it came.
    public var path: String
    /// Nil when no route matched (an unknown path, a wrong method, a refusal before routing).
    public var route: RoutePattern?
    public var status: Int?
    public var durationMicroseconds: Int64

    public init(requestID: String, method: String, path: String, route: RoutePattern?, status: Int?,
                durationMicroseconds: Int64) {
        self.requestID = requestID
        self.method = method
        self.path = path
        self.route = route
        self.status = status
        self.durationMicroseconds = durationMicroseconds
    }
}

/// What the server does with every request: the middleware in order, then the router. What
/// the HTTP layer or the router refuses (`HTTPRefusal`) passes through the same middleware
/// and is shown by `renderRefusal`, which the application provides, so every reply has one
/// look.
///
/// Two things every exchange gets from the server itself, not from middleware, so that they
/// cost no wrapper and no closure per request: an id (`requestIDs`: set on the request
/// before the middleware sees it, sent back as `X-Request-Id`), and, once it is over, a
/// record (`observeExchange`: one log line, metrics), refusals included.
public struct HTTPPipeline: Sendable {
    /// Turns a refusal into a response.
    public typealias RefusalRenderer = @Sendable (HTTPRefusal, HTTPRequest) -> HTTPResponse

    /// What gives every exchange its id, if anything.
    public let requestIDs: RequestIDs?
    /// Called once each exchange the pipeline handled is over (an event stream: when it
    /// ends), on the thread that ends it (a daemon's, or the stop's); keep it cheap. A
    /// request cut off before it reached the pipeline (its body never whole) has no record.
    public let observeExchange: (@Sendable (ExchangeRecord) -> Void)?
    private let renderRefusal: RefusalRenderer
    /// The middleware composed around the router, built once.
    private let routed: HTTPHandler
    private let middleware: [any HTTPMiddleware]

    /// A pipeline through `middleware` (the first sees the request first) to `router`, whose
    /// exchanges get ids from `requestIDs` and are told to `observeExchange`, if given.
    public init(middleware: [any HTTPMiddleware] = [], router: Router, renderRefusal: @escaping RefusalRenderer,
                requestIDs: RequestIDs? = nil, observeExchange: (@Sendable (ExchangeRecord) -> Void)? = nil) {
        self.init(middleware: middleware, renderRefusal: renderRefusal, requestIDs: requestIDs,
                  observeExchange: observeExchange) { request, responder in
            switch router.match(request) {
            case .handler(let handler, let routedRequest):
                handler(routedRequest, request.method == "HEAD" ? HeadResponder(base: responder) : responder)
            case .refused(let refusal): responder.respond(renderRefusal(refusal, request))
            }
        }
    }

    /// A pipeline that hands every request through `middleware` to `handler` (no routes),
    /// showing refusals as plain text unless told otherwise.
    public init(middleware: [any HTTPMiddleware] = [], renderRefusal: @escaping RefusalRenderer = Self.plainText,
                requestIDs: RequestIDs? = nil, observeExchange: (@Sendable (ExchangeRecord) -> Void)? = nil,
                handler: @escaping HTTPHandler) {
        self.requestIDs = requestIDs
        self.observeExchange = observeExchange
        self.renderRefusal = renderRefusal
        self.middleware = middleware
        routed = Self.compose(middleware, around: handler)
    }

    /// Passes `request` through the middleware to its route.
    public func handle(_ request: HTTPRequest, _ responder: any Responder) { routed(request, responder) }

    /// Passes `request` through the middleware to the answer of `refusal` (what the server
    /// refuses before any route: a body too large, a stop under way).
    public func refuse(_ refusal: HTTPRefusal, _ request: HTTPRequest, _ responder: any Responder) {
        var request = request
        request.isRefused = true
        Self.compose(middleware) { request, responder in responder.respond(renderRefusal(refusal, request)) }(request, responder)
    }

    /// The answer of `refusal`, without the middleware (for a response that replaces
    /// another one already through it).
    public func response(for refusal: HTTPRefusal, _ request: HTTPRequest) -> HTTPResponse {
        renderRefusal(refusal, request)
    }

    /// Wraps `last` in `middleware`, the first outermost.
    private static func compose(_ middleware: [any HTTPMiddleware], around last: @escaping HTTPHandler) -> HTTPHandler {
        middleware.reversed().reduce(last) { next, step in
            { request, responder in step.handle(request, responder, next: next) }
        }
    }

    /// Refusals as a status and a line of text.
    public static let plainText: RefusalRenderer = { refusal, _ in
        let (status, text): (Int, String) = switch refusal {
        case .bodyTooLarge(let limit): (413, "request body larger than \(limit) bytes")
        case .shuttingDown: (503, "shutting down")
        case .routeNotFound: (404, "no such route")
        case .methodNotAllowed(let allowed): (405, "allowed: \(allowed.joined(separator: ", "))")
        case .nulInTarget: (400, "NUL in the request target")
        case .encodedSlashInPath: (400, "an encoded slash in the path")
        case .tooManyQueryParameters(let limit): (431, "more than \(limit) query parameters")
        case .targetTooLong(let limit): (414, "request target longer than \(limit) bytes")
        case .badFraming(let reason): (400, "bad framing: \(reason)")
        case .malformedHeader(let reason): (400, "malformed header: \(reason)")
        case .hostMissing: (400, "an HTTP/1.1 request without Host")
        case .malformedRequestLine: (400, "malformed request line")
        case .versionNotSupported: (505, "HTTP version not supported")
        case .headTooLarge(let limit): (431, "request head larger than \(limit) bytes")
        case .repliesUnread(let clientBytes, let totalBytes):
            (503, "\(totalBytes) bytes of replies wait unread, \(clientBytes) of them this client's")
        }
        return HTTPResponse(status: status, headers: [HTTPField("Content-Type", "text/plain")], body: Array((text + "\n").utf8))
    }
}

/// Answers a `HEAD` request with what `GET` would answer, without a body: libmicrohttpd
/// sends the head of a complete response only; a stream is ended before it starts.
private struct HeadResponder: Responder {
    let base: any Responder

    func respond(_ response: consuming HTTPResponse) {
        var response = response
        if let stream = response.stream {
            stream.connectionClosed()
            response.stream = nil
        }
        base.respond(response)
    }

    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { base.onComplete(handler) }
}
