import Foundation
import HeadwayTestSupport
import Testing

/// The bound in the real daemon: a client that asks for pages and never reads them is
/// refused further reads once it holds its share, while another client reads on, and it
/// reads again once its replies are gone.
@Suite(.serialized) struct UnreadReplyLiveTests {
    /// The bytes the daemon says wait unread (`headway_unsent_reply_bytes`).
    private func unsentBytes(_ daemon: LiveDaemon) throws -> Int {
        let text = try daemon.request("GET", "/metrics").text
        let line = text.split(separator: "\n").first { $0.hasPrefix("headway_unsent_reply_bytes ") }
        return line.flatMap { Double($0.split(separator: " ")[1]) }.map { Int($0) } ?? -1
    }

    @Test func aClientHoldingItsShareOfUnreadPagesIsRefusedAnotherIsNot() throws {
        // A limit of 1 MiB: a client's share is 256 KiB; one page here is about 600 KB.
        let daemon = try LiveDaemon(arguments: ["--max-unsent-reply-bytes", "1048576"])
        let metadata = String(repeating: "m", count: 4000)
        for index in 0..<140 {
            try daemon.register(#"{"id":"t\#(index)","name":"Task \#(index)","metadata":{"k":"\#(metadata)"}}"#)
        }
        let page = "GET /v1/tasks?page_size=500 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        let hoarder = try TestHTTPClient(port: daemon.application.port, receiveBuffer: 4096)
        try hoarder.send(page)
        var waiting = 0
        for _ in 0..<200 {  // at most 10 s
            waiting = try unsentBytes(daemon)
            if waiting > 256 * 1024 { break }
            usleep(50_000)
        }
        #expect(waiting > 256 * 1024, "the unread page is counted: \(waiting)")

        let again = try TestHTTPClient(port: daemon.application.port)
        let refused = try again.request("GET", "/v1/tasks?page_size=500")
        #expect(refused.status == 503)
        #expect(refused.json["code"] as? String == "server_busy")
        #expect(refused.headers["retry-after"] == "1")
        #expect((refused.json["detail"] as? String)?.contains("wait for their clients to read them") == true)

        let other = try TestHTTPClient(port: daemon.application.port, sourceAddress: "127.0.0.2")
        let served = try other.request("GET", "/v1/tasks?page_size=500")
        #expect(served.status == 200, "another client holding nothing reads")
        #expect((served.json["tasks"] as? [Any])?.count == 140)

        // The hoarder lets go: its page no longer counts, and it reads again.
        hoarder.resetWhenClosed()
        _ = consume hoarder
        var status = 0
        for _ in 0..<100 {  // at most 5 s
            status = try again.request("GET", "/v1/tasks?page_size=1").status
            if status == 200 { break }
            usleep(50_000)
        }
        #expect(status == 200)
        // Every reply was read; the last ones count until their clients' (delayed) ACKs come.
        var left = -1
        for _ in 0..<100 {  // at most 5 s
            left = try unsentBytes(daemon)
            if left == 0 { break }
            usleep(50_000)
        }
        #expect(left == 0)
    }

    /// A batch reserves room for its reply from its head, before its body is read: while
    /// one batch of a client waits for its body, the client's next batch, past its share,
    /// is refused 503 from its head — its body dropped as it comes, never kept or parsed
    /// (a flood of batches costs the server no parsing of the bodies it refuses) — and its
    /// connection stays open; the waiting batch is applied once its body comes, and its
    /// room is then given back.
    @Test func aBatchPastItsClientsShareIsRefusedFromItsHead() throws {
        // A limit of 1 MiB: a client's share is 256 KiB. A 3,000-byte body may hold 1,000
        // items, whose reply is reserved at 1 KiB each.
        let daemon = try LiveDaemon(arguments: ["--max-unsent-reply-bytes", "1048576"])
        try daemon.register(#"{"id":"b","name":"B"}"#)
        // Read from another address: 127.0.0.1 holds its share while the batch waits.
        let reader = try TestHTTPClient(port: daemon.application.port, sourceAddress: "127.0.0.2")
        let before = try reader.request("GET", "/v1/tasks/b").text
        let items = #"{"updates":[{"task_id":"b","increment":1}]}"#
        let body = items + String(repeating: " ", count: 3000 - items.utf8.count)
        let head = "POST /v1/progress HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n"
        let waiting = try daemon.connect()
        try waiting.send(head)
        var held = 0
        for _ in 0..<250 {  // at most 5 s
            held = try unsentBytes(daemon)
            if held > 0 { break }
            usleep(20_000)
        }
        #expect(held == 1000 * 1024, "the waiting batch's head holds room for its reply")

        let refused = try daemon.connect()
        try refused.send(head + body)
        let reply = try refused.readResponse()
        #expect(reply.status == 503, "past its share from its head on: nothing applied")
        #expect(reply.json["code"] as? String == "server_busy")
        #expect(reply.headers["retry-after"] == "1")
        #expect(reply.headers["connection"] == nil, "the body was read: the connection stays open")
        #expect(try refused.request("GET", "/healthz").status == 200)
        #expect(try reader.request("GET", "/v1/tasks/b").text == before)

        try waiting.send(body)
        let applied = try waiting.readResponse()
        #expect(applied.status == 200)
        #expect(try reader.request("GET", "/v1/tasks/b").json["completed"] as? Int == 1)
        var left = -1
        for _ in 0..<250 {  // at most 5 s: the reply counts until its client's (delayed) ACK
            left = try unsentBytes(daemon)
            if left == 0 { break }
            usleep(20_000)
        }
        #expect(left == 0, "the reservation is given back")
    }
}
