import HeadwayTestSupport
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
        #expect(route("GET /v1/events HTTP/1.1\r\nCookie: \(cookie)") == nil, "the head may still end")
        let huge = String(repeating: "c", count: 8 * 1024)
        #expect(route("GET /v1/events HTTP/1.1\r\nCookie: \(huge)") == .request, "past 8 KiB without an end")
    }

    /// The stream daemon's connections have room for a few query parameters only.
    @Test func aStreamRequestWithManyQueryParametersGoesToTheRequestDaemon() {
        let eight = (1...8).map { "task=t\($0)" }.joined(separator: "&")
        #expect(route("GET /v1/events?\(eight) HTTP/1.1\r\nHost: x\r\n\r\n") == .stream)
        #expect(route("GET /v1/events?\(eight)&task=t9 HTTP/1.1\r\nHost: x\r\n\r\n") == .request)
        #expect(ConnectionRoute.queryParameterCount(Array("GET /v1/events?a=1&&b HTTP/1.1\r\n".utf8)) == 2)
        #expect(ConnectionRoute.queryParameterCount(Array("GET /v1/events HTTP/1.1\r\n".utf8)) == 0)
    }

    @Test func everythingElseGoesToTheRequestDaemon() {
        #expect(route("POST /v1/tasks HTTP/1.1\r\n\r\n") == .request)
        #expect(route("GET /v1/tasks HTTP/1.1\r\n\r\n") == .request)
        #expect(route("GET /v1/eventsx HTTP/1.1\r\n\r\n") == .request)
        #expect(route("POST /v1/events HTTP/1.1\r\n\r\n") == .request)
        #expect(route("\r\nGET /v1/events HTTP/1.1\r\n\r\n") == .request)
        #expect(ConnectionRoute.classify(Array("GET /v1/events HTTP/1.1\r\n\r\n".utf8), streamPaths: []) == .request)
    }

    @Test func waitsForTheWholeHeadWhateverTheRoute() {
        #expect(route("") == nil)
        #expect(route("G") == nil)
        #expect(route("GET /v1/ev") == nil)
        #expect(route("GET /v1/events") == nil)
        #expect(route("GET /v1/events HTTP/1.1\r\n") == nil)
        #expect(route("GET /v2") == nil)
        #expect(route("POST /v1/tasks HTTP/1.1\r\nHost: x\r\n") == nil)
    }

    /// Garbage is refused by the request daemon at once, not left to wait for a head's end.
    @Test func aFirstLineThatIsNoRequestLineGoesToTheRequestDaemonAtOnce() {
        #expect(route("GARBAGE\r\nmore") == .request)
        #expect(route("GET /v1/events\r\n") == .request, "no HTTP version")
        #expect(route("GET  /v1/events HTTP/1.1\r\n") == .request)
        #expect(route("G\u{1}T /v1/events HTTP/1.1\n") == .request)
        #expect(route("\u{0}\u{ff}\n\u{7}") == .request)
        #expect(route("GET /v1/events HTTP/1.1\r\nHost: x") == nil, "a request line: waits for the head")
        #expect(route("\r\nGET /v1/events HTTP/1.1\r\n") == nil, "an empty line first: may still be a request")
        #expect(route("GARBAGE WITHOUT A LINE END") == nil)
    }

    /// RFC 9112 lets a server take a bare LF as a line end: such a head is whole at once.
    @Test func aHeadWithBareLineFeedsIsWholeAtOnce() {
        #expect(route("GET /v1/events HTTP/1.1\n\n") == .stream)
        #expect(route("GET /v1/events HTTP/1.1\nHost: x\n\n") == .stream)
        #expect(route("GET /v1/events HTTP/1.1\r\nHost: x\n\r\n") == .stream, "line ends mixed")
        #expect(route("POST /v1/tasks HTTP/1.1\nContent-Length: 2\n\n{}") == .request)
        #expect(route("GET /v1/events HTTP/1.1\nHost: x\n") == nil)
    }

    @Test func underTLSAConnectionIsHandedOverOnceItsFirstRecordIsWhole() {
        // A handshake record (22), TLS 1.0 framing (3, 1), 6 bytes of content.
        let record: [UInt8] = [22, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3]
        #expect(ConnectionRoute.classifyTLSOpening(record, maximumBytes: 1024) == .clientHello)
        #expect(ConnectionRoute.classifyTLSOpening(record + [22], maximumBytes: 1024) == .clientHello)
        for count in 0..<record.count {
            #expect(ConnectionRoute.classifyTLSOpening(record.prefix(count), maximumBytes: 1024) == nil, "\(count) bytes")
        }
        // A record larger than what is looked at is handed over when that much has come.
        #expect(ConnectionRoute.classifyTLSOpening(record.prefix(8), maximumBytes: 8) == .clientHello)
    }

    @Test func underTLSPlainHTTPIsNoHandshake() {
        #expect(ConnectionRoute.classifyTLSOpening(Array("G".utf8), maximumBytes: 1024) == .notTLS)
        #expect(ConnectionRoute.classifyTLSOpening(Array("GET / HTTP/1.1\r\n\r\n".utf8), maximumBytes: 1024) == .notTLS)
        #expect(ConnectionRoute.classifyTLSOpening([22, 71], maximumBytes: 1024) == .notTLS, "not protocol version 3")
        #expect(ConnectionRoute.classifyTLSOpening([23, 3, 3, 0, 1, 0], maximumBytes: 1024) == .notTLS, "not a handshake")
    }

    /// The head scans (over the bytes in place; the end of head resumed where an earlier
    /// search stopped) agree with plain loops over every byte, on random heads built of the
    /// bytes that matter: line ends, spaces, separators.
    @Test func theScansAgreeWithPlainLoopsOnRandomHeads() {
        func plainEndOfHead(_ bytes: [UInt8]) -> Int? {
            guard bytes.count >= 2 else { return nil }
            for index in 1..<bytes.count where bytes[index] == 10 {
                if bytes[index - 1] == 10 { return index + 1 }
                if index >= 2 && bytes[index - 1] == 13 && bytes[index - 2] == 10 { return index + 1 }
            }
            return nil
        }
        func plainMalformed(_ bytes: [UInt8]) -> Bool {
            guard var lineEnd = bytes.firstIndex(of: 10) else { return false }
            if lineEnd > 0 && bytes[lineEnd - 1] == 13 { lineEnd -= 1 }
            guard lineEnd > 0 else { return false }
            let parts = bytes[..<lineEnd].split(separator: 32, omittingEmptySubsequences: false)
            let isToken = { (byte: UInt8) in (0x21...0x7e).contains(byte) && !Array("\"(),/:;<=>?@[\\]{}".utf8).contains(byte) }
            return parts.count != 3 || parts[0].isEmpty || !parts[0].allSatisfy(isToken) || parts[1].isEmpty
                || !parts[2].starts(with: Array("HTTP/".utf8))
        }
        var random = SeededGenerator(seed: 16)
        let alphabet = Array("\r\n GET/HTTP/1.1?a=b&:(@\u{7f}\t".utf8)
        for _ in 0..<20_000 {
            var bytes = (0..<Int.random(in: 0...40, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
            if Bool.random(using: &random) { bytes = Array("GET / HTTP/1.1".utf8) + bytes }
            #expect(ConnectionRoute.endOfHead(bytes) == plainEndOfHead(bytes), "\(bytes)")
            // Searched again after more bytes came: only past a prefix that held no end.
            let searched = Int.random(in: 0...bytes.count, using: &random)
            if plainEndOfHead(Array(bytes[..<searched])) == nil {
                #expect(ConnectionRoute.endOfHead(bytes, searchedBefore: searched) == plainEndOfHead(bytes), "\(bytes) \(searched)")
            }
            #expect(ConnectionRoute.beginsWithMalformedRequestLine(bytes) == plainMalformed(bytes), "\(bytes)")
        }
    }
}

/// What the accept loop refuses in a first head before libmicrohttpd would answer it with a
/// page of its own (`HeadScreen`).
@Suite struct HeadScreenTests {
    private let screen = HeadScreen(memoryLimit: 8 * 1024, maximumTargetBytes: 1024, maximumBodyBytes: 4096,
                                    maximumQueryParameters: 10)

    private func refusal(_ text: String, maximumHead: Int = 8 * 1024) -> HTTPRefusal? {
        refusal(Array(text.utf8), maximumHead: maximumHead)
    }

    private func refusal(_ bytes: [UInt8], maximumHead: Int = 8 * 1024) -> HTTPRefusal? {
        bytes.withUnsafeBufferPointer { screen.refusal(for: $0, maximumHead: maximumHead) }
    }

    @Test func wellFormedHeadsPass() {
        #expect(refusal("GET /x HTTP/1.1\r\nHost: a\r\n\r\n") == nil)
        #expect(refusal("\r\nGET /x HTTP/1.0\nHost: a\nX-Tab: a\tb\n\n") == nil, "empty line first, bare LFs, a tab")
        #expect(refusal("GET  /x  HTTP/1.9\r\n\r\n") == nil, "spaces the library reads past")
        #expect(refusal("POST /x HTTP/1.1\r\nContent-Length:  007\r\n\r\n") == nil)
        #expect(refusal("POST /x HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n") == nil)
        #expect(refusal("GET /x HTTP/1.1\r\nX-A: caf\u{e9}\r\n\r\n") == nil, "bytes above DEL")
        #expect(refusal("GET /x HTTP/1.1\r\nHost: a\r\n") == nil, "not whole yet, nothing wrong so far")
    }

    @Test func requestLinesTheLibraryRefuses() {
        for line in ["GET /x", "GET", " /x HTTP/1.1", "GET  HTTP/1.1", "GET /x HTTP/1.1 ", "GET /x http/1.1", "GET /x HTTP/1.10",
                     "GET /x HTTP/1", "GET /x HTTP/a.b", "GET\t/x HTTP/1.1"] {
            #expect(refusal(line + "\r\nHost: a\r\n\r\n") == .malformedRequestLine, "\(line)")
        }
        for line in ["GET /x HTTP/2.0", "GET /x HTTP/0.9", "GET /x HTTP/3.1"] {
            #expect(refusal(line + "\r\n\r\n") == .versionNotSupported, "\(line)")
        }
        #expect(refusal("GARBAGE\r\nmore") == .malformedRequestLine, "refused once the line is whole")
    }

    @Test func headerLinesTheLibraryRefuses() {
        #expect(refusal("GET /x HTTP/1.1\r\nNoColon\r\n\r\n") == .malformedHeader("a header line without a colon"))
        #expect(refusal("GET /x HTTP/1.1\r\n: 1\r\n\r\n") == .malformedHeader(HeadCheck.nameReason))
        #expect(refusal(Array("GET /x HTTP/1.1\r\nX".utf8) + [0] + Array("Y: 1\r\n\r\n".utf8)) == .malformedHeader(HeadCheck.nameReason))
        #expect(refusal("GET /x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n") == .malformedHeader(HeadCheck.foldedReason))
        for control in Array(0x00...0x08) + Array(0x0b...0x1f) + [0x7f] where control != 0x0d {
            #expect(refusal(Array("GET /x HTTP/1.1\r\nX-A: a".utf8) + [UInt8(control)] + Array("b\r\n\r\n".utf8))
                    == .malformedHeader(HeadCheck.controlReason), "\(control)")
        }
        #expect(refusal("GET /x HTTP/1.1\r\nX-A: a\rb\r\n\r\n") == .malformedHeader(HeadCheck.controlReason), "a bare CR")
    }

    @Test func contentLengthsTheLibraryRefuses() {
        for value in ["2a", "-5", "+2", "2 ", "1 2", "", "2,2", "\t2\t", "0x10"] {
            #expect(refusal("POST /x HTTP/1.1\r\nContent-Length: \(value)\r\n\r\n")?.isBadFraming == true, "'\(value)'")
        }
        #expect(refusal("POST /x HTTP/1.1\r\ncontent-LENGTH: 1e3\r\n\r\n")?.isBadFraming == true, "any case of the name")
        #expect(refusal("POST /x HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n") == .bodyTooLarge(limit: 4096))
    }

    /// A head weighs its bytes and 64 more per header line and query parameter: one over
    /// the connection's memory less 1 KiB is refused, whole or not; a request line not
    /// ended within what is looked at is a target too long.
    @Test func headsTooLargeForTheConnectionsMemory() {
        let limit = 8 * 1024 - HeadScreen.reserve
        func head(lines: Int, value: Int, query: String = "") -> String {
            "GET /x\(query) HTTP/1.1\r\n" + (0..<lines).map { "X-\($0): " + String(repeating: "v", count: value) + "\r\n" }.joined() + "\r\n"
        }
        let small = head(lines: 10, value: 10)
        #expect(refusal(small) == nil)
        let many = head(lines: 100, value: 1)
        #expect(HeadScreen.weight(bytes: many.utf8.count, lines: 100, parameters: 0) > limit)
        #expect(refusal(many) == .headTooLarge(limit: limit))
        #expect(refusal(head(lines: 1, value: limit)) == .headTooLarge(limit: limit))
        let parameters = "?" + (0..<10).map { "p\($0)=1" }.joined(separator: "&")
        #expect(refusal(head(lines: 90, value: 1)) == nil)
        #expect(refusal(head(lines: 90, value: 1, query: parameters)) == .headTooLarge(limit: limit), "parameters weigh too")
        let refusedQuery = "?" + (0..<11).map { "p\($0)=1" }.joined(separator: "&")
        #expect(refusal(head(lines: 90, value: 1, query: refusedQuery)) == nil, "a query the target check refuses is not kept")
        #expect(refusal("GET /x HTTP/1.1\r\nX-A: " + String(repeating: "v", count: 9000), maximumHead: 8192)
                == .headTooLarge(limit: limit))
        #expect(refusal("GET /" + String(repeating: "a", count: 9000), maximumHead: 8192) == .targetTooLong(limit: 1024))
    }

    /// A stream request whose head weighs more than the stream daemon's connections hold
    /// goes to the request daemon.
    @Test func aHeavyStreamHeadGoesToTheRequestDaemon() {
        let light = Array("GET /v1/events HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
        let heavy = Array(("GET /v1/events HTTP/1.1\r\n" + (0..<100).map { "A\($0):\r\n" }.joined() + "\r\n").utf8)
        #expect(heavy.count < 1024)
        #expect(ConnectionRoute.classify(light, streamPaths: ["/v1/events"], maximumStreamWeight: 3584) == .stream)
        #expect(ConnectionRoute.classify(heavy, streamPaths: ["/v1/events"]) == .stream, "by bytes alone")
        #expect(ConnectionRoute.classify(heavy, streamPaths: ["/v1/events"], maximumStreamWeight: 3584) == .request)
    }
}

extension HTTPRefusal {
    var isBadFraming: Bool { if case .badFraming = self { true } else { false } }
}
