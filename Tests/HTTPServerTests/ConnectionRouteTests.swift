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
