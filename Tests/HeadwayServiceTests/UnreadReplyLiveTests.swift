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
}
