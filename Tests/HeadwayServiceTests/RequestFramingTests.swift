import Foundation
import HeadwayTestSupport
import Testing

/// Heads that a proxy in front could read otherwise than the daemon: a body whose length
/// can be read two ways (request smuggling, RFC 9112 §6.3), a header line that is not
/// `name: value` (whitespace before the colon, a folded line), an HTTP/1.1 request without
/// `Host`. Each is 400 before any route runs, changes nothing, and closes its connection,
/// so no byte after it is read as a request.
@Suite(.serialized) struct RequestFramingTests {
    /// A daemon with a running task `t`.
    private func daemonWithTask() throws -> LiveDaemon {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"t","name":"Copy photos","total":100}"#)
        return daemon
    }

    /// A request hidden after the body a first `Content-Length` would frame: it would
    /// register the task `id`.
    private func hiddenRegistration(_ id: String) -> String {
        let body = #"{"id":"\#(id)","name":"smuggled"}"#
        return "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    /// Sends `bytes` on a new connection: the reply must be 400 with `code` (or, where the
    /// browser checks, which see every refusal first, find the head wanting too, the
    /// problem `orBrowserCheck` with its status), say `Connection: close`, and be the last
    /// thing on the connection.
    private func expectRefusedAndClosed(_ daemon: LiveDaemon, _ bytes: String, code: String,
                                        orBrowserCheck: (status: Int, code: String)? = nil,
                                        sourceLocation: SourceLocation = #_sourceLocation) throws {
        let client = try daemon.connect()
        try client.send(bytes)
        let reply = try client.readResponse()
        let accepted = [(400, code)] + (orBrowserCheck.map { [($0.status, $0.code)] } ?? [])
        #expect(accepted.contains { $0.0 == reply.status && $0.1 == reply.problemCode },
                "\(bytes.prefix(80)) → \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
        #expect(reply.headers["content-type"] == "application/problem+json", sourceLocation: sourceLocation)
        #expect(reply.headers["connection"]?.lowercased() == "close", sourceLocation: sourceLocation)
        // Nothing more: the connection ends without another response.
        var second: TestResponse?
        do { second = try client.readResponse() } catch {}
        #expect(second == nil, "a second response: \(second.map { "\($0.status) \($0.text)" } ?? "")",
                sourceLocation: sourceLocation)
    }

    // MARK: - Framing

    @Test func twoContentLengthsAreRefusedAndTheHiddenRequestNeverRuns() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let hidden = hiddenRegistration("smuggled-cl")
        // Framed by the first, the hidden registration would run as a second request.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: \(2 + hidden.utf8.count)\r\n\r\n{}"
            + hidden, code: "bad_framing")
        // Framed by the last: the same.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(2 + hidden.utf8.count)\r\nContent-Length: 2\r\n\r\n{}"
            + hidden, code: "bad_framing")
        // Equal values too (the strict choice), and a GET.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n{}" + hidden, code: "bad_framing")
        try expectRefusedAndClosed(daemon, "GET /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
            + "Content-Length: \(hidden.utf8.count)\r\n\r\n" + hidden, code: "bad_framing")
        #expect(try daemon.request("GET", "/v1/tasks/smuggled-cl").status == 404, "the hidden request ran")
        #expect(try daemon.snapshot("t") == before, "the refused heartbeat ran")
    }

    @Test func transferEncodingWithContentLengthIsRefusedAndTheHiddenRequestNeverRuns() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let hidden = hiddenRegistration("smuggled-te")
        let chunked = "2\r\n{}\r\n0\r\n\r\n"
        // Framed as chunked, the bytes the Content-Length covers would run as a request.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            + "Content-Length: \(chunked.utf8.count + hidden.utf8.count)\r\n\r\n" + chunked + hidden, code: "bad_framing")
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + hidden,
            code: "bad_framing")
        // Two Transfer-Encodings, or one that is not exactly chunked.
        for encodings in [["chunked", "chunked"], ["gzip, chunked"], ["chunked, chunked"], ["identity"], ["chunked "]] {
            try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + "Content-Type: application/json\r\n" + encodings.map { "Transfer-Encoding: \($0)\r\n" }.joined()
                + "\r\n" + chunked + hidden, code: "bad_framing")
        }
        #expect(try daemon.request("GET", "/v1/tasks/smuggled-te").status == 404, "the hidden request ran")
        #expect(try daemon.snapshot("t") == before, "the refused heartbeat ran")
    }

    @Test func oneContentLengthOrChunkedAloneKeepsTheConnection() throws {
        let daemon = try daemonWithTask()
        let client = try daemon.connect()
        let progress = #"{"completed":5}"#
        try client.send("POST /v1/tasks/t/progress HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Transfer-Encoding: Chunked\r\n\r\n\(String(progress.utf8.count, radix: 16))\r\n\(progress)\r\n0\r\n\r\n")
        let chunked = try client.readResponse()
        #expect(chunked.status == 200, "\(chunked.text)")
        #expect(chunked.json["completed"] as? Int == 5)
        let next = try client.request("POST", "/v1/tasks/t/progress", json: #"{"completed":7}"#)
        #expect(next.status == 200 && next.json["completed"] as? Int == 7, "\(next.text)")
    }

    // MARK: - Header lines

    @Test func aFoldedHeaderLineIsRefused() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        // `Host: evil.example` alone is 400 host_not_allowed; folded, the Host check never judged it.
        try expectRefusedAndClosed(daemon, "GET /v1/tasks/t HTTP/1.1\r\nHost: evil.example\r\n x\r\n\r\n",
                                   code: "malformed_header")
        try expectRefusedAndClosed(daemon, "GET /v1/tasks/t HTTP/1.0\r\nHost: evil.example\r\n\tx\r\n\r\n",
                                   code: "malformed_header")
        try expectRefusedAndClosed(daemon, "GET /v1/tasks/t HTTP/1.1\r\nHost: 127.0.0.1\r\n evil.example\r\n\r\n",
                                   code: "malformed_header")
        // A folded Origin would hide a page's origin from the Origin check.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Origin: https://evil.example\r\n x\r\nContent-Type: application/json\r\n\r\n", code: "malformed_header")
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a\r\n b\r\n c\r\n"
            + "Content-Type: application/json\r\n\r\n", code: "malformed_header")
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            // The library folds the line into the name: the browser checks see no Content-Type,
            // but a request the HTTP layer refuses is not asked for one.
            + "Content-Type: application/json\r\n  application/json\r\n\r\n", code: "malformed_header")
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + "Content-Type: application/json\r\nContent-Length: 2\r\n 0\r\n\r\n{}", code: "malformed_header")
        try expectUnchanged(daemon, before)
    }

    @Test func aHeaderNameThatIsNotATokenIsRefused() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        for lines in ["Host : evil.example\r\n", "Host: 127.0.0.1\r\nHost : evil.example\r\n", "Host\t: evil.example\r\n",
                      "Host: 127.0.0.1\r\nX(y): 1\r\n", "Host: 127.0.0.1\r\nX y: 1\r\n",
                      "Host: 127.0.0.1\r\nOrigin : https://evil.example\r\n"] {
            try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\n" + lines
                + "Content-Type: application/json\r\n\r\n", code: "malformed_header")
            try expectRefusedAndClosed(daemon, "GET /v1/tasks/t HTTP/1.0\r\n" + lines + "\r\n", code: "malformed_header")
        }
        // A foreign Host before it: the Host check, which sees every refusal first, refuses it.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: evil.example\r\nHost : 127.0.0.1\r\n"
            + "Content-Type: application/json\r\n\r\n", code: "malformed_header", orBrowserCheck: (400, "host_not_allowed"))
        // An empty name: libmicrohttpd 0.9.75 ends the head before that line (the handler sees
        // the lines above it: here no Content-Type, 415), then refuses the rest itself (400)
        // and closes. Nothing is changed.
        let client = try daemon.connect()
        try client.send("POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n: 1\r\nContent-Type: application/json\r\n\r\n")
        var statuses: [Int] = []
        while statuses.count < 3, let reply = try? client.readResponse() { statuses.append(reply.status) }
        #expect(!statuses.isEmpty && statuses.allSatisfy { $0 >= 400 } && statuses.count < 3, "\(statuses)")
        try expectUnchanged(daemon, before)
    }

    @Test func anHTTP11RequestWithoutHostIsRefusedAndHTTP10IsServed() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        try expectRefusedAndClosed(daemon, "GET /v1/tasks/t HTTP/1.1\r\n\r\n", code: "host_missing")
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
                                   code: "host_missing")
        try expectUnchanged(daemon, before)
        let client = try daemon.connect()
        try client.send("GET /v1/tasks/t HTTP/1.0\r\n\r\n")
        let served = try client.readResponse()
        #expect(served.status == 200, "\(served.text)")
    }

    /// Whether the task is untouched: running, no cancel requested, as `before`.
    private func expectUnchanged(_ daemon: LiveDaemon, _ before: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let task = try daemon.request("GET", "/v1/tasks/t")
        #expect(task.json["cancel_requested"] as? Bool == false, sourceLocation: sourceLocation)
        #expect(task.text == before, "a refused request changed the task", sourceLocation: sourceLocation)
    }
}
