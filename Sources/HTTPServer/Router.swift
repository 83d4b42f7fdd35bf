/// Maps method and path to a handler. Patterns are literal segments and `{name}`
/// segments, e.g. `/v1/tasks/{id}/progress`. An unknown path gets 404; a known path with
/// another method gets 405 with `Allow`.
public struct Router: Sendable {
    /// One route as declared.
    public struct Route: Sendable {
        public var method: String
        public var pattern: String
        fileprivate var segments: [Substring]
        fileprivate var handler: HTTPHandler
    }

    /// The routes, in the order added.
    public private(set) var routes: [Route] = []

    public init() {}

    /// Adds a route.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping HTTPHandler) {
        routes.append(Route(method: method, pattern: pattern, segments: Array(pattern.split(separator: "/", omittingEmptySubsequences: false).dropFirst()),
                            handler: handler))
    }

    /// Routes `request` to its handler, or answers 404 / 405.
    public func handle(_ request: HTTPRequest, _ responder: any Responder) {
        let segments = request.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        var allowed: [String] = []
        for route in routes {
            guard let parameters = match(route.segments, segments) else { continue }
            if route.method == request.method {
                var routed = request
                routed.pathParameters = parameters
                route.handler(routed, responder)
                return
            }
            allowed.append(route.method)
        }
        if allowed.isEmpty {
            responder.respond(.problem(404, code: "route_not_found", title: "No such route",
                                       detail: "Nothing is served at this path."))
        } else {
            responder.respond(.problem(405, code: "method_not_allowed", title: "Method not allowed",
                                       detail: "This path accepts \(allowed.joined(separator: ", ")), not \(request.method).",
                                       headers: [HTTPField("Allow", allowed.joined(separator: ", "))]))
        }
    }

    private func match(_ pattern: [Substring], _ path: ArraySlice<Substring>) -> [String: String]? {
        guard pattern.count == path.count else { return nil }
        // First check every segment, then build the parameters of the one route that matches.
        for (expected, actual) in zip(pattern, path) {
            if Self.isParameter(expected) {
                if actual.isEmpty { return nil }
            } else if !expected.utf8.elementsEqual(actual.utf8) {
                return nil
            }
        }
        var parameters: [String: String] = [:]
        for (expected, actual) in zip(pattern, path) where Self.isParameter(expected) {
            parameters[String(expected.dropFirst().dropLast())] = String(actual)
        }
        return parameters
    }

    private static func isParameter(_ segment: Substring) -> Bool {
        segment.utf8.first == UInt8(ascii: "{") && segment.utf8.last == UInt8(ascii: "}")
    }
}
