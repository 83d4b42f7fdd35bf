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
        // An empty name: libmicrohttpd 0.9.75 would end the head before that line and read the
        // rest as a request of its own; the accept loop refuses the head first.
        try expectRefusedAndClosed(daemon, "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n: 1\r\n"
            + "Content-Type: application/json\r\n\r\n", code: "malformed_header")
        try expectUnchanged(daemon, before)
    }

    /// RFC 9110 §5.5: no control character but a tab in a field value. Any of 0x00–0x08,
    /// 0x0A–0x1F or DEL in any header's value is refused (400 `malformed_header`, the
    /// connection closed) on every route and daemon, on a connection's first request and on
    /// a later one; a tab and bytes above DEL are served.
    @Test func aControlCharacterInAHeaderValueIsRefused() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let heads = [
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad-Control-Char: test%@\r\n\r\n",
            "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream%@\r\n\r\n",
            "POST /v1/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Note: a%@b\r\n\r\n",
            "GET /v1/tasks/t HTTP/1.0\r\nUser-Agent: %@\r\n\r\n",
        ]
        // LF ends the line, and CR before it too: each is refused as a line of its own.
        let controls = Array(0x00...0x08) + Array(0x0b...0x0c) + Array(0x0e...0x1f) + [0x7f]
        for (index, control) in controls.enumerated() {
            let head = heads[index % heads.count].replacingOccurrences(of: "%@", with: String(UnicodeScalar(UInt8(control))))
            try expectRefusedAndClosed(daemon, head, code: "malformed_header")
        }
        // A CR inside a value (not before its LF).
        try expectRefusedAndClosed(daemon, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rb\r\n\r\n", code: "malformed_header")
        // On a kept-alive connection's later request too.
        let client = try daemon.connect()
        #expect(try client.request("GET", "/healthz").status == 200)
        try client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad-Control-Char: test\u{07}\r\n\r\n")
        let refused = try client.readResponse()
        #expect(refused.status == 400 && refused.problemCode == "malformed_header", "\(refused.status) \(refused.text)")
        #expect(refused.headers["connection"]?.lowercased() == "close")
        // A NUL in the middle of a value ends it for the library, which keeps the rest of the
        // line out of sight: still refused, on a later request too.
        let second = try daemon.connect()
        #expect(try second.request("GET", "/healthz").status == 200)
        try second.send(Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: te".utf8) + [0]
            + Array("st\r\nX-B: b\r\n\r\n".utf8))
        let nul = try second.readResponse()
        #expect(nul.status == 400 && nul.problemCode == "malformed_header", "\(nul.status) \(nul.text)")
        let last = try daemon.connect()
        #expect(try last.request("GET", "/healthz").status == 200)
        try last.send(Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: te".utf8) + [0] + Array("st\r\n\r\n".utf8))
        let nulInLast = try last.readResponse()
        #expect(nulInLast.status == 400 && nulInLast.problemCode == "malformed_header", "\(nulInLast.status) \(nulInLast.text)")
        // A tab, and UTF-8 above DEL, are field content.
        let served = try daemon.connect()
        try served.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Tab: a\tb\r\nX-Name: caf\u{e9}\r\n\r\n")
        #expect(try served.readResponse().status == 200)
        try expectUnchanged(daemon, before)
    }

    /// Heads libmicrohttpd would answer with an HTML page of its own (a malformed
    /// `Content-Length` with a second status line inside the first reply's body, which a
    /// proxy in front would read as the next reply), or not at all: each gets one problem
    /// document, and its connection is closed.
    @Test func headsTheLibraryWouldAnswerItselfGetProblemDocuments() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let post = "POST /v1/tasks/t/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        let cases: [(head: [UInt8], status: Int, code: String)] = [
            (Array((post + "Content-Length: 2a\r\n\r\n{}").utf8), 400, "bad_framing"),
            (Array((post + "Content-Length: -5\r\n\r\n{}").utf8), 400, "bad_framing"),
            (Array((post + "Content-Length: 2 \r\n\r\n{}").utf8), 400, "bad_framing"),
            (Array((post + "Content-Length: \r\n\r\n{}").utf8), 400, "bad_framing"),
            (Array((post + "Content-Length: 18446744073709551616\r\n\r\n{}").utf8), 413, "body_too_large"),
            (Array((post + "Content-Length: 2\r\nNoColonHere\r\n\r\n{}").utf8), 400, "malformed_header"),
            (Array((post + "Content-Length: 2\r\n: 1\r\n\r\n{}").utf8), 400, "malformed_header"),
            (Array((post + "X").utf8) + [0] + Array("Y: 1\r\nContent-Length: 2\r\n\r\n{}".utf8), 400, "malformed_header"),
            (Array("GET /v1/tasks/t HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n".utf8), 505, "http_version_not_supported"),
            (Array("GET /v1/tasks/t HTTP/0.9\r\nHost: 127.0.0.1\r\n\r\n".utf8), 505, "http_version_not_supported"),
            (Array("GET /v1/tasks/t HTTP/1.10\r\nHost: 127.0.0.1\r\n\r\n".utf8), 400, "malformed_request_line"),
            (Array("GET /v1/tasks/t http/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8), 400, "malformed_request_line"),
            (Array("GET /v1/tasks/t\r\nHost: 127.0.0.1\r\n\r\n".utf8), 400, "malformed_request_line"),
            (Array("GET\r\nHost: 127.0.0.1\r\n\r\n".utf8), 400, "malformed_request_line"),
            (Array("GET  HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8), 400, "malformed_request_line"),
            (Array(("GET /v1/tasks/t HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + (0..<2000).map { "X-\($0): 1\r\n" }.joined() + "\r\n").utf8), 431, "request_header_too_large"),
            (Array(("GET /v1/tasks/t HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: \(String(repeating: "b", count: 30_000))\r\n\r\n").utf8),
             431, "request_header_too_large"),
            (Array("GET /\(String(repeating: "a", count: 40_000)) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8), 414, "uri_too_long"),
        ]
        for (head, status, code) in cases {
            let shown = String(decoding: head.prefix(100), as: UTF8.self)
            let client = try daemon.connect()
            try client.send(head)
            let reply = try client.readResponse()
            #expect(reply.status == status && reply.problemCode == code, "\(shown) → \(reply.status) \(reply.text)")
            #expect(reply.headers["content-type"] == "application/problem+json", "\(shown)")
            #expect(reply.headers["connection"]?.lowercased() == "close", "\(shown)")
            #expect(reply.headers["x-request-id"]?.isEmpty == false, "\(shown)")
            var second: TestResponse?
            do { second = try client.readResponse() } catch {}
            #expect(second == nil, "\(shown): a second reply, \(second.map { "\($0.status) \($0.text)" } ?? "")")
        }
        // A stream request with many short header lines is served (by the daemon whose
        // connections have room for them), not refused for want of memory.
        let stream = try daemon.connect()
        try stream.send("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (0..<150).map { "A\($0):\r\n" }.joined() + "\r\n")
        var streamHead = [try stream.readLine()]
        while let last = streamHead.last, !last.isEmpty, streamHead.count < 30 { streamHead.append(try stream.readLine()) }
        #expect(streamHead.first?.hasPrefix("HTTP/1.1 200") == true
                && streamHead.contains { $0.lowercased().hasPrefix("content-type: text/event-stream") }, "\(streamHead)")
        try expectUnchanged(daemon, before)
        #expect(try daemon.request("GET", "/healthz").status == 200)
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
