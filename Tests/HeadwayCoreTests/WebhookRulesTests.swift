import CCurl
import Foundation
import Testing
@testable import HeadwayCore

/// The pure rules of webhooks: which addresses are public, which URLs may be posted to,
/// which events a webhook wants, the retry schedule, the verdict on a status, and the
/// bodies (JSON and the Slack line).
struct WebhookRulesTests {
    @Test(arguments: [
        "127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "255.255.255.255",
        "240.0.0.1", "192.0.2.1", "198.18.0.1", "::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1", "64:ff9b::a00:1",
        "2002:a00:1::", "2001:db8::1", "::ffff:0:127.0.0.1", "::ffff:0:a00:1", "2001::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:1ff::1", "2001:20::1", "100::1", "3fff::1", "5f00::1",
    ])
    func nonPublicAddressesAreRefused(_ text: String) throws {
        let address = try #require(IPAddress.parse(text), "\(text) parses")
        #expect(!address.isPublic, "\(text)")
    }

    @Test(arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2606:4700::1111",
                      "::ffff:93.184.216.34", "2002:5db8:d822::", "2001:4860:4860::8888", "2001:200::1",
                      "::ffff:0:5db8:d822", "100:0:0:1::1"])
    func publicAddressesAreAllowed(_ text: String) throws {
        let address = try #require(IPAddress.parse(text), "\(text) parses")
        #expect(address.isPublic, "\(text)")
    }

    @Test func addressesParseStrictly() {
        for text in ["1.2.3", "1.2.3.4.5", "256.1.1.1", "01234.1.1.1", "1.2.3.-4", ":::", "1::2::3", "12345::", "g::1",
                     "1:2:3:4:5:6:7:8:9", "localhost", "", "012.9.9.9", "1.2.3.04", "00.0.0.0", "+1.2.3.4", "1.2.3.4 ",
                     "::ffff:012.1.1.1", "::ffff:1.2.3.04", "::ffff:127.1", "１.2.3.4"] {
            #expect(IPAddress.parse(text) == nil, "\(text)")
        }
        #expect(IPAddress.parse("::ffff:1.2.3.4")?.bytes == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4])
        #expect(IPAddress.parse("fe80::1")?.description == "fe80:0:0:0:0:0:0:1")
    }

    /// A host as three parsers read it: libcurl's URL parser (`curl_url_get`: the address a
    /// connection would go to, were libcurl left to read the host itself; or the host
    /// unchanged, a name to resolve, or `refused`), glibc's numeric reading (`getaddrinfo`
    /// with `AI_NUMERICHOST`: `inet_aton`'s rules, which any host handed to the resolver
    /// meets first; nil: not a number to it), and `WebhookURL.parse`'s verdict. Observed
    /// with libcurl 7.88.1 and glibc 2.36 (Debian 12); `curl -v http://HOST:PORT/` against a
    /// listener on 127.0.0.1 connects to 127.0.0.1 for every form below that libcurl reads
    /// as 127.0.0.1 (`0x7f.1`, `0177.1`, `2130706433`, `017700000001`, `127.000.000.001`…).
    struct HostReading: Sendable, CustomStringConvertible {
        var host: String
        var curl: String
        var glibc: String?
        var accepted: Bool
        var description: String { host }
    }

    static let hostReadings: [HostReading] = [
        // The canonical dotted quad: every parser reads the same address.
        .init(host: "127.0.0.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: true),
        .init(host: "93.184.216.34", curl: "93.184.216.34", glibc: "93.184.216.34", accepted: true),
        .init(host: "0.0.0.0", curl: "0.0.0.0", glibc: "0.0.0.0", accepted: true),
        .init(host: "10.0.0.1", curl: "10.0.0.1", glibc: "10.0.0.1", accepted: true),
        .init(host: "255.255.255.255", curl: "255.255.255.255", glibc: "255.255.255.255", accepted: true),
        // Names, however many numbers they hold: the last label is not a number.
        .init(host: "example.com", curl: "example.com", glibc: nil, accepted: true),
        .init(host: "example.com.", curl: "example.com.", glibc: nil, accepted: true),
        .init(host: "1.2.3.4.nip.io", curl: "1.2.3.4.nip.io", glibc: nil, accepted: true),
        .init(host: "0x7f.example.com", curl: "0x7f.example.com", glibc: nil, accepted: true),
        .init(host: "1.2.3.4a", curl: "1.2.3.4a", glibc: nil, accepted: true),
        .init(host: "1.2.3.0xg", curl: "1.2.3.0xg", glibc: nil, accepted: true),
        // Leading zeros: octal to libcurl and glibc, decimal to a naive reader.
        .init(host: "012.9.9.9", curl: "10.9.9.9", glibc: "10.9.9.9", accepted: false),
        .init(host: "172.032.0.1", curl: "172.26.0.1", glibc: "172.26.0.1", accepted: false),
        .init(host: "0127.0.0.1", curl: "87.0.0.1", glibc: "87.0.0.1", accepted: false),
        .init(host: "00000127.0.0.1", curl: "87.0.0.1", glibc: "87.0.0.1", accepted: false),
        .init(host: "127.000.000.001", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "127.0.0.01", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "01.02.03.04", curl: "1.2.3.4", glibc: "1.2.3.4", accepted: false),
        .init(host: "00", curl: "0.0.0.0", glibc: "0.0.0.0", accepted: false),
        // Hex parts.
        .init(host: "0x7f.0.0.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "0X7F.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "0xa.0.0.1", curl: "10.0.0.1", glibc: "10.0.0.1", accepted: false),
        .init(host: "10.0.0.0x1", curl: "10.0.0.1", glibc: "10.0.0.1", accepted: false),
        // Fewer than four parts: the last fills the rest.
        .init(host: "127.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "127.0.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "10.1", curl: "10.0.0.1", glibc: "10.0.0.1", accepted: false),
        .init(host: "0177.1", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "0.0", curl: "0.0.0.0", glibc: "0.0.0.0", accepted: false),
        // One 32-bit number, decimal, octal or hex.
        .init(host: "2130706433", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "167772161", curl: "10.0.0.1", glibc: "10.0.0.1", accepted: false),
        .init(host: "017700000001", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "0x7f000001", curl: "127.0.0.1", glibc: "127.0.0.1", accepted: false),
        .init(host: "4294967295", curl: "255.255.255.255", glibc: "255.255.255.255", accepted: false),
        .init(host: "0", curl: "0.0.0.0", glibc: "0.0.0.0", accepted: false),
        // Numbers that no parser takes as an address, handed to the resolver as names by
        // libcurl: refused all the same (a browser refuses them too; a resolver may answer).
        .init(host: "127.0.0.1.", curl: "127.0.0.1.", glibc: nil, accepted: false),
        .init(host: "0x7f.1.", curl: "0x7f.1.", glibc: nil, accepted: false),
        .init(host: "1.2.3.4.5", curl: "1.2.3.4.5", glibc: nil, accepted: false),
        .init(host: "127.0.0.1.5", curl: "127.0.0.1.5", glibc: nil, accepted: false),
        .init(host: "256.1.1.1", curl: "256.1.1.1", glibc: nil, accepted: false),
        .init(host: "1.2.3.256", curl: "1.2.3.256", glibc: nil, accepted: false),
        .init(host: "4294967296", curl: "4294967296", glibc: nil, accepted: false),
        .init(host: "0x100000000", curl: "0x100000000", glibc: nil, accepted: false),
        .init(host: "99999999999999999999", curl: "99999999999999999999", glibc: nil, accepted: false),
        .init(host: "08.1.1.1", curl: "08.1.1.1", glibc: nil, accepted: false),
        .init(host: "1.2.3.08", curl: "1.2.3.08", glibc: nil, accepted: false),
        .init(host: "09", curl: "09", glibc: nil, accepted: false),
        .init(host: "0x", curl: "0x", glibc: nil, accepted: false),
        .init(host: "1.2.3.0x", curl: "1.2.3.0x", glibc: nil, accepted: false),
        .init(host: "1e1.1.1.1", curl: "1e1.1.1.1", glibc: nil, accepted: false),
        .init(host: "example.123", curl: "example.123", glibc: nil, accepted: false),
        // Empty labels name no host.
        .init(host: "1..2.3", curl: "1..2.3", glibc: nil, accepted: false),
        .init(host: ".1.2.3.4", curl: ".1.2.3.4", glibc: nil, accepted: false),
        .init(host: "1.2.3.4..", curl: "1.2.3.4..", glibc: nil, accepted: false),
        .init(host: "a..example.com", curl: "a..example.com", glibc: nil, accepted: false),
        // Percent-encoded: libcurl decodes it, a host of ours never holds a %.
        .init(host: "%31%32%37.0.0.1", curl: "127.0.0.1", glibc: nil, accepted: false),
        // IPv6 literals: their IPv4 tail must be canonical too (libcurl and glibc refuse
        // the others; a lax reader would take ::ffff:012.1.1.1 as ::ffff:12.1.1.1).
        .init(host: "[::ffff:127.0.0.1]", curl: "[::ffff:127.0.0.1]", glibc: "::ffff:127.0.0.1", accepted: true),
        .init(host: "[::127.0.0.1]", curl: "[::127.0.0.1]", glibc: "::127.0.0.1", accepted: true),
        .init(host: "[::ffff:7f00:1]", curl: "[::ffff:7f00:1]", glibc: "::ffff:127.0.0.1", accepted: true),
        .init(host: "[1:2:3:4:5:6:1.2.3.4]", curl: "[1:2:3:4:5:6:1.2.3.4]", glibc: "1:2:3:4:5:6:102:304", accepted: true),
        .init(host: "[::ffff:012.1.1.1]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:1.2.3.04]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:127.1]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:0x7f.0.0.1]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:256.1.1.1]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:1.2.3.4.5]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[::ffff:2130706433]", curl: "refused", glibc: nil, accepted: false),
        .init(host: "[fe80::1%25eth0]", curl: "[fe80::1]", glibc: nil, accepted: false),
    ]

    /// Whatever parser reads a host, a host we accept reads the same to it: libcurl keeps
    /// it as written (or as the same address), glibc reads the same address or none.
    @Test(arguments: hostReadings)
    func aHostIsAcceptedOnlyWhereEveryParserReadsItAlike(_ form: HostReading) {
        let url = "http://\(form.host):9/hook"
        let parsed = try? WebhookURL.parse(url)
        #expect((parsed != nil) == form.accepted, "\(form.host): ours")
        #expect(Self.curlHost(url) == form.curl, "\(form.host): libcurl")
        let bare = form.host.hasPrefix("[") ? String(form.host.dropFirst().dropLast()) : form.host
        #expect(Self.glibcAddress(bare) == form.glibc, "\(form.host): glibc")
        guard let parsed else { return }
        if let address = IPAddress.parse(parsed.host) {
            // An address: libcurl and glibc read the one we checked.
            #expect(IPAddress.parse(form.glibc ?? "") == address, "\(form.host)")
            let curl = Self.curlHost(url)
            #expect(IPAddress.parse(curl.hasPrefix("[") ? String(curl.dropFirst().dropLast()) : curl) == address)
        } else {
            // A name: libcurl leaves it to the resolver as written, and it is no number to glibc.
            #expect(Self.curlHost(url) == form.host && form.glibc == nil, "\(form.host)")
            #expect(!WebhookURL.endsInNumber(parsed.host))
        }
    }

    @Test func aRefusedSpellingSaysWhy() {
        #expect(throws: WebhookURL.Refusal.self) { try WebhookURL.parse("http://012.9.9.9:18999/") }
        do {
            _ = try WebhookURL.parse("http://012.9.9.9:18999/")
        } catch {
            #expect(error.message.contains("four decimal numbers from 0 to 255 without leading zeros"))
        }
    }

    @Test func endsInNumberFollowsWHATWG() {
        for host in ["1", "1.2", "a.1", "a.1.", "a.0x", "a.0X1F", "0x", "1.2.3.4", "08"] {
            #expect(WebhookURL.endsInNumber(host), "\(host)")
        }
        for host in ["a", "a.b", "1.a", "a.0xg", "a.1x", "a.1.a", ".", "1e1", "a.x1"] {
            #expect(!WebhookURL.endsInNumber(host), "\(host)")
        }
    }

    /// The host libcurl's URL parser reads in `url`, or `refused`.
    static func curlHost(_ url: String) -> String {
        guard let handle = curl_url() else { return "no handle" }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, url, 0) == CURLUE_OK else { return "refused" }
        var part: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, CURLUPART_HOST, &part, 0) == CURLUE_OK, let part else { return "no host" }
        defer { curl_free(part) }
        return String(cString: part)
    }

    /// The address glibc reads `host` as, without asking any name server, or nil.
    static func glibcAddress(_ host: String) -> String? {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(list) }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        if first.pointee.ai_family == AF_INET {
            first.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var address = v4.pointee.sin_addr
                _ = inet_ntop(AF_INET, &address, &text, socklen_t(text.count))
            }
        } else {
            first.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var address = v6.pointee.sin6_addr
                _ = inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
            }
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test func urlsOfHTTPAndHTTPSParse() throws {
        let plain = try WebhookURL.parse("http://Example.com/hook?a=1")
        #expect(plain.scheme == "http" && plain.host == "example.com" && plain.port == 80)
        let secure = try WebhookURL.parse("HTTPS://hooks.slack.com:8443/services/T/B/X")
        #expect(secure.scheme == "https" && secure.host == "hooks.slack.com" && secure.port == 8443)
        let v6 = try WebhookURL.parse("http://[2606:4700::1111]:81")
        #expect(v6.host == "2606:4700::1111" && v6.port == 81)
    }

    @Test(arguments: ["ftp://example.com/", "file:///etc/passwd", "gopher://x/", "example.com/hook", "http://",
                      "http://user:pw@example.com/", "http://example.com/#frag", "http://exa mple.com/",
                      "http://example.com:0/", "http://example.com:65536/", "http://example.com:8o/",
                      "http://example.com:+80/", "http://[::1]:+80/",
                      "http://[::1/", "http://[zz::1]/", "http://ex%61mple.com/", "http://héllo.com/"])
    func otherURLsAreRefused(_ text: String) {
        #expect(throws: WebhookURL.Refusal.self, "\(text)") { try WebhookURL.parse(text) }
    }

    @Test func aURLIsAtMost2048Bytes() throws {
        let prefix = "https://example.com/"
        _ = try WebhookURL.parse(prefix + String(repeating: "a", count: 2048 - prefix.utf8.count))
        #expect(throws: WebhookURL.Refusal.self) {
            try WebhookURL.parse(prefix + String(repeating: "a", count: 2049 - prefix.utf8.count))
        }
    }

    @Test func theFilterTakesKindPrefixAndOutcome() {
        let filter = WebhookFilter(events: [.stalled, .finished], taskPrefix: "db-", outcomes: [.failed])
        #expect(filter.matches(kind: .stalled, taskID: "db-3", state: .running))
        #expect(!filter.matches(kind: .stalled, taskID: "web-3", state: .running))
        #expect(!filter.matches(kind: .updated, taskID: "db-3", state: .running))
        #expect(filter.matches(kind: .finished, taskID: "db-3", state: .failed))
        #expect(!filter.matches(kind: .finished, taskID: "db-3", state: .succeeded))
        let every = WebhookFilter(events: [.finished])
        #expect(every.matches(kind: .finished, taskID: "x", state: .canceled))
    }

    @Test func retriesDoubleUpToTheCapWithFullJitterAndEnd() {
        let policy = WebhookRetryPolicy(baseMilliseconds: 1000, capMilliseconds: 600_000, giveUpAfterMilliseconds: 3_600_000)
        #expect((1...12).map { policy.bound(afterAttempts: $0) }
                    == [1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000, 600_000, 600_000])
        #expect(policy.bound(afterAttempts: 1_000) == 600_000)
        for attempts in 1...12 {
            for random in [0, 0.25, 0.5, 0.999, 1, 1.5] {
                let delay = policy.nextAttempt(afterAttempts: attempts, now: 10_000, createdAt: 10_000) { random }! - 10_000
                #expect(delay == Int64((Double(policy.bound(afterAttempts: attempts)) * min(random, 1)).rounded()),
                        "attempt \(attempts), random \(random): \(delay)")
            }
        }
        #expect(policy.nextAttempt(afterAttempts: 1, now: 0, createdAt: 0) { 1 } == 1000)
        #expect(policy.nextAttempt(afterAttempts: 1, now: 0, createdAt: 0) { 0 } == 0)
        // Past the hour since the event: given up.
        #expect(policy.nextAttempt(afterAttempts: 11, now: 3_500_000, createdAt: 0) { 1 } == nil)
        var exact = policy
        exact.jitter = false
        #expect(exact.nextAttempt(afterAttempts: 3, now: 0, createdAt: 0) { 0 } == 4000)
    }

    @Test func statusesDecideDeliveredRetryOrFail() {
        for status in [200, 201, 204, 299] { #expect(WebhookAttemptVerdict.of(status: status) == .delivered) }
        for status in [408, 429, 500, 502, 503, 599] { #expect(WebhookAttemptVerdict.of(status: status) == .retry) }
        for status in [100, 301, 302, 307, 400, 401, 403, 404, 410, 422, 0] {
            #expect(WebhookAttemptVerdict.of(status: status) == .fail, "\(status)")
        }
    }

    @Test func theRequestBodyIsReadWhole() throws {
        let body = try #require(JSONValue.parse(#"{"url":"https://x.example/h","events":["task.finished","task.stalled"],"outcomes":["failed"],"format":"slack","task_prefix":"db-"}"#.utf8))
        let request = try WebhookRequest.parse(body)
        #expect(request.url == "https://x.example/h" && request.format == .slack)
        #expect(request.filter == WebhookFilter(events: [.finished, .stalled], taskPrefix: "db-", outcomes: [.failed]))
        let bad = try #require(JSONValue.parse(#"{"events":["task.nope"],"task_prefix":"a b","outcomes":[],"extra":1}"#.utf8))
        #expect { try WebhookRequest.parse(bad) } throws: { error in
            guard case TaskError.invalidRequest(let errors) = error else { return false }
            return Set(errors.map(\.field)) == ["url", "events", "task_prefix", "outcomes", "extra"]
        }
    }

    @Test func theSlackLineSaysWhatHappened() {
        var task = TaskRecord(id: "db-3", name: "Nightly backup of db-3", completed: 768, total: 1200, unit: "files",
                              stallTimeoutMilliseconds: 42_000, createdAt: 0, updatedAt: 0, lastSignalAt: 0)
        task.stalled = true
        task.stallReason = .silent
        #expect(WebhookBody.slackText(TaskEvent(.stalled, task))
                    == "Nightly backup of db-3 stalled: no signal for 42 s — 64%, 768 of 1,200 files")
        task.state = .failed
        task.message = "disk full"
        #expect(WebhookBody.slackText(TaskEvent(.finished, task)) == "Nightly backup of db-3 failed: disk full — 64%, 768 of 1,200 files")
        let bare = TaskRecord(id: "x", name: "Reindex", state: .succeeded, createdAt: 0, updatedAt: 0, lastSignalAt: 0)
        #expect(WebhookBody.slackText(TaskEvent(.finished, bare)) == "Reindex succeeded")
        #expect(WebhookBody.grouped(1_234_567) == "1,234,567" && WebhookBody.grouped(999) == "999")
    }

    @Test func theSlackLineShowsMarkupAsWritten() {
        #expect(WebhookBody.slackEscaped("<!channel> a & b <https://x.example|y>")
                    == "&lt;!channel&gt; a &amp; b &lt;https://x.example|y&gt;")
        #expect(WebhookBody.slackEscaped("Nightly backup — 64%") == "Nightly backup — 64%")
    }

    @Test func theJSONBodyCarriesTheEventAndTheTask() throws {
        let task = TaskRecord(id: "t", name: "T", createdAt: 0, updatedAt: 0, lastSignalAt: 0)
        var event = TaskEvent(.stalled, task)
        event.changeNumber = 42
        let webhook = WebhookRecord(id: "whk_1", url: "https://x.example/h", filter: WebhookFilter(events: [.stalled]),
                                    format: .json, secret: "s", createdAt: 0)
        let body = try #require(WebhookBody.render(for: webhook, deliveryID: "whk_1-42", event: event, occurredAt: 1_000))
        guard case .object(let object)? = JSONValue.parse(body.utf8) else { Issue.record("not an object: \(body)"); return }
        #expect(object["id"] == .string("whk_1-42") && object["type"] == .string("task.stalled"))
        #expect(object["event_id"] == .integer(42) && object["occurred_at"] == .string("1970-01-01T00:00:01.000Z"))
        #expect(JSONValue.parse(task.json.utf8) == object["task"])
    }
}
