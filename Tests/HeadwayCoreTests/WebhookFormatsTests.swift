import Foundation
import Testing
@testable import HeadwayCore

/// The formats' bodies, each checked against its receiver's documented schema (the
/// `Schema` checks below, each citing what it was read from), the alert context they
/// carry, the per-format fields a webhook must have, the listing's redactions and the
/// e-mail rate limit.
struct WebhookFormatsTests {
    // MARK: Fixtures

    static let context = AlertContext(parents: [.init(id: "nightly", name: "Nightly"), .init(id: "db", name: "Databases")],
                                      output: ["copying base/16384", "ERROR: disk full", "```oops```"],
                                      ranSeconds: 7_805, link: "https://headway.example.com/#task=db-3")

    /// A failed task under two parents, created at 0, finished at 7,805 s.
    static func failedEvent(name: String = "Nightly backup of db-3") -> TaskEvent {
        var task = TaskRecord(id: "db-3", name: name, parentID: "db", completed: 768, total: 1200, unit: "files",
                              createdAt: 0, updatedAt: 0, lastSignalAt: 0)
        task.state = .failed
        task.message = "disk full"
        task.finishedAt = 7_805_000
        task.changeNumber = 42
        return TaskEvent(.finished, task)
    }

    static func webhook(_ format: WebhookFormat, url: String = "https://receiver.example/hook",
                        destination: WebhookDestination = WebhookDestination()) -> WebhookRecord {
        WebhookRecord(id: "whk_0123456789abcdef", url: url, filter: WebhookFilter(events: [.finished, .stalled]),
                      format: format, secret: "whsec_x", createdAt: 0, destination: destination)
    }

    static func render(_ format: WebhookFormat, url: String = "https://receiver.example/hook",
                       destination: WebhookDestination = WebhookDestination(), event: TaskEvent = failedEvent(),
                       context: AlertContext? = context) throws -> JSONObject {
        let body = try #require(WebhookBody.render(for: webhook(format, url: url, destination: destination),
                                                   deliveryID: "whk_0123456789abcdef-42", event: event,
                                                   occurredAt: 7_805_000, context: context,
                                                   site: "https://headway.example.com"))
        guard case .object(let object)? = JSONValue.parse(body.utf8) else {
            Issue.record("not a JSON object: \(body)")
            return JSONObject()
        }
        return object
    }

    // MARK: Schemas

    /// Fails the test for each way `object` breaks `rules` (member name → check), or for a
    /// member the schema does not know.
    static func conform(_ object: JSONObject, required: Set<String>,
                        _ rules: [String: (JSONValue) -> Bool], _ source: Comment) {
        for name in required { #expect(object[name] != nil, "\(name) is required (\(source))") }
        for (name, value) in object {
            guard let rule = rules[name] else {
                Issue.record("\(name) is not in the schema (\(source))")
                continue
            }
            #expect(rule(value), "\(name) = \(value) breaks the schema (\(source))")
        }
    }

    static func string(max: Int) -> (JSONValue) -> Bool {
        { if case .string(let text) = $0 { !text.isEmpty && text.count <= max } else { false } }
    }

    static func anyString(_ value: JSONValue) -> Bool { if case .string = value { true } else { false } }
    static func anyInteger(_ value: JSONValue) -> Bool { if case .integer = value { true } else { false } }
    static func anyObject(_ value: JSONValue) -> Bool { if case .object = value { true } else { false } }
    static func isoTime(_ value: JSONValue) -> Bool {
        if case .string(let text) = value { ISO8601DateFormatter.withFractions.date(from: text) != nil } else { false }
    }

    static func array(max: Int, _ item: @escaping (JSONValue) -> Bool) -> (JSONValue) -> Bool {
        { if case .array(let items) = $0 { items.count <= max && items.allSatisfy(item) } else { false } }
    }

    static func text(_ value: JSONValue?) -> String? { if case .string(let text)? = value { text } else { nil } }

    // MARK: Bodies

    /// Discord's "Execute Webhook" JSON params (discord/discord-api-docs,
    /// docs/resources/Webhook.md: `content` up to 2,000 characters; one of content, file,
    /// embeds; up to 10 embeds; `allowed_mentions`) and its embed limits
    /// (docs/resources/Channel.md, "Embed Limits": title 256, description 4,096, 25
    /// fields, field name 256 and value 1,024, 6,000 characters in all).
    @Test func discordBodyFollowsExecuteWebhook() throws {
        let body = try Self.render(.discord)
        let embedRules: [String: (JSONValue) -> Bool] = [
            "title": Self.string(max: 256), "description": Self.string(max: 4096), "url": Self.anyString,
            "color": Self.anyInteger, "timestamp": Self.isoTime,
            "fields": Self.array(max: 25) { field in
                guard case .object(let members) = field else { return false }
                return Self.string(max: 256)(members["name"] ?? .null) && Self.string(max: 1024)(members["value"] ?? .null)
                    && members.keys.allSatisfy(["name", "value", "inline"].contains)
            },
        ]
        let source: Comment = "Discord Execute Webhook"
        Self.conform(body, required: ["content"], [
            "content": Self.string(max: 2000),
            "embeds": Self.array(max: 10) { embed in
                guard case .object(let members) = embed else { return false }
                Self.conform(members, required: [], embedRules, source)
                let total = ["title", "description"].compactMap { Self.text(members[$0])?.count }.reduce(0, +)
                return total <= 6000
            },
            "allowed_mentions": { $0 == .object(["parse": .array([])]) },
        ], source)
        #expect(Self.text(body["content"]) == #"Nightly backup of db\-3 failed: disk full — 64%, 768 of 1,200 files"#)
        guard case .array(let embeds)? = body["embeds"], case .object(let embed)? = embeds.first else {
            Issue.record("no embed")
            return
        }
        let description = try #require(Self.text(embed["description"]))
        #expect(description.hasPrefix("```\n") && description.hasSuffix("\n```") && description.contains("ERROR: disk full"))
        // A line of output cannot close the block early.
        #expect(description.components(separatedBy: "```").count == 3)
        #expect(Self.text(embed["url"]) == "https://headway.example.com/#task=db-3")
    }

    @Test func discordMarkdownAndMentionsShowAsWritten() throws {
        let body = try Self.render(.discord, event: Self.failedEvent(name: "@everyone [click](https://evil.example) **x**"),
                                   context: nil)
        #expect(Self.text(body["content"])?.hasPrefix(#"@everyone \[click\]\(https://evil.example\) \*\*x\*\*"#) == true)
        #expect(body["embeds"] == nil && body["allowed_mentions"] == .object(["parse": .array([])]))
    }

    /// ntfy's "Publish as JSON" (binwiederhier/ntfy, docs/publish.md: POST to the root
    /// URL, `topic` required; `message`, `title`, `tags` (strings), `priority` (1–5),
    /// `click` (a URL) among the documented members; messages over 4,096 bytes become
    /// attachments).
    @Test func ntfyBodyFollowsPublishAsJSON() throws {
        let body = try Self.render(.ntfy, url: "https://ntfy.sh/backups")
        let documented = ["topic", "message", "title", "tags", "priority", "actions", "click", "attach", "markdown", "icon",
                          "filename", "delay", "email", "call", "sequence_id"]
        var rules: [String: (JSONValue) -> Bool] = Dictionary(uniqueKeysWithValues: documented.map { name in
            (name, { Self.anyString($0) })
        })
        rules["tags"] = Self.array(max: 20, Self.anyString)
        rules["priority"] = { if case .integer(let value) = $0 { (1...5).contains(value) } else { false } }
        rules["message"] = { if case .string(let text) = $0 { text.utf8.count <= 4096 } else { false } }
        Self.conform(body, required: ["topic"], rules, "ntfy Publish as JSON")
        #expect(body["topic"] == .string("backups") && body["priority"] == .integer(5))
        #expect(body["tags"] == .array([.string("rotating_light"), .string("headway")]))
        #expect(body["click"] == .string("https://headway.example.com/#task=db-3"))
        #expect(Self.text(body["message"])?.contains("Parents: Nightly › Databases\nRan: 2 h 10 min") == true)
        let url = try WebhookURL.parse("https://ntfy.example.com:8443/base/backups")
        #expect(NtfyBody.publishURL(of: url)?.text == "https://ntfy.example.com:8443/base/")
    }

    @Test func ntfyPriorityNeverPutsAFailureBelowASuccess() {
        #expect(WebhookAlert.failed.ntfyPriority == 5)
        for alert in WebhookAlert.allCases { #expect(alert.ntfyPriority <= WebhookAlert.failed.ntfyPriority) }
        #expect(WebhookAlert.succeeded.ntfyPriority < WebhookAlert.stalled.ntfyPriority)
        #expect(WebhookAlert.overdue.ntfyPriority > WebhookAlert.succeeded.ntfyPriority)
    }

    /// The Bot API's `sendMessage` (core.telegram.org/bots/api#sendmessage, as generated
    /// into teloxide-core's payloads/send_message.rs: `chat_id` Integer or String,
    /// required; `text` 1–4,096 characters after entities parsing, required; `parse_mode`;
    /// `link_preview_options`), and its HTML style (only its tags; `&lt;`, `&gt;`,
    /// `&amp;`, `&quot;` the named entities).
    @Test func telegramBodyFollowsSendMessage() throws {
        let body = try Self.render(.telegram, url: "https://api.telegram.org/bot123:abc/sendMessage",
                                   destination: WebhookDestination(chatID: "-1001234567890"),
                                   event: Self.failedEvent(name: "Backup <db> & co"))
        Self.conform(body, required: ["chat_id", "text"], [
            "chat_id": { if case .integer = $0 { true } else { Self.anyString($0) } },
            "text": { value in
                guard case .string(let html) = value else { return false }
                let visible = Self.telegramVisibleText(html)
                return visible.map { (1...4096).contains($0.count) } ?? false
            },
            "parse_mode": { ["HTML", "MarkdownV2", "Markdown"].contains(Self.text($0) ?? "") },
            "link_preview_options": Self.anyObject,
        ], "Telegram sendMessage")
        #expect(body["chat_id"] == .integer(-1_001_234_567_890))
        let html = try #require(Self.text(body["text"]))
        #expect(html.hasPrefix("<b>Backup &lt;db&gt; &amp; co failed: disk full"))
        #expect(html.contains("<pre>copying base/16384\nERROR: disk full\n```oops```</pre>"))
        #expect(html.contains(#"<a href="https://headway.example.com/#task=db-3">Open in Headway</a>"#))
        // The longest message a task may have still fits, with the output.
        var long = Self.failedEvent()
        long.data = long.data.replacingOccurrences(of: #""message":"disk full""#,
                                                   with: #""message":""# + String(repeating: "<é>", count: 1333) + #"""#)
        let longBody = try Self.render(.telegram, destination: WebhookDestination(chatID: "1"), event: long)
        let visible = try #require(Self.telegramVisibleText(Self.text(longBody["text"]) ?? ""))
        #expect(visible.count <= 4096 && visible.hasSuffix("ERROR: disk full\n```oops```"))
        let ntfyBody = try Self.render(.ntfy, url: "https://ntfy.sh/backups", event: long)
        #expect((Self.text(ntfyBody["message"])?.utf8.count ?? 0) <= 4096)
        let channel = try Self.render(.telegram, destination: WebhookDestination(chatID: "@ops_alerts"), context: nil)
        #expect(channel["chat_id"] == .string("@ops_alerts"))
    }

    /// The text Telegram shows for `html`, or nil when it uses a tag or entity Telegram's
    /// HTML style does not know.
    static func telegramVisibleText(_ html: String) -> String? {
        let tags = ["b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre",
                    "blockquote", "tg-emoji"]
        var visible = ""
        var rest = Substring(html)
        while let next = rest.firstIndex(where: { $0 == "<" || $0 == "&" }) {
            visible += rest[..<next]
            if rest[next] == "<" {
                guard let close = rest[next...].firstIndex(of: ">") else { return nil }
                let inside = rest[rest.index(after: next)..<close]
                let name = inside.drop { $0 == "/" }.prefix { $0 != " " }
                guard tags.contains(String(name)) else { return nil }
                rest = rest[rest.index(after: close)...]
            } else {
                guard let end = rest[next...].firstIndex(of: ";") else { return nil }
                switch rest[next...end] {
                case "&lt;": visible += "<"
                case "&gt;": visible += ">"
                case "&amp;": visible += "&"
                case "&quot;": visible += "\""
                default: return nil
                }
                rest = rest[rest.index(after: end)...]
            }
        }
        return visible + rest
    }

    /// PagerDuty's Events API v2, "Send an Alert Event" (PagerDuty/developer-docs,
    /// docs/events-API-v2/02-Trigger-Events.md: `routing_key` and `event_action`
    /// (`trigger`, `acknowledge`, `resolve`) required, `dedup_key` at most 255
    /// characters; for a trigger `payload.summary` (at most 1,024), `payload.source` and
    /// `payload.severity` (`critical`, `error`, `warning`, `info`) required,
    /// `timestamp`, `component`, `group`, `class`, `custom_details` optional; `links` of
    /// `{href, text}`; a resolve needs only the key, the action and the dedup key).
    @Test func pagerDutyBodiesFollowEventsAPIv2() throws {
        let key = WebhookDestination(routingKey: "R0123456789abcdef0123456789abcde")
        let source: Comment = "PagerDuty Events API v2"
        let top: [String: (JSONValue) -> Bool] = [
            "routing_key": Self.anyString, "event_action": { ["trigger", "acknowledge", "resolve"].contains(Self.text($0) ?? "") },
            "dedup_key": Self.string(max: 255), "payload": Self.anyObject, "images": Self.array(max: 10, Self.anyObject),
            "links": Self.array(max: 10) { link in
                guard case .object(let members) = link else { return false }
                return Self.anyString(members["href"] ?? .null) && members.keys.allSatisfy(["href", "text"].contains)
            },
            "client": Self.anyString, "client_url": Self.anyString,
        ]
        let trigger = try Self.render(.pagerduty, destination: key)
        Self.conform(trigger, required: ["routing_key", "event_action", "payload"], top, source)
        guard case .object(let payload)? = trigger["payload"] else { Issue.record("no payload"); return }
        Self.conform(payload, required: ["summary", "source", "severity"], [
            "summary": Self.string(max: 1024), "source": Self.anyString,
            "severity": { ["critical", "error", "warning", "info"].contains(Self.text($0) ?? "") },
            "timestamp": Self.isoTime, "component": Self.anyString, "group": Self.anyString, "class": Self.anyString,
            "custom_details": Self.anyObject,
        ], source)
        #expect(trigger["event_action"] == .string("trigger") && payload["source"] == .string("headway.example.com"))
        #expect(trigger["dedup_key"] == .string("headway:whk_0123456789abcdef:db-3"))
        guard case .object(let details)? = payload["custom_details"], case .object(let context)? = details["context"] else {
            Issue.record("no context in custom_details")
            return
        }
        #expect(context["output"] == .array(Self.context.output.map { .string($0) }))

        var succeeded = TaskRecord(id: "db-3", name: "Nightly backup of db-3", state: .succeeded, createdAt: 0, updatedAt: 0,
                                   lastSignalAt: 0)
        succeeded.finishedAt = 10_000
        let resolve = try Self.render(.pagerduty, destination: key, event: TaskEvent(.finished, succeeded), context: nil)
        Self.conform(resolve, required: ["routing_key", "event_action", "dedup_key"], top, source)
        #expect(resolve == ["routing_key": .string("R0123456789abcdef0123456789abcde"), "event_action": .string("resolve"),
                            "dedup_key": .string("headway:whk_0123456789abcdef:db-3")])
        let recovered = try Self.render(.pagerduty, destination: key, event: TaskEvent(.recovered, succeeded), context: nil)
        #expect(recovered["event_action"] == .string("resolve"))
        // Nothing to send for an event that neither triggers nor resolves.
        #expect(WebhookBody.render(for: Self.webhook(.pagerduty, destination: key), deliveryID: "d",
                                   event: TaskEvent(.created, succeeded), occurredAt: 0) == nil)
    }

    @Test func slackShowsTheContextReadably() throws {
        let body = try Self.render(.slack, event: Self.failedEvent(name: "Backup <db>"))
        #expect(body.keys.sorted() == ["text"])
        let text = try #require(Self.text(body["text"]))
        #expect(text == """
            Backup &lt;db&gt; failed: disk full — 64%, 768 of 1,200 files
            Parents: Nightly › Databases
            Ran: 2 h 10 min
            <https://headway.example.com/#task=db-3|Open in Headway>
            ```
            copying base/16384
            ERROR: disk full
            `\u{200B}``oops`\u{200B}``
            ```
            """)
    }

    @Test func jsonCarriesTheContextAsData() throws {
        let body = try Self.render(.json)
        guard case .object(let context)? = body["context"] else { Issue.record("no context"); return }
        #expect(context["parents"] == .array([.object(["id": .string("nightly"), "name": .string("Nightly")]),
                                               .object(["id": .string("db"), "name": .string("Databases")])]))
        #expect(context["output"] == .array(Self.context.output.map { .string($0) }))
        #expect(context["ran_seconds"] == .integer(7805) || context["ran_seconds"] == .number(7805))
        #expect(context["url"] == .string("https://headway.example.com/#task=db-3"))
        #expect(try Self.render(.json, context: nil)["context"] == nil)
    }

    @Test func contextAppliesToFailuresStallsAndOverdueTasks() {
        var task = TaskRecord(id: "t", name: "T", createdAt: 0, updatedAt: 0, lastSignalAt: 0)
        #expect(AlertContext.applies(to: TaskEvent(.stalled, task)))
        #expect(!AlertContext.applies(to: TaskEvent(.updated, task)) && !AlertContext.applies(to: TaskEvent(.recovered, task)))
        task.state = .failed
        #expect(AlertContext.applies(to: TaskEvent(.finished, task)))
        task.state = .succeeded
        #expect(!AlertContext.applies(to: TaskEvent(.finished, task)))
        // Named by their text: the kinds exist once the overdue rules are merged.
        if let overdue = TaskEventKind(rawValue: "task.overdue") {
            task.state = .running
            #expect(AlertContext.applies(to: TaskEvent(overdue, task)))
            #expect(WebhookAlert(TaskEvent(overdue, task)) == .overdue)
            #expect(WebhookBody.headline(TaskEvent(overdue, task), at: 7_200_000) == "T is overdue: running for 2 h")
        }
        if let tooQuick = TaskEventKind(rawValue: "task.too_quick") {
            #expect(WebhookAlert(TaskEvent(tooQuick, task)) == .tooQuick)
        }
    }

    @Test func aPrefixedWebhookSeesOnlyTheAncestorsInsideItsPrefix() {
        let context = AlertContext(parents: [.init(id: "db-all", name: "All"), .init(id: "nightly", name: "Nightly"),
                                             .init(id: "db-cluster", name: "Cluster")], output: [], ranSeconds: 1, link: nil)
        #expect(context.visible(within: "db-").parents.map(\.id) == ["db-cluster"])
        #expect(context.visible(within: nil).parents.count == 3)
    }

    @Test func durationsReadAsAPersonSaysThem() {
        #expect(WebhookText.duration(42) == "42 s" && WebhookText.duration(303) == "5 min 3 s")
        #expect(WebhookText.duration(7_805) == "2 h 10 min" && WebhookText.duration(3 * 86_400 + 4 * 3_600) == "3 d 4 h")
    }

    // MARK: E-mail

    @Test func theEmailIsAnRFC5322Message() throws {
        let destination = WebhookDestination(mailFrom: "headway@example.com", mailTo: ["ops@example.com", "dba@example.org"])
        let message = try #require(WebhookBody.render(for: Self.webhook(.email, url: "smtps://mail.example.com",
                                                                        destination: destination),
                                                      deliveryID: "whk_0123456789abcdef-42",
                                                      event: Self.failedEvent(name: "Sauvegarde nocturne — base 3"),
                                                      occurredAt: 1_796_453_147_000, context: Self.context))
        let parts = message.components(separatedBy: "\r\n\r\n")
        #expect(parts.count == 2)
        let headers = parts[0].components(separatedBy: "\r\n")
        #expect(headers.contains("Date: Sat, 05 Dec 2026 06:45:47 +0000"))
        #expect(headers.contains("From: headway@example.com") && headers.contains("To: ops@example.com, dba@example.org"))
        #expect(headers.contains("Message-ID: <whk_0123456789abcdef-42@example.com>"))
        #expect(headers.contains("Content-Type: text/plain; charset=utf-8"))
        #expect(headers.allSatisfy { $0.utf8.count <= 78 && $0.utf8.allSatisfy { $0 < 0x80 } })
        // The subject: encoded words that decode to the UTF-8 line.
        let subject = headers.drop { !$0.hasPrefix("Subject: ") }.prefix { $0.hasPrefix("Subject: ") || $0.hasPrefix(" ") }
        let decoded = subject.map { line in
            line.replacingOccurrences(of: "Subject: ", with: "").trimmingCharacters(in: .whitespaces)
        }.map { word -> Data in
            #expect(word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?=") && word.count <= 75)
            return Data(base64Encoded: String(word.dropFirst(10).dropLast(2))) ?? Data()
        }.reduce(Data(), +)
        #expect(String(decoding: decoded, as: UTF8.self)
                    == "[Headway] Sauvegarde nocturne — base 3 failed: disk full — 64%, 768 of 1,200 files")
        let body = String(decoding: Data(base64Encoded: parts[1], options: .ignoreUnknownCharacters) ?? Data(), as: UTF8.self)
        #expect(body.contains("Parents: Nightly › Databases\r\nRan: 2 h 10 min\r\nPage: https://headway.example.com/#task=db-3"))
        #expect(body.contains("    ERROR: disk full"))
        #expect(parts[1].components(separatedBy: "\r\n").allSatisfy { $0.count <= 76 })
    }

    @Test func rfc5322DatesAreRight() {
        #expect(MailMessage.date(0) == "Thu, 01 Jan 1970 00:00:00 +0000")
        #expect(MailMessage.date(951_782_400_000) == "Tue, 29 Feb 2000 00:00:00 +0000")
        #expect(MailMessage.date(-86_400_000) == "Wed, 31 Dec 1969 00:00:00 +0000")
        #expect(MailMessage.subject("plain ascii") == "plain ascii" && MailMessage.subject("a\r\nBcc: x") == "a  Bcc: x")
    }

    @Test func mailIsRateLimitedPerAddress() {
        var limit = MailRateLimit(burst: 2, intervalMilliseconds: 60_000)
        #expect(limit.admit(["a@x.example"], now: 0) == nil)
        #expect(limit.admit(["A@x.example", "b@x.example"], now: 0) == nil)
        // a has none left: nothing is taken from b, and the message waits a minute.
        #expect(limit.admit(["a@x.example", "b@x.example"], now: 1_000) == 60_000)
        #expect(limit.admit(["b@x.example"], now: 1_000) == nil)
        #expect(limit.admit(["a@x.example"], now: 60_000) == nil)
        #expect(limit.admit(["a@x.example"], now: 60_000) == 120_000)
    }

    // MARK: Requests

    static func request(_ json: String) throws -> (WebhookRequest, WebhookURL) {
        let request = try WebhookRequest.parse(try #require(JSONValue.parse(json.utf8)))
        return (request, try WebhookURL.parse(request.url))
    }

    @Test(arguments: [
        (#"{"url":"https://api.telegram.org/bot1:x/sendMessage","events":["task.stalled"],"format":"telegram"}"#, "chat_id"),
        (#"{"url":"https://api.telegram.org/bot1:x/sendMessage","events":["task.stalled"],"format":"telegram","chat_id":"x y"}"#, "chat_id"),
        (#"{"url":"https://events.pagerduty.com/v2/enqueue","events":["task.stalled"],"format":"pagerduty"}"#, "routing_key"),
        (#"{"url":"https://events.pagerduty.com/v2/enqueue","events":["task.created"],"format":"pagerduty","routing_key":"k"}"#, "events"),
        (#"{"url":"smtp://mail.example.com","events":["task.stalled"],"format":"email","mail_from":"h@example.com"}"#, "mail_to"),
        (#"{"url":"smtp://mail.example.com","events":["task.stalled"],"format":"email","mail_to":["o@example.com"]}"#, "mail_from"),
        (#"{"url":"https://mail.example.com","events":["task.stalled"],"format":"email","mail_from":"h@example.com","mail_to":["o@example.com"]}"#, "url"),
        (#"{"url":"smtp://m.example.com","events":["task.stalled"],"format":"email","mail_from":"h@example.com","mail_to":["o@example.com\r\nBcc: x@y.z"]}"#, "mail_to"),
        (#"{"url":"smtp://mail.example.com","events":["task.stalled"],"format":"slack"}"#, "url"),
        (#"{"url":"https://ntfy.sh/","events":["task.stalled"],"format":"ntfy"}"#, "url"),
        (#"{"url":"https://x.example/h","events":["task.stalled"],"format":"json","chat_id":"1"}"#, "chat_id"),
    ])
    func eachFormatRefusesWhatItCannotSend(_ json: String, _ field: String) throws {
        let (request, url) = try Self.request(json)
        #expect(request.refusals(url: url).map(\.field).contains(field), "\(request.refusals(url: url))")
    }

    @Test func wellFormedRequestsOfEachFormatAreTaken() throws {
        for json in [
            #"{"url":"https://api.telegram.org/bot1:x/sendMessage","events":["task.stalled"],"format":"telegram","chat_id":-100123}"#,
            #"{"url":"https://events.pagerduty.com/v2/enqueue","events":["task.stalled","task.finished","task.recovered"],"format":"pagerduty","routing_key":"R0123456789abcdef0123456789abcde"}"#,
            #"{"url":"smtps://u:p%40ss@mail.example.com:465","events":["task.stalled"],"format":"email","mail_from":"h@example.com","mail_to":["o@example.com","o@example.com"]}"#,
            #"{"url":"https://ntfy.sh/backups","events":["task.stalled"],"format":"ntfy"}"#,
            #"{"url":"https://discord.com/api/webhooks/1/tok","events":["task.stalled"],"format":"discord"}"#,
        ] {
            let (request, url) = try Self.request(json)
            #expect(request.refusals(url: url).isEmpty, "\(json): \(request.refusals(url: url))")
        }
        let (email, url) = try Self.request(#"{"url":"smtps://u:p@mail.example.com","events":["task.stalled"],"format":"email","mail_from":"h@example.com","mail_to":["o@example.com","o@example.com"]}"#)
        #expect(email.destination.mailTo == ["o@example.com"] && url.port == 465 && url.host == "mail.example.com" && url.hasUserInfo)
        #expect(try WebhookURL.parse("smtp://mail.example.com").port == 25)
        #expect(throws: WebhookURL.Refusal.self) { try WebhookURL.parse("https://u:p@x.example/") }
    }

    @Test func listingsHideTheCredentialsURLsCarry() {
        #expect(WebhookURL.redacted("smtps://user:secret@mail.example.com:465", format: .email)
                    == "smtps://user:…@mail.example.com:465")
        #expect(WebhookURL.redacted("https://api.telegram.org/bot123456:AAE-secret/sendMessage", format: .telegram)
                    == "https://api.telegram.org/bot123456:…/sendMessage")
        #expect(WebhookURL.redacted("https://discord.com/api/webhooks/111/tok-en?wait=true", format: .discord)
                    == "https://discord.com/api/webhooks/111/…?wait=true")
        #expect(WebhookURL.redacted("https://ntfy.sh/backups", format: .ntfy) == "https://ntfy.sh/backups")
    }
}

extension ISO8601DateFormatter {
    /// RFC 3339 with milliseconds, as Headway writes times.
    nonisolated(unsafe) static let withFractions: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()
}
