import Glibc

/// Maps method and path to a handler. Patterns are literal segments and `{name}`
/// segments, e.g. `/v1/tasks/{id}/progress`. An unknown path is refused as
/// `.routeNotFound`; a known path with another method as `.methodNotAllowed`. `HEAD` is
/// served by the `GET` route of a path (the pipeline sends no body). A path that more than
/// one pattern matches (`/v1/tasks/summary` and `/v1/tasks/{id}`) belongs to the pattern
/// added first: only its routes serve the path and name its methods in `Allow`.
public struct Router: Sendable {
    /// One route as declared.
    public struct Route: Sendable {
        public var method: String
        public var pattern: String { identity.text }
        /// The pattern as noted on a request that matched this route.
        public let identity: RoutePattern
        fileprivate var segments: [Segment]
        fileprivate var handler: HTTPHandler
    }

    /// One segment of a pattern: literal bytes, or the name of a parameter.
    fileprivate enum Segment: Sendable {
        case literal([UInt8])
        case parameter(String)
    }

    /// The routes, in the order added.
    public private(set) var routes: [Route] = []
    /// For each number of path segments, the indices in `routes` of the routes with that
    /// many, in order: a request is compared only with routes of its own length.
    private var routesBySegmentCount: [[Int]] = []

    public init() {}

    /// Adds a route.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping HTTPHandler) {
        let segments = pattern.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { segment -> Segment in
            segment.hasPrefix("{") && segment.hasSuffix("}")
                ? .parameter(String(segment.dropFirst().dropLast())) : .literal(Array(segment.utf8))
        }
        routes.append(Route(method: method, identity: RoutePattern(pattern), segments: segments, handler: handler))
        while routesBySegmentCount.count <= segments.count { routesBySegmentCount.append([]) }
        routesBySegmentCount[segments.count].append(routes.count - 1)
    }

    /// The indices in `routes` of the routes whose patterns have `count` segments, in the
    /// order added (read in place: a route is not copied to be compared).
    private func routeIndices(withSegments count: Int) -> [Int] {
        count < routesBySegmentCount.count ? routesBySegmentCount[count] : []
    }

    /// What a request leads to: its route's handler (with the request's path parameters
    /// filled in), or a refusal.
    public enum Match: Sendable {
        case handler(HTTPHandler, HTTPRequest)
        case refused(HTTPRefusal)
    }

    /// Finds the route of `request`.
    public func match(_ request: HTTPRequest) -> Match {
        request.path.utf8.withContiguousBytes { path in
            let bounds = Self.segmentBounds(of: path)
            var allowed: [String] = []
            var owner: String?
            for index in routeIndices(withSegments: bounds.count) where matches(routes[index].segments, path, bounds) {
                // The first pattern that matches owns the path.
                if owner == nil { owner = routes[index].pattern }
                guard routes[index].pattern == owner else { continue }
                let method = routes[index].method
                if method == request.method || (request.method == "HEAD" && method == "GET") {
                    request.routeNote?.note(routes[index].identity)
                    var routed = request
                    routed.pathParameters = parameters(routes[index].segments, path, bounds)
                    return .handler(routes[index].handler, routed)
                }
                allowed.append(method)
                if method == "GET" { allowed.append("HEAD") }
            }
            return .refused(allowed.isEmpty ? .routeNotFound : .methodNotAllowed(allowed: allowed))
        }
    }

    /// Where each segment of `path` after the leading slash starts and ends.
    static func segmentBounds(of path: UnsafeRawBufferPointer) -> [Range<Int>] {
        var bounds: [Range<Int>] = []
        bounds.reserveCapacity(path.reduce(1) { $1 == UInt8(ascii: "/") ? $0 + 1 : $0 })
        var start = path.first == UInt8(ascii: "/") ? 1 : 0
        for index in start..<path.count where path[index] == UInt8(ascii: "/") {
            bounds.append(start..<index)
            start = index + 1
        }
        bounds.append(start..<path.count)
        return bounds
    }

    /// Whether a route takes `request` (its method on its path), without routing it.
    public func takes(_ request: HTTPRequest) -> Bool {
        request.path.utf8.withContiguousBytes { path in
            let bounds = Self.segmentBounds(of: path)
            var owner: String?
            for index in routeIndices(withSegments: bounds.count) where matches(routes[index].segments, path, bounds) {
                if owner == nil { owner = routes[index].pattern }
                let method = routes[index].method
                if routes[index].pattern == owner && (method == request.method || (request.method == "HEAD" && method == "GET")) {
                    return true
                }
            }
            return false
        }
    }

    private func matches(_ pattern: [Segment], _ path: UnsafeRawBufferPointer, _ bounds: [Range<Int>]) -> Bool {
        guard pattern.count == bounds.count else { return false }
        for (segment, range) in zip(pattern, bounds) {
            switch segment {
            case .parameter: if range.isEmpty { return false }
            case .literal(let bytes):
                guard range.count == bytes.count else { return false }
                let equal = bytes.withUnsafeBytes { literal in
                    literal.isEmpty || memcmp(literal.baseAddress!, path.baseAddress! + range.lowerBound, range.count) == 0
                }
                if !equal { return false }
            }
        }
        return true
    }

    private func parameters(_ pattern: [Segment], _ path: UnsafeRawBufferPointer, _ bounds: [Range<Int>]) -> PathParameters {
        var parameters = PathParameters()
        for (segment, range) in zip(pattern, bounds) {
            if case .parameter(let name) = segment { parameters.append(name, String(decoding: path[range], as: UTF8.self)) }
        }
        return parameters
    }
}

extension String.UTF8View {
    /// Runs `body` on the bytes in place when the string is native and contiguous (text
    /// received is), else on a copy.
    func withContiguousBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        if let result = try withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return result }
        return try Array(self).withUnsafeBytes(body)
    }
}
