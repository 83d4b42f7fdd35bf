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
        "2002:a00:1::", "2001:db8::1",
    ])
    func nonPublicAddressesAreRefused(_ text: String) throws {
        let address = try #require(IPAddress.parse(text), "\(text) parses")
        #expect(!address.isPublic, "\(text)")
    }

    @Test(arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2606:4700::1111",
                      "::ffff:93.184.216.34", "2002:5db8:d822::"])
    func publicAddressesAreAllowed(_ text: String) throws {
        let address = try #require(IPAddress.parse(text), "\(text) parses")
        #expect(address.isPublic, "\(text)")
    }

    @Test func addressesParseStrictly() {
        for text in ["1.2.3", "1.2.3.4.5", "256.1.1.1", "01234.1.1.1", "1.2.3.-4", ":::", "1::2::3", "12345::", "g::1",
                     "1:2:3:4:5:6:7:8:9", "localhost", ""] {
            #expect(IPAddress.parse(text) == nil, "\(text)")
        }
        #expect(IPAddress.parse("::ffff:1.2.3.4")?.bytes == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4])
        #expect(IPAddress.parse("fe80::1")?.description == "fe80:0:0:0:0:0:0:1")
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
        let body = WebhookBody.render(.json, deliveryID: "whk_1-42", event: event, occurredAt: 1_000)
        guard case .object(let object)? = JSONValue.parse(body.utf8) else { Issue.record("not an object: \(body)"); return }
        #expect(object["id"] == .string("whk_1-42") && object["type"] == .string("task.stalled"))
        #expect(object["event_id"] == .integer(42) && object["occurred_at"] == .string("1970-01-01T00:00:01.000Z"))
        #expect(JSONValue.parse(task.json.utf8) == object["task"])
    }
}
