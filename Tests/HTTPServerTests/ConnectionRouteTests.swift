import Testing
@testable import HTTPServer

/// Which daemon a connection goes to, decided from the first bytes its client sent.
@Suite struct ConnectionRouteTests {
    private let paths = ["/v1/events"]

    private func route(_ text: String) -> ConnectionRoute? {
        ConnectionRoute.classify(Array(text.utf8), streamPaths: paths)
    }

    @Test func aStreamRequestGoesToTheStreamDaemon() {
        #expect(route("GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n") == .stream)
        #expect(route("GET /v1/events?task=a HTTP/1.1\r\nHost: x\r\n\r\n") == .stream)
    }

    @Test func aStreamRequestWithALargeHeadGoesToTheRequestDaemon() {
        let cookie = String(repeating: "c", count: 1000)
        #expect(route("GET /v1/events HTTP/1.1\r\nCookie: \(cookie)\r\n\r\n") == .request)
        #expect(route("GET /v1/events HTTP/1.1\r\nCookie: \(cookie)") == .request, "1,024 bytes and no end yet")
        #expect(route("GET /v1/events HTTP/1.1\r\nCookie: \(cookie.prefix(500))") == nil, "the head may still end soon")
    }

    @Test func everythingElseGoesToTheRequestDaemon() {
        #expect(route("POST /v1/tasks HTTP/1.1\r\n") == .request)
        #expect(route("GET /v1/tasks HTTP/1.1\r\n") == .request)
        #expect(route("GET /v1/eventsx HTTP/1.1\r\n") == .request)
        #expect(route("POST /v1/events HTTP/1.1\r\n") == .request)
        #expect(route("\r\nGET /v1/events HTTP/1.1\r\n") == .request)
        #expect(ConnectionRoute.classify(Array("GET /v1/events ".utf8), streamPaths: []) == .request)
    }

    @Test func waitsWhileTheBytesCouldStillBeAStreamRequest() {
        #expect(route("") == nil)
        #expect(route("G") == nil)
        #expect(route("GET /v1/ev") == nil)
        #expect(route("GET /v1/events") == nil)
        #expect(route("GET /v1/events HTTP/1.1\r\n") == nil)
        #expect(route("GET /v2") == .request)
        #expect(route("P") == .request)
    }
}
