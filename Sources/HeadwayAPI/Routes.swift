import Access
import HeadwayCore
import HTTPServer

/// A handler of the service: the request, what its token grants, and where to answer.
typealias GrantedHandler = @Sendable (HTTPRequest, Grant, any Responder) -> Void

/// One route as the application serves it: method, path pattern and the access it needs.
public struct RouteEntry: Sendable, Equatable {
    public var method: String
    public var pattern: String
    public var access: RouteAccess
}

/// The service's routes: the only way the APIs add one, and it takes the access the route
/// needs, so no route can be added without declaring it. Each handler runs only after
/// `AccessGate` has let its request through (before its body is parsed or anything is
/// read or written), with the request's grant. A request whose token was let through is
/// its token's client from then on (`HTTPRequest.client`: what shares the API reads'
/// turns): behind a proxy every client has the proxy's address, not its own token.
package struct ServiceRoutes {
    let gate: AccessGate
    package private(set) var router = Router()
    /// Every route added, with its access, in order.
    package private(set) var table: [RouteEntry] = []

    package init(gate: AccessGate) { self.gate = gate }

    /// The number a token's requests share as their client (`HTTPRequest.client`): never
    /// 0 (an unknown client), and, within the process, another than any address's but by
    /// a chance of one in 2^64.
    static func client(ofToken tokenID: String) -> Int {
        var hasher = Hasher()
        hasher.combine("token")
        hasher.combine(tokenID)
        let number = hasher.finalize()
        return number == 0 ? 1 : number
    }

    /// Adds a route needing `access`.
    mutating func add(_ method: String, _ pattern: String, _ access: RouteAccess, _ handler: @escaping GrantedHandler) {
        table.append(RouteEntry(method: method, pattern: pattern, access: access))
        router.add(method, pattern) { [gate] request, responder in
            switch gate.admit(request, access) {
            case .success(let grant):
                guard let tokenID = grant.tokenID else { return handler(request, grant, responder) }
                var request = request
                request.client = Self.client(ofToken: tokenID)
                handler(request, grant, responder)
            case .failure(let refusal): responder.respond(Problem(refusal).response)
            }
        }
    }
}

/// Decides whether a request may reach its route. While no token exists everything is
/// allowed (the daemon then serves loopback only); once one exists every route but the
/// public ones needs a valid token holding the route's scope. The token comes from
/// `Authorization: Bearer …`, or, on the event stream only (EventSource cannot send
/// headers), from `access_token=`; that parameter anywhere else is refused.
package struct AccessGate: Sendable {
    let registry: TokenRegistry
    let clock: any WallClock
    /// The one path where `access_token=` is accepted.
    let queryTokenPath: String

    /// The request's grant, or why it is refused.
    package func admit(_ request: HTTPRequest, _ access: RouteAccess) -> Result<Grant, AccessRefusal> {
        let queryToken = request.queryValues("access_token")
        if !queryToken.isEmpty && request.path != queryTokenPath { return .failure(.accessTokenNotAllowed) }
        if access == .public { return .success(.anonymous) }
        guard registry.authenticationRequired else { return .success(.unrestricted) }
        let secret: String
        if let header = request.header("authorization") {
            guard let bearer = TokenSecret.fromAuthorization(header) else { return .failure(.tokenInvalid) }
            secret = bearer
        } else if let fromQuery = queryToken.last {
            secret = fromQuery
        } else {
            // `anyToken` serves a request without credentials as anonymous (no scope):
            // `GET /v1/token` then tells a page that it needs a token, without a 401.
            return access == .anyToken ? .success(.anonymous) : .failure(.tokenMissing)
        }
        switch registry.authenticate(secret, now: clock.now()) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let grant):
            guard grant.allows(access) else {
                if case .scope(let scope) = access { return .failure(.insufficientScope(needed: scope)) }
                return .failure(.insufficientScope(needed: .admin))
            }
            return .success(grant)
        }
    }

    package init(registry: TokenRegistry, clock: any WallClock, queryTokenPath: String) {
        self.registry = registry
        self.clock = clock
        self.queryTokenPath = queryTokenPath
    }
}
