import HTTPServer
import Lifecycle
import Synchronization

/// The names the daemon answers to (`Host`), and the origins that are its own.
///
/// - The listen address with the port served; for a loopback listen also `localhost`,
///   `127.0.0.1` and `::1`. A wildcard listen (`0.0.0.0`, `::`) answers to every address
///   literal and `localhost`: an address written out cannot be pointed elsewhere by DNS,
///   so it cannot carry a rebinding attack, while the daemon cannot know every address
///   its machine has or will have. A name is served only when `--public-url` names it.
/// - The host of each `--public-url`, with its URL's port.
///
/// A `Host` without a port is accepted for any of these names: a browser always writes a
/// port other than its scheme's default, and a proxy in front (nginx's `Host $host`) may
/// leave it out. An origin is the daemon's own when it is a public URL's origin, or an
/// `http`/`https` origin whose host is an own name and whose port the one served (a
/// port is one server's: whatever serves it is this daemon, with or without TLS). The own
/// names are the listen names, but under a wildcard listen only the loopback names: an
/// address literal served as `Host` may be another machine's, whose pages on the same port
/// are not this daemon's.
struct ServedNames: Sendable {
    /// The listen names, lower-cased, IPv6 literals without brackets.
    private let listenNames: Set<String>
    /// The names whose pages (with the port served) are the daemon's own.
    private let ownNames: Set<String>
    /// Whether the daemon listens on every address (`0.0.0.0`, `::`).
    private let listensEverywhere: Bool
    /// The origins of `--public-url`.
    private let publicOrigins: [WebOrigin]
    /// The `Host` text last found served, with the port it was served on: a client names
    /// the daemon the same way in every request, which then costs one comparison.
    private let lastServed = Locked<(host: String, port: Int)?>(nil)

    init(listenHost: String, publicOrigins: [WebOrigin]) {
        let host = listenHost.lowercased()
        listensEverywhere = host == "0.0.0.0" || host == "::"
        let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
        let loopbackNames: Set<String> = ["localhost", "127.0.0.1", "::1"]
        var names: Set<String> = [host]
        if loopback || listensEverywhere { names.formUnion(loopbackNames) }
        listenNames = names
        ownNames = listensEverywhere ? loopbackNames : names
        self.publicOrigins = publicOrigins
    }

    /// Whether a request whose `Host` says `host` is for this daemon, served on `port`.
    func serves(host: String, port: Int) -> Bool {
        if lastServed.withLock({ $0.map { $0.host == host && $0.port == port } ?? false }) { return true }
        guard let authority = Authority(Substring(host)), serves(authority, port: port) else { return false }
        lastServed.withLock { $0 = (host, port) }
        return true
    }

    /// Whether a request naming `authority` (its `Host`) is for this daemon, served on `port`.
    func serves(_ authority: Authority, port: Int) -> Bool {
        if isListenName(authority.host) && (authority.port == nil || authority.port == port) { return true }
        return publicOrigins.contains { $0.host == authority.host && (authority.port == nil || authority.port == $0.port) }
    }

    /// Whether pages of `origin` are the daemon's own (it serves on `port`).
    func isOwn(_ origin: WebOrigin, port: Int) -> Bool {
        publicOrigins.contains(origin) || (ownNames.contains(origin.host) && origin.port == port)
    }

    private func isListenName(_ host: String) -> Bool {
        listenNames.contains(host) || (listensEverywhere && Authority.isAddressLiteral(host))
    }
}

/// The port the daemon serves, known once its server listens (`--listen` port 0 picks one
/// then); read without a lock once known.
package final class ServedPort: Sendable {
    private let known = Atomic<Int>(0)
    /// The port of the server followed (it holds the pipeline, whose browser checks hold
    /// this: only its port is held, not the server).
    private let bound = Locked<BoundPort?>(nil)
    private let configured: Int

    package init(configured: Int) { self.configured = configured }

    /// Takes the port from `server` from now on.
    package func follow(_ server: MicroHTTPServer) { bound.withLock { $0 = server.boundPort } }

    /// The port bound, or the configured one while nothing listens.
    var current: Int {
        let port = known.load(ordering: .relaxed)
        if port != 0 { return port }
        guard let bound = bound.withLock({ $0 })?.value, bound != 0 else { return configured }
        known.store(bound, ordering: .relaxed)
        return bound
    }
}

/// Keeps web pages from changing anything they should not, and lets the dashboards of
/// `--cors-origin` call the API from a browser. In this order, before any route:
///
/// 1. a `Host` that is not a name served (`ServedNames`) is 400 `host_not_allowed`: DNS
///    rebinding (a page whose own name points at this machine) is refused;
/// 2. an `Origin` on a state-changing request (any method but GET, HEAD, OPTIONS) that is
///    neither the daemon's own nor a `--cors-origin` is 403 `origin_not_allowed`, and so is
///    `Origin: null` (a sandboxed frame, a local file, a redirect);
/// 3. a request whose method some route takes and which may carry a body (any but GET,
///    HEAD, OPTIONS and DELETE: today POST) must say `Content-Type: application/json` (or
///    `application/*+json`), even with an empty body, else 415 `unsupported_media_type`:
///    a form or any other "simple" cross-site request cannot say so. DELETE has no body,
///    and a browser never sends it (nor PUT, PATCH…) cross-site without a preflight,
///    which only allowed origins pass. A method no route takes is left to the router
///    (405).
///
/// A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from an
/// allowed origin is answered 204 with the methods, headers and max-age allowed; from any
/// other, 403 `origin_not_allowed`. Replies to `--cors-origin` origins carry
/// `Access-Control-Allow-Origin` (`*` under `--cors-origin '*'`) and
/// `Access-Control-Expose-Headers`; with any `--cors-origin`, every reply carries
/// `Vary: Origin`. `Access-Control-Allow-Credentials` is never sent: tokens travel in
/// `Authorization`, which a page sets itself, and cookies are never used.
///
/// A request without `Host` (HTTP/1.0 — the server refuses one of HTTP/1.1 before the
/// pipeline — or handed to the pipeline in process) passes the first check; one without `Origin` (not from a browser's page) the second.
///
/// Before all of these, a request carrying `Host`, `Origin`, `Content-Type` or
/// `Authorization` more than once is 400 `duplicate_header`: the daemon reads the first,
/// and a proxy in front that reads the last would judge another request.
///
/// `--cors-origin '*'` is honoured only while tokens are required (`tokensRequired`): the
/// start is refused without tokens, and should they vanish behind the daemon's back, no
/// page of any origin may use a daemon that asks for none.
package struct BrowserChecks: HTTPMiddleware {
    let names: ServedNames
    /// The exact `--cors-origin` origins.
    let corsOrigins: Set<WebOrigin>
    /// Whether `--cors-origin '*'` was given.
    let anyCORSOrigin: Bool
    let servedPort: ServedPort
    let errors: ErrorReplies
    /// Whether tokens are required now (the registry's answer).
    let tokensRequired: @Sendable () -> Bool
    /// The headers a request may carry once at most.
    static let singleHeaders = ["host", "origin", "content-type", "authorization"]

    /// Whether a request of `method` changes nothing (GET, HEAD, OPTIONS): another origin
    /// may send it (the reply is what CORS guards).
    static func isSafeMethod(_ method: String) -> Bool {
        switch method {
        case "GET", "HEAD", "OPTIONS": true
        default: false
        }
    }

    /// The methods that must declare a JSON body: those routes take, but GET, HEAD, OPTIONS and DELETE.
    /// A handful: compared in turn, cheaper than hashing the method.
    let jsonMethods: [String]
    /// Whether a route takes the request: one that none takes is left to routing (404, or
    /// 405 with Allow) rather than refused for its Content-Type.
    let isRouted: @Sendable (HTTPRequest) -> Bool
    /// The methods a preflight allows: every method a route takes, and HEAD.
    let allowedMethods: String
    /// The request headers a preflight allows (beyond the CORS-safelisted ones).
    static let allowedHeaders = "Authorization, Content-Type, Last-Event-ID, X-Request-Id"
    /// The reply headers a page may read (beyond the CORS-safelisted ones).
    static let exposedHeaders = "Location, X-Request-Id, Headway-Unchanged, Retry-After, WWW-Authenticate, Allow"
    /// Seconds a browser may keep a preflight's answer (Chromium keeps it 2 hours at most).
    static let preflightMaxAgeSeconds = 600

    /// Checks for a daemon whose routes are `router`'s, listening on `listenHost`, named by
    /// `publicOrigins` (`--public-url`) and read by the pages of `allowedOrigins` (`--cors-origin`).
    package init(listenHost: String, publicOrigins: [WebOrigin], allowedOrigins: [CORSOrigin], router: Router,
                 servedPort: ServedPort, errors: ErrorReplies, tokensRequired: @escaping @Sendable () -> Bool) {
        self.tokensRequired = tokensRequired
        let routedMethods = Set(router.routes.map(\.method))
        isRouted = { router.takes($0) }
        jsonMethods = routedMethods.subtracting(["GET", "HEAD", "OPTIONS", "DELETE"]).sorted()
        let methods = routedMethods.union(routedMethods.contains("GET") ? ["HEAD"] : [])
        allowedMethods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].filter(methods.contains).joined(separator: ", ")
        names = ServedNames(listenHost: listenHost, publicOrigins: publicOrigins)
        var exact: Set<WebOrigin> = []
        var any = false
        for origin in allowedOrigins {
            switch origin {
            case .any: any = true
            case .exact(let origin): exact.insert(origin)
            }
        }
        corsOrigins = exact
        anyCORSOrigin = any
        self.servedPort = servedPort
        self.errors = errors
    }

    /// How a request's origin may use the API from a browser.
    private enum Access {
        /// No `Origin`, or the daemon's own: nothing to add.
        case sameOrigin
        /// A `--cors-origin`: replies carry `Access-Control-Allow-Origin` with this value.
        case cors(allowOrigin: String)
        /// Any other origin (or `null`, or one that cannot be read): it may read nothing
        /// and change nothing.
        case refused(origin: String)
    }

    package func handle(_ request: HTTPRequest, _ responder: any Responder, next: HTTPHandler) {
        for name in Self.singleHeaders where request.headerCount(name) > 1 {
            return responder.respond(errors.response(for: Problem.duplicateHeader(name), request))
        }
        let port = servedPort.current
        let preflightResponder = responder
        let responder = corsOrigins.isEmpty && !anyCORSOrigin
            ? responder : AddingHeaders([HTTPField("Vary", "Origin")], to: responder)
        if let host = request.header("host") {
            guard names.serves(host: host, port: port) else {
                return responder.respond(errors.response(for: Problem.hostNotAllowed(host), request))
            }
        }
        let access = request.header("origin").map { self.access(of: $0, port: port) } ?? .sameOrigin
        if request.method == "OPTIONS", let origin = request.header("origin"),
           request.header("access-control-request-method") != nil {
            return preflightResponder.respond(preflightResponse(access, origin: origin, request))
        }
        if !Self.isSafeMethod(request.method), case .refused(let origin) = access {
            return responder.respond(errors.response(for: Problem.originNotAllowed(origin), request))
        }
        let corsResponder: any Responder = switch access {
        case .cors(let allowOrigin):
            AddingHeaders([HTTPField("Access-Control-Allow-Origin", allowOrigin),
                           HTTPField("Access-Control-Expose-Headers", Self.exposedHeaders)], to: responder)
        case .sameOrigin, .refused: responder
        }
        // A request the HTTP layer refuses (ambiguous framing, a body too large, a stop) is
        // answered with that refusal: no route takes it, so its media type does not matter.
        if jsonMethods.contains(request.method) && !request.isRefused {
            let mediaType = TaskAPI.mediaType(request.header("content-type") ?? "")
            // A JSON body passes at once (the hot path matches no route here); another is
            // refused only where a route takes the request, else routing answers 404/405.
            let isJSON = mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json"))
            guard isJSON || !isRouted(request) else {
                return corsResponder.respond(errors.response(for: Problem.jsonContentTypeRequired(request.method, mediaType),
                                                             request))
            }
        }
        next(request, corsResponder)
    }

    private func access(of originHeader: String, port: Int) -> Access {
        guard let origin = WebOrigin(header: originHeader) else { return .refused(origin: originHeader) }
        if names.isOwn(origin, port: port) { return .sameOrigin }
        if corsOrigins.contains(origin) { return .cors(allowOrigin: originHeader) }
        return anyCORSOrigin && tokensRequired() ? .cors(allowOrigin: "*") : .refused(origin: originHeader)
    }

    /// The answer to a preflight: 204 with what the origin may send, or 403.
    private func preflightResponse(_ access: Access, origin: String, _ request: HTTPRequest) -> HTTPResponse {
        let allowOrigin: String
        switch access {
        case .refused(let origin):
            var refusal = errors.response(for: Problem.originNotAllowed(origin, preflight: true), request)
            refusal.headers.append(HTTPField("Vary", "Origin"))
            return refusal
        case .sameOrigin: allowOrigin = origin
        case .cors(let value): allowOrigin = value
        }
        return HTTPResponse(status: 204, headers: [
            HTTPField("Access-Control-Allow-Origin", allowOrigin),
            HTTPField("Access-Control-Allow-Methods", allowedMethods),
            HTTPField("Access-Control-Allow-Headers", Self.allowedHeaders),
            HTTPField("Access-Control-Max-Age", "\(Self.preflightMaxAgeSeconds)"),
            HTTPField("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ])
    }

    /// Adds headers to the response it passes on.
    private struct AddingHeaders: Responder {
        let fields: [HTTPField]
        let base: any Responder

        init(_ fields: [HTTPField], to base: any Responder) {
            self.fields = fields
            self.base = base
        }

        func respond(_ response: consuming HTTPResponse) {
            var response = response
            response.headers.append(contentsOf: fields)
            base.respond(response)
        }

        func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { base.onComplete(handler) }
    }
}

// MARK: - The refusals

extension Problem {
    /// A header that may appear once only, given more than once (400).
    static func duplicateHeader(_ name: String) -> Problem {
        let written = name.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined(separator: "-")
        return Problem(status: 400, code: "duplicate_header", title: "Duplicate header",
                       detail: "The header \(written) was sent more than once; send it once (a proxy reading another "
                           + "copy than this server would judge a different request).")
    }

    /// A `Host` the daemon does not serve (400).
    static func hostNotAllowed(_ host: String) -> Problem {
        let example = Authority(Substring(host)).map { "https://\(Authority.hostText($0.host))\($0.port.map { ":\($0)" } ?? "")" }
            ?? "https://headway.example.com"
        return Problem(status: 400, code: "host_not_allowed", title: "Host not served",
                       detail: "This server does not answer to the name '\(host)' (a page can point a name of its own at "
                           + "this machine: DNS rebinding). To serve a name, start headwayd with --public-url naming it "
                           + "(e.g. --public-url \(example), or HEADWAY_PUBLIC_URL).")
    }

    /// An `Origin` that may not change anything, or send a preflight (403).
    static func originNotAllowed(_ origin: String, preflight: Bool = false) -> Problem {
        let what = preflight ? "Requests from a browser are" : "Changes are"
        guard let parsed = WebOrigin(header: origin) else {
            return Problem(status: 403, code: "origin_not_allowed", title: "Origin not allowed",
                           detail: "\(what) never accepted from the opaque origin '\(origin)' (a sandboxed frame, a local "
                               + "file or a redirect).")
        }
        return Problem(status: 403, code: "origin_not_allowed", title: "Origin not allowed",
                       detail: "\(what) not accepted from pages of \(origin). To let a dashboard hosted there use this "
                           + "server, start headwayd with --cors-origin \(parsed) (or HEADWAY_CORS_ORIGIN).")
    }

    /// A request that may change something and does not declare a JSON body (415).
    static func jsonContentTypeRequired(_ method: String, _ mediaType: String) -> Problem {
        Problem(status: 415, code: "unsupported_media_type", title: "Unsupported media type",
                detail: "A \(method) must say Content-Type: application/json, even with an empty body, so that no web "
                    + "page can send it as a form (got '\(mediaType.isEmpty ? "no Content-Type" : mediaType)').")
    }
}
