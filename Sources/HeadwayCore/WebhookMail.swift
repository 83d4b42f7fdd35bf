import Foundation

/// The email format's message: one RFC 5322 message per event, written whole when the
/// delivery is (its `Date` the event's time, its `Message-ID` the delivery's id), so
/// every attempt sends the same bytes and a mail system that sees the message twice (a
/// retry after a lost reply) can tell. Headers are ASCII (the subject, when it is not,
/// as RFC 2047 encoded words in UTF-8); the body is UTF-8 text, base64-encoded, lines
/// ending in CRLF.
public enum MailMessage {
    /// The message for `event` to the webhook's recipients.
    static func render(_ event: TaskEvent, webhook: WebhookRecord, deliveryID: String, context: AlertContext?,
                       occurredAt: EpochMilliseconds) -> String? {
        guard let from = webhook.destination.mailFrom, !webhook.destination.mailTo.isEmpty else { return nil }
        let facts = AlertFacts(event, at: occurredAt)
        var lines = [facts.headline]
        if let context {
            lines += [""] + WebhookText.contextLines(context)
            if !context.output.isEmpty {
                lines += ["", "Last \(context.output.count) lines of output:"] + context.output.map { "    " + $0 }
            }
        }
        lines += ["", "-- ", "Headway, event \(event.kind.rawValue) of task \(event.taskID) (webhook \(webhook.id))"]
        let domain = from.split(separator: "@").last.map(String.init) ?? "headway.invalid"
        let headers = [
            "Date: \(date(occurredAt))",
            "From: \(from)",
            folded("To:", webhook.destination.mailTo),
            "Subject: \(subject("[Headway] " + WebhookText.truncated(facts.headline, to: 150)))",
            "Message-ID: <\(deliveryID)@\(domain)>",
            "MIME-Version: 1.0",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Transfer-Encoding: base64",
            "Auto-Submitted: auto-generated",
            "X-Headway-Event: \(event.kind.rawValue)",
            "X-Headway-Delivery: \(deliveryID)",
        ]
        let body = Data(lines.joined(separator: "\r\n").utf8).base64EncodedString(options: [.lineLength76Characters,
                                                                                          .endLineWithCarriageReturn,
                                                                                          .endLineWithLineFeed])
        return headers.joined(separator: "\r\n") + "\r\n\r\n" + body + "\r\n"
    }

    /// An RFC 5322 date in UTC: "Sat, 05 Dec 2026 06:45:47 +0000".
    public static func date(_ milliseconds: EpochMilliseconds) -> String {
        let seconds = milliseconds / 1000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let rest = seconds - days * 86_400
        // Howard Hinnant's civil-from-days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let weekday = ((days % 7) + 11) % 7  // 1970-01-01 was a Thursday (4).
        let names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(names[Int(weekday)]), \(two(day)) \(months[Int(month - 1)]) \(year) "
            + "\(two(rest / 3600)):\(two(rest % 3600 / 60)):\(two(rest % 60)) +0000"
    }

    /// A header of comma-separated `items`, folded before an item that would take the
    /// line past 78 characters.
    static func folded(_ name: String, _ items: [String]) -> String {
        var text = name
        var lineLength = name.count
        for (index, item) in items.enumerated() {
            let piece = (index < items.count - 1 ? item + "," : item)
            if index > 0 && lineLength + 1 + piece.count > 78 {
                text += "\r\n " + piece
                lineLength = 1 + piece.count
            } else {
                text += " " + piece
                lineLength += 1 + piece.count
            }
        }
        return text
    }

    /// A `Subject` value: the text as it is when it is printable ASCII, else RFC 2047
    /// encoded words (`=?UTF-8?B?…?=`, each at most 75 characters, split between
    /// characters) on folded lines. Controls become spaces either way.
    public static func subject(_ text: String) -> String {
        let clean = String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
        if clean.utf8.allSatisfy({ $0 < 0x80 }) && clean.utf8.count <= 900 { return clean }
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in clean {
            let bytes = Array(String(character).utf8)
            // 39 bytes make 52 base64 characters: with =?UTF-8?B?, ?= and "Subject: " the
            // line stays within 78 characters (RFC 5322's advice; an encoded word's limit is 75).
            if chunk.count + bytes.count > 39 {
                words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=")
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty { words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=") }
        return words.joined(separator: "\r\n ")
    }
}

/// How many messages the email format sends to one address: a burst of `burst`, then
/// one every `intervalMilliseconds` (a token bucket per address, shared by every email
/// webhook of the daemon). Why: an inbox is read by a person, who can act on a few alerts
/// a minute, not on a flood that buries the one that matters (a task failing in a loop,
/// a thousand shards stalling at once); and mail relays throttle or block a sender that
/// bursts (Gmail and Microsoft 365 limit messages per minute and per day), which would
/// stop every later alert too. A message over the limit waits, pending and in its place
/// (nothing is dropped: the outbox's order and at-least-once stand); the wait counts in
/// `--webhook-retry-for` like a retry's. Kept in memory by the one sending daemon: a
/// restart starts every address with a full bucket.
public struct MailRateLimit: Sendable {
    /// Messages an address may get at once.
    public var burst: Int
    /// How often an address gets one more, in milliseconds.
    public var intervalMilliseconds: Int64
    /// Per address (lower-cased): the tokens left and when they were counted.
    private var buckets: [String: (tokens: Double, at: EpochMilliseconds)] = [:]

    /// 10 at once, then one a minute: 60 an hour at most, per address.
    public init(burst: Int = 10, intervalMilliseconds: Int64 = 60_000) {
        self.burst = burst
        self.intervalMilliseconds = intervalMilliseconds
    }

    /// Takes one message's token from each of `addresses` and returns nil, if each has
    /// one at `now`; otherwise takes none and returns when every one will have.
    public mutating func admit(_ addresses: [String], now: EpochMilliseconds) -> EpochMilliseconds? {
        let keys = Set(addresses.map { $0.lowercased() })
        var readyAt = now
        for key in keys {
            let tokens = self.tokens(key, now: now)
            if tokens < 1 { readyAt = max(readyAt, now + Int64(((1 - tokens) * Double(intervalMilliseconds)).rounded(.up))) }
        }
        guard readyAt == now else { return readyAt }
        for key in keys { buckets[key] = (tokens(key, now: now) - 1, now) }
        if buckets.count > 10_000 { buckets = buckets.filter { self.tokens($0.key, now: now) < Double(burst) } }
        return nil
    }

    private func tokens(_ key: String, now: EpochMilliseconds) -> Double {
        guard let bucket = buckets[key] else { return Double(burst) }
        let refill = Double(max(0, now - bucket.at)) / Double(intervalMilliseconds)
        return min(Double(burst), bucket.tokens + refill)
    }
}

extension WebhookBody {
    /// The body of a delivery of `event` to `webhook`, in its format; nil when the format
    /// sends nothing for the event (pagerduty: an event that neither triggers nor resolves).
    /// `context`: the alert's (`AlertContext.applies`), already limited to what the webhook
    /// may see; `site`: the first `--public-url`, if any.
    public static func render(for webhook: WebhookRecord, deliveryID: String, event: TaskEvent, occurredAt: EpochMilliseconds,
                              context: AlertContext? = nil, site: String? = nil) -> String? {
        switch webhook.format {
        case .json: json(deliveryID: deliveryID, event: event, occurredAt: occurredAt, context: context)
        case .slack: slack(event, context: context, occurredAt: occurredAt)
        case .discord: discord(event, context: context, occurredAt: occurredAt)
        case .ntfy:
            (try? WebhookURL.parse(webhook.url)).flatMap(NtfyBody.topic).map {
                ntfy(event, topic: $0, context: context, occurredAt: occurredAt)
            }
        case .telegram:
            webhook.destination.chatID.map { telegram(event, chatID: $0, context: context, occurredAt: occurredAt) }
        case .pagerduty: PagerDutyBody.render(event, webhook: webhook, context: context, site: site, occurredAt: occurredAt)
        case .email:
            MailMessage.render(event, webhook: webhook, deliveryID: deliveryID, context: context, occurredAt: occurredAt)
        }
    }
}
