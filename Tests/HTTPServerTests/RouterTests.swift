import Lifecycle
import HeadwayTestSupport
import Testing
@testable import HTTPServer

/// Records what a handler answered, and runs the completion handlers when told.
final class RecordingResponder: Responder {
    private let state = Locked<(response: HTTPResponse?, completions: [@Sendable (HTTPCompletion) -> Void])>((nil, []))
    var response: HTTPResponse? { state.withLock { $0.response } }
    func respond(_ response: consuming HTTPResponse) { state.withLock { $0.response = response } }
    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { state.withLock { $0.completions.append(handler) } }
    /// Ends the exchange as the server would.
    func complete(status: Int?) {
        for handler in state.withLock({ $0.completions }) { handler(HTTPCompletion(status: status, durationMicroseconds: 1)) }
    }
}

@Suite struct RouterTests {
    let router: Router = {
        var router = Router()
        router.add("GET", "/") { _, responder in responder.respond(HTTPResponse(status: 200)) }
        router.add("GET", "/v1/tasks/{id}") { request, responder in
            responder.respond(HTTPResponse(status: 200, body: Array(request.pathParameters["id"]!.utf8)))
        }
        router.add("DELETE", "/v1/tasks/{id}") { _, responder in responder.respond(HTTPResponse(status: 204)) }
        router.add("POST", "/v1/tasks/{id}/progress") { _, responder in responder.respond(HTTPResponse(status: 202)) }
        return router
    }()

    private func route(_ method: String, _ path: String) -> HTTPResponse? {
        guard case .handler(let handler, let request) = router.match(HTTPRequest(method: method, path: path)) else { return nil }
        let responder = RecordingResponder()
        handler(request, responder)
        return responder.response
    }

    private func refusal(_ method: String, _ path: String) -> HTTPRefusal? {
        guard case .refused(let refusal) = router.match(HTTPRequest(method: method, path: path)) else { return nil }
        return refusal
    }

    @Test func matchesLiteralAndParameterSegments() {
        #expect(route("GET", "/")?.status == 200)
        #expect(route("GET", "/v1/tasks/abc")?.body == Array("abc".utf8))
        #expect(route("POST", "/v1/tasks/abc/progress")?.status == 202)
    }

    /// The pattern matched is noted where asked for, never the raw path.
    @Test func notesTheMatchedPatternWhereAsked() {
        func noted(_ method: String, _ path: String) -> String? {
            var request = HTTPRequest(method: method, path: path)
            request.routeNote = MatchedRoute()
            _ = router.match(request)
            return (request.routeNote as? MatchedRoute)?.pattern
        }
        #expect(noted("POST", "/v1/tasks/abc/progress") == "/v1/tasks/{id}/progress")
        #expect(noted("HEAD", "/v1/tasks/abc") == "/v1/tasks/{id}")
        #expect(noted("GET", "/nope") == nil)
        #expect(noted("PUT", "/v1/tasks/abc") == nil)
        // Nobody asked: nothing noted, nothing allocated.
        guard case .handler(_, let routed) = router.match(HTTPRequest(method: "GET", path: "/")) else { return }
        #expect(routed.routeNote == nil)
    }

    /// A literal segment matches only its own bytes: not a segment of the same length
    /// that differs in one byte, nor a longer or shorter one, nor an empty one.
    @Test func literalSegmentsMatchTheirBytesOnly() {
        #expect(route("POST", "/v1/tasks/abc/progress")?.status == 202)
        for path in ["/v1/tasks/abc/progresz", "/v1/tasks/abc/Progress", "/v1/tasks/abc/progres", "/v1/tasks/abc/progresss",
                     "/v2/tasks/abc/progress", "/v1/taskz/abc/progress", "/v1/tasks/abc/", "//tasks/abc/progress"] {
            #expect(refusal("POST", path) == .routeNotFound, "\(path)")
        }
        // An empty parameter segment matches nothing either.
        #expect(refusal("POST", "/v1/tasks//progress") == .routeNotFound)
    }

    /// The first route noted is the one kept (a request is routed once): it stays alive as
    /// long as the note, and no longer; a route noted too late is let go at once.
    @Test func theFirstRouteNotedStays() {
        weak var first: RoutePattern?
        weak var second: RoutePattern?
        var matched: MatchedRoute? = MatchedRoute()
        do {
            let a = RoutePattern("/a"), b = RoutePattern("/b")
            (first, second) = (a, b)
            matched?.note(a)
            matched?.note(b)
        }
        #expect(matched?.pattern == "/a" && first != nil)
        #expect(second == nil)
        matched = nil
        #expect(first == nil)
        #expect(MatchedRoute().route == nil)
    }

    /// Every parameter of a pattern is found by its own name, also names of one length;
    /// a name the pattern lacks has no value. Paths with non-ASCII text and escapes
    /// already decoded are matched on their bytes.
    @Test func parametersAreFoundByName() {
        var router = Router()
        router.add("GET", "/v1/{ab}/x/{cd}/{abc}") { request, responder in
            let values = ["ab", "cd", "abc", "ac", "a"].map { request.pathParameters[$0] ?? "-" }
            responder.respond(HTTPResponse(status: 200, body: Array(values.joined(separator: " ").utf8)))
        }
        guard case .handler(let handler, let routed) = router.match(HTTPRequest(method: "GET", path: "/v1/é/x/2/three"))
        else { Issue.record("not routed"); return }
        let responder = RecordingResponder()
        handler(routed, responder)
        #expect(responder.response.map { String(decoding: $0.body, as: UTF8.self) } == "é 2 three - -")
        #expect(router.takes(HTTPRequest(method: "HEAD", path: "/v1/a/x/b/c")))
        #expect(!router.takes(HTTPRequest(method: "GET", path: "/v1/a/y/b/c")))
        let literal: PathParameters = ["id": "abc"]
        #expect(literal["id"] == "abc" && literal["ic"] == nil && literal["i"] == nil)
    }

    /// A header is found whatever the case asked, among names of the same length.
    @Test func headersAreFoundByNameInAnyCase() {
        let request = HTTPRequest(method: "GET", path: "/", headers: [
            HTTPField("x-a", "1"), HTTPField("x-b", "2"), HTTPField("x-bb", "3"), HTTPField("x-b", "4"),
        ])
        #expect(request.header("x-b") == "2")
        #expect(request.header("X-BB") == "3")
        #expect(request.header("x-c") == nil && request.header("x-") == nil && request.header("") == nil)
    }

    @Test func unknownPathsAreRefusedAsNotFound() {
        for path in ["/v1", "/v1/tasks/", "/v1/tasks/a/b", "/v1/tasks//progress", "/nope"] {
            #expect(refusal("GET", path) == .routeNotFound, "\(path)")
        }
    }

    @Test func knownPathWithOtherMethodIsRefusedWithTheMethodsItTakes() {
        #expect(refusal("PUT", "/v1/tasks/abc") == .methodNotAllowed(allowed: ["GET", "HEAD", "DELETE"]))
        #expect(refusal("HEAD", "/v1/tasks/abc/progress") == .methodNotAllowed(allowed: ["POST"]))
    }

    /// A path two patterns match (a literal beside a parameter) belongs to the one added
    /// first: only its methods serve it and are named in `Allow`.
    @Test func aPathMatchedByTwoPatternsBelongsToTheFirst() {
        var router = Router()
        router.add("GET", "/v1/tasks/summary") { _, responder in responder.respond(HTTPResponse(status: 200, body: Array("sum".utf8))) }
        router.add("GET", "/v1/tasks/{id}") { _, responder in responder.respond(HTTPResponse(status: 200)) }
        router.add("DELETE", "/v1/tasks/{id}") { _, responder in responder.respond(HTTPResponse(status: 204)) }
        let summary = HTTPRequest(method: "GET", path: "/v1/tasks/summary")
        guard case .handler(let handler, let request) = router.match(summary) else { Issue.record("not routed"); return }
        let responder = RecordingResponder()
        handler(request, responder)
        #expect(responder.response?.body == Array("sum".utf8))
        for method in ["DELETE", "OPTIONS"] {
            guard case .refused(let refusal) = router.match(HTTPRequest(method: method, path: "/v1/tasks/summary")) else {
                Issue.record("\(method) routed"); continue
            }
            #expect(refusal == .methodNotAllowed(allowed: ["GET", "HEAD"]), "\(method)")
        }
        #expect(!router.takes(HTTPRequest(method: "DELETE", path: "/v1/tasks/summary")))
        #expect(router.takes(HTTPRequest(method: "DELETE", path: "/v1/tasks/other")))
    }

    /// `HEAD` is served by a path's `GET` route; through the pipeline a stream never starts.
    @Test func headIsServedLikeGetWithoutAStream() {
        #expect(route("HEAD", "/v1/tasks/abc")?.body == Array("abc".utf8), "the library leaves out the body of a HEAD reply")
        var router = Router()
        let stream = ResponseStream()
        router.add("GET", "/events") { _, responder in responder.respond(HTTPResponse(status: 200, stream: stream)) }
        let responder = RecordingResponder()
        HTTPPipeline(router: router, renderRefusal: HTTPPipeline.plainText).handle(HTTPRequest(method: "HEAD", path: "/events"), responder)
        #expect(responder.response?.status == 200)
        #expect(responder.response?.stream == nil)
        #expect(!stream.isOpen, "the stream was closed, not left to its writer")
    }
}

/// Adds `name` to the `X-Steps` header on the way in and notes when the exchange ends.
private struct Step: HTTPMiddleware {
    let name: String
    let ended: Notes

    func handle(_ request: HTTPRequest, _ responder: any Responder, next: HTTPHandler) {
        var request = request
        let steps = (request.header("x-steps").map { $0 + "," } ?? "") + name
        request.headers.removeAll { $0.name == "x-steps" }
        request.headers.append(HTTPField("x-steps", steps))
        responder.onComplete { [name, ended] completion in ended.note("\(name):\(completion.status ?? 0)") }
        next(request, responder)
    }
}

/// Notes taken from several threads.
private final class Notes: Sendable {
    private let notes = Locked<[String]>([])
    func note(_ text: String) { notes.withLock { $0.append(text) } }
    var all: [String] { notes.withLock { $0 } }
}

@Suite struct HTTPPipelineTests {
    private func pipeline(_ ended: Notes) -> HTTPPipeline {
        var router = Router()
        router.add("GET", "/steps") { request, responder in
            responder.respond(HTTPResponse(status: 200, body: Array((request.header("x-steps") ?? "").utf8)))
        }
        return HTTPPipeline(middleware: [Step(name: "first", ended: ended), Step(name: "second", ended: ended)],
                            router: router) { refusal, request in
            HTTPResponse(status: 499, body: Array("\(refusal) \(request.header("x-steps") ?? "")".utf8))
        }
    }

    @Test func middlewareRunsInOrderAroundTheRouteAndSeesTheEnd() {
        let ended = Notes()
        let responder = RecordingResponder()
        pipeline(ended).handle(HTTPRequest(method: "GET", path: "/steps"), responder)
        #expect(responder.response.map { String(decoding: $0.body, as: UTF8.self) } == "first,second")
        responder.complete(status: 200)
        #expect(ended.all == ["first:200", "second:200"])
    }

    @Test func refusalsOfTheRouterAndOfTheServerPassTheSameMiddleware() {
        let ended = Notes()
        let routed = RecordingResponder()
        pipeline(ended).handle(HTTPRequest(method: "POST", path: "/steps"), routed)
        #expect(routed.response.map { String(decoding: $0.body, as: UTF8.self) }
            == "methodNotAllowed(allowed: [\"GET\", \"HEAD\"]) first,second")
        let refused = RecordingResponder()
        pipeline(ended).refuse(.shuttingDown, HTTPRequest(method: "GET", path: "/steps"), refused)
        #expect(refused.response.map { String(decoding: $0.body, as: UTF8.self) } == "shuttingDown first,second")
        #expect(refused.response?.status == 499)
    }
}

/// The target checks scan for escapes in place; they must judge every target as a plain
/// scan of its bytes does.
@Suite struct TargetCheckTests {
    /// The answer by the plain definition: some `%` followed by the two bytes.
    private static func reference(_ target: [UInt8]) -> HTTPRefusal? {
        func holds(_ bytes: ArraySlice<UInt8>, _ matches: (UInt8, UInt8) -> Bool) -> Bool {
            let bytes = Array(bytes)
            return bytes.count >= 3 && (0..<bytes.count - 2).contains { bytes[$0] == UInt8(ascii: "%") && matches(bytes[$0 + 1], bytes[$0 + 2]) }
        }
        if holds(target[...], { $0 == UInt8(ascii: "0") && $1 == UInt8(ascii: "0") }) { return .nulInTarget }
        let path = target.prefix { $0 != UInt8(ascii: "?") }
        if holds(path, { $0 == UInt8(ascii: "2") && $1 | 0x20 == UInt8(ascii: "f") }) { return .encodedSlashInPath }
        return nil
    }

    @Test func escapesAreFoundWhereverTheyStand() {
        let check = TargetCheck(maximumQueryParameters: 1_000, maximumTargetBytes: 1_000)
        var generator = SeededGenerator(seed: 16)
        let alphabet = Array("%02fF/a?".utf8)
        for length in 0..<12 {
            for _ in 0..<400 {
                let target = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }
                #expect(check.refusal(for: target) == Self.reference(target), "\(String(decoding: target, as: UTF8.self))")
            }
        }
        for target in ["%", "%2", "%0", "%%2F", "%0%00", "/a%2f", "/a?%2f", "%2F?x"] {
            let bytes = Array(target.utf8)
            #expect(check.refusal(for: bytes) == Self.reference(bytes), "\(target)")
        }
    }
}
