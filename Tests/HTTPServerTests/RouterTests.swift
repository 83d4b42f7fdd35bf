import Testing
@testable import HTTPServer

/// Records what a handler answered.
final class RecordingResponder: Responder, @unchecked Sendable {
    var response: HTTPResponse?
    func respond(_ response: HTTPResponse) { self.response = response }
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

    private func route(_ method: String, _ path: String) -> HTTPResponse {
        let responder = RecordingResponder()
        router.handle(HTTPRequest(method: method, path: path), responder)
        return responder.response!
    }

    @Test func matchesLiteralAndParameterSegments() {
        #expect(route("GET", "/").status == 200)
        #expect(route("GET", "/v1/tasks/abc").body == Array("abc".utf8))
        #expect(route("POST", "/v1/tasks/abc/progress").status == 202)
    }

    @Test func unknownPathsAre404() {
        for path in ["/v1", "/v1/tasks/", "/v1/tasks/a/b", "/v1/tasks//progress", "/nope"] {
            let response = route("GET", path)
            #expect(response.status == 404, "\(path)")
            #expect(response.headers.contains(HTTPField("Content-Type", "application/problem+json")))
        }
    }

    @Test func knownPathWithOtherMethodIs405WithAllow() {
        let response = route("PUT", "/v1/tasks/abc")
        #expect(response.status == 405)
        #expect(response.headers.contains(HTTPField("Allow", "GET, DELETE")))
        #expect(String(decoding: response.body, as: UTF8.self).contains(#""code":"method_not_allowed""#))
    }
}
