import Foundation
import HeadwayTestSupport
import Lifecycle
import Testing

/// Input meant to break the daemon: it must answer with a clear 4xx or close the
/// connection, change nothing, and go on serving.
@Suite(.serialized) struct HostileInputTests {
    @Test func survivesMalformedHTTPAndBodies() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"calm","name":"Calm","total":10}"#)
        let before = try daemon.snapshot("calm")
        var generator = SeededGenerator(seed: 0x4865_6164_7761_79)
        let rawRequests: [[UInt8]] = [
            Array("GARBAGE\r\n\r\n".utf8),
            Array("GET /v1/tasks HTTP/9.9\r\n\r\n".utf8),
            Array("POST /v1/tasks/calm/progress HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".utf8),
            Array("POST /v1/tasks/calm/progress HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n".utf8),
            Array("GET /v1/tasks?\(String(repeating: "state=running&", count: 4000)) HTTP/1.1\r\nHost: x\r\n\r\n".utf8),
            Array("GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 100_000))\r\n\r\n".utf8),
            Array("GET /v1/tasks/%00%ff HTTP/1.1\r\nHost: x\r\n\r\n".utf8),
            (0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) },
        ]
        for bytes in rawRequests {
            // A clear 4xx (or 505) or a closed connection; a timeout fails the test.
            if case .response(let response) = try daemon.connect().exchange(bytes) {
                #expect((400..<500).contains(response.status) || response.status == 505,
                        "\(String(decoding: bytes.prefix(40), as: UTF8.self)) → \(response.status)")
            }
        }
        let bodies: [([UInt8], String)] = [
            (Array(#"{"label":"\ud800"}"#.utf8), "malformed_json"),  // a lone surrogate
            ([0x7b, 0x22, 0x6c, 0x61, 0x62, 0x65, 0x6c, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d], "malformed_json"),  // not UTF-8
            (Array(String(repeating: "{\"a\":", count: 5000).utf8), "malformed_json"),
            (Array("{\"label\":1e999999}".utf8), "malformed_json"),
            (Array("{\"label\":-0}".utf8), "invalid_request"),
            (Array("\u{feff}{\"label\":[]}".utf8), "invalid_request"),
        ]
        for (body, code) in bodies {
            let client = try daemon.connect()
            try client.send(Array("POST /v1/tasks/calm/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
            let response = try client.readResponse()
            #expect(response.status == 400, "\(String(decoding: body.prefix(40), as: UTF8.self)) → \(response.text)")
            #expect(response.problemCode == code, "\(String(decoding: body.prefix(40), as: UTF8.self))")
        }
        // An encoded slash does not split the path: this is no cancel of "calm".
        let encodedSlash = try daemon.connect().request("POST", "/v1/tasks/calm%2Fcancel", json: "{}")
        #expect(encodedSlash.status == 400 && encodedSlash.problemCode == "invalid_request", "\(encodedSlash.text)")
        #expect(try daemon.request("GET", "/healthz").status == 200)
        #expect(try daemon.snapshot("calm") == before, "refused input changed the task")
    }

    /// The access log names the path as the client sent it, escaped: the library's decoded
    /// path, cut at `%00`, would log `DELETE /v1/tasks/p1` for a refused
    /// `DELETE /v1/tasks/p1%00/../x`; a raw control or non-ASCII byte is logged as a
    /// percent-escape, so no line can be forged or move a terminal.
    @Test func theAccessLogShowsThePathAsSent() throws {
        let lines = Locked<[String]>([])
        let daemon = try LiveDaemon(log: { line in lines.withLock { $0.append(line) } })
        try daemon.register(#"{"id":"p1","name":"Victim","total":10}"#)
        let sent: [(target: [UInt8], logged: String)] = [
            (Array("/v1/tasks/p1%00/../x".utf8), " path=/v1/tasks/p1%00/../x "),
            (Array("/v1/tasks/p1%0a".utf8) + [0x1b] + Array("[2J".utf8) + [0xc3, 0xa9], " path=/v1/tasks/p1%0a%1B[2J%C3%A9 "),
            (Array("/v1/tasks/p1".utf8) + [0] + Array("/../x".utf8), " path=/v1/tasks/p1%00 "),
        ]
        for (target, logged) in sent {
            let client = try daemon.connect()
            try client.send(Array("DELETE ".utf8) + target + Array(" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
            let reply = try client.readResponse()
            #expect(reply.status == 400 || reply.status == 404, "\(logged) → \(reply.status) \(reply.text)")
            var line: String?
            for _ in 0..<500 where line == nil {
                line = lines.withLock { $0.first { $0.contains("event=http.request") && $0.contains(" method=DELETE") && $0.contains(logged) } }
                if line == nil { usleep(10_000) }
            }
            #expect(line != nil, "no access log line with\(logged): \(lines.withLock { $0.filter { $0.contains("http.request") } })")
            if let line { #expect(line.contains(" status=\(reply.status) ") && line.hasSuffix("\n") && !line.dropLast().contains("\n")) }
        }
        #expect(try daemon.snapshot("p1").contains(#""id":"p1""#), "the refused deletes deleted nothing")
    }
}
