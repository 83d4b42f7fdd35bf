import Foundation

/// What an alert carries besides the task, so that whoever reads it can act without
/// opening anything: the task's parents (root first), its last output lines, how long it
/// ran and, with `--public-url`, a link to its page. Built by the outbox in the
/// transaction of the change (`WebhookOutbox.record`), so every attempt of a delivery
/// sends the same body, for a failure (`task.finished`, outcome `failed`), a stall and
/// an overdue task (`applies`).
public struct AlertContext: Sendable, Equatable {
    /// One ancestor of the task.
    public struct Ancestor: Sendable, Equatable {
        public var id: String
        public var name: String

        public init(id: String, name: String) {
            self.id = id
            self.name = name
        }
    }

    /// The task's ancestors, root first (its parent last).
    public var parents: [Ancestor]
    /// The task's last output lines (at most `outputLines`), oldest first.
    public var output: [String]
    /// From the task's creation to its end, or to the event if it has not ended.
    public var ranSeconds: Double
    /// The task's page (`<public URL>/#task=<id>`), when `--public-url` is set.
    public var link: String?

    /// How many output lines an alert carries.
    public static let outputLines = 20

    public init(parents: [Ancestor], output: [String], ranSeconds: Double, link: String?) {
        self.parents = parents
        self.output = output
        self.ranSeconds = ranSeconds
        self.link = link
    }

    /// Whether an event's deliveries carry context: a failure, a stall, an overdue task.
    public static func applies(to event: TaskEvent) -> Bool {
        switch event.kind.rawValue {
        case "task.stalled", "task.overdue": true
        case "task.finished": WebhookAlert.state(of: event) == "failed"
        default: false
        }
    }

    /// The link to the page of the task `taskID` under `base` (a `--public-url`).
    public static func link(base: String, taskID: String) -> String {
        let trimmed = base.hasSuffix("/") ? String(base.dropLast()) : base
        return "\(trimmed)/#task=\(taskID)"
    }

    /// The context as a webhook limited to the task prefix `prefix` sees it: only the
    /// nearest ancestors inside the prefix, as a token with that prefix would see them.
    public func visible(within prefix: String?) -> AlertContext {
        guard let prefix else { return self }
        var copy = self
        let inside = parents.reversed().prefix { $0.id.utf8.starts(with: prefix.utf8) }
        copy.parents = Array(inside.reversed())
        return copy
    }

    /// `{"parents": [{"id", "name"}…], "output": [lines…], "ran_seconds", "url"}`.
    public var json: String {
        var parentsJSON = JSONText()
        parentsJSON.appendRaw("[")
        for (index, parent) in parents.enumerated() {
            if index > 0 { parentsJSON.appendRaw(",") }
            var object = JSONObjectWriter()
            object.string("id", parent.id)
            object.string("name", parent.name)
            parentsJSON.appendRaw(object.finish())
        }
        parentsJSON.appendRaw("]")
        var object = JSONObjectWriter()
        object.raw("parents", parentsJSON.text)
        object.raw("output", JSONText.stringArray(output))
        object.number("ran_seconds", (ranSeconds * 10).rounded() / 10)
        object.string("url", link)
        return object.finish()
    }

    /// The parents as a person reads them: "Nightly › db-cluster".
    public var parentsText: String { parents.map(\.name).joined(separator: " › ") }
}

/// An event as the formats for people and pagers tell it: what happened, in a word.
public enum WebhookAlert: String, Sendable, CaseIterable {
    case failed, succeeded, canceled, stalled, recovered, overdue, tooQuick, cancelRequested, created, updated, deleted

    /// The alert an event is. `task.overdue` and `task.too_quick` are named by their text,
    /// like every kind here, so that this is the one place that maps kinds to alerts.
    public init(_ event: TaskEvent) {
        switch event.kind.rawValue {
        case "task.finished":
            switch Self.state(of: event) {
            case "succeeded": self = .succeeded
            case "canceled": self = .canceled
            default: self = .failed
            }
        case "task.stalled": self = .stalled
        case "task.recovered": self = .recovered
        case "task.overdue": self = .overdue
        case "task.too_quick": self = .tooQuick
        case "task.cancel_requested": self = .cancelRequested
        case "task.created": self = .created
        case "task.deleted": self = .deleted
        default: self = .updated
        }
    }

    /// What happened, in a few words ("failed", "is overdue").
    public var words: String {
        switch self {
        case .failed: "failed"
        case .succeeded: "succeeded"
        case .canceled: "was canceled"
        case .stalled: "stalled"
        case .recovered: "is moving again"
        case .overdue: "is overdue"
        case .tooQuick: "finished too quickly"
        case .cancelRequested: "cancellation requested"
        case .created: "started"
        case .updated: "updated"
        case .deleted: "was deleted"
        }
    }

    /// ntfy's priority (1 min … 5 max): a failure is the loudest, a problem (stalled,
    /// overdue, too quick) next, an outcome or a recovery the default, the rest low. A
    /// failure is never below a success.
    public var ntfyPriority: Int {
        switch self {
        case .failed: 5
        case .stalled, .overdue, .tooQuick: 4
        case .succeeded, .canceled, .recovered, .cancelRequested: 3
        case .created, .updated, .deleted: 2
        }
    }

    /// An emoji short code (ntfy shows a tag that names one as the emoji).
    public var emojiTag: String {
        switch self {
        case .failed: "rotating_light"
        case .succeeded: "white_check_mark"
        case .canceled: "no_entry_sign"
        case .stalled: "warning"
        case .recovered: "arrow_forward"
        case .overdue: "hourglass"
        case .tooQuick: "zap"
        case .cancelRequested: "octagonal_sign"
        case .created: "rocket"
        case .updated: "bar_chart"
        case .deleted: "wastebasket"
        }
    }

    /// Discord's embed colour: red for a failure, amber for a problem, green for good news, grey otherwise.
    var color: Int64 {
        switch self {
        case .failed: 0xD93025
        case .stalled, .overdue, .tooQuick: 0xF29900
        case .succeeded, .recovered: 0x188038
        default: 0x80868B
        }
    }

    /// The `state` in an event's data (nil for a deletion).
    static func state(of event: TaskEvent) -> String? {
        guard case .object(let task)? = JSONValue.parse(event.data.utf8), case .string(let state)? = task["state"] else {
            return nil
        }
        return state
    }
}

/// Text helpers shared by the formats.
enum WebhookText {
    /// A duration as a person reads it: "42 s", "5 min 3 s", "2 h 10 min", "3 d 4 h".
    static func duration(_ seconds: Double) -> String {
        let whole = Int64(max(0, seconds).rounded())
        let (days, hours, minutes, rest) = (whole / 86_400, whole % 86_400 / 3_600, whole % 3_600 / 60, whole % 60)
        if days > 0 { return hours > 0 ? "\(days) d \(hours) h" : "\(days) d" }
        if hours > 0 { return minutes > 0 ? "\(hours) h \(minutes) min" : "\(hours) h" }
        if minutes > 0 { return rest > 0 ? "\(minutes) min \(rest) s" : "\(minutes) min" }
        return "\(rest) s"
    }

    /// `lines` with a fence of three backticks broken (a zero-width space after the first
    /// backtick), so that a line of output cannot close the code block it is shown in.
    static func fenced(_ lines: [String]) -> [String] {
        lines.map { $0.replacingOccurrences(of: "```", with: "`\u{200B}``") }
    }

    /// The newest of `lines` that fit, with their line breaks, in `limit` characters
    /// (never a partial line, unless the newest alone is longer: then its end).
    static func newest(_ lines: [String], within limit: Int) -> [String] {
        var kept: [String] = []
        var used = 0
        for line in lines.reversed() {
            let size = line.count + 1
            if used + size > limit {
                if kept.isEmpty { kept.append(String(line.suffix(max(0, limit - 1)))) }
                break
            }
            kept.append(line)
            used += size
        }
        return kept.reversed()
    }

    /// `text` cut to at most `limit` characters, an ellipsis ending a cut.
    static func truncated(_ text: String, to limit: Int) -> String {
        text.count <= limit ? text : String(text.prefix(limit - 1)) + "…"
    }

    /// The context as plain lines (e-mail, ntfy, Discord's fields): parents, time ran, link.
    static func contextLines(_ context: AlertContext) -> [String] {
        var lines: [String] = []
        if !context.parents.isEmpty { lines.append("Parents: \(context.parentsText)") }
        lines.append("Ran: \(duration(context.ranSeconds))")
        if let link = context.link { lines.append("Page: \(link)") }
        return lines
    }
}

/// The facts of an event's task the formats show, read once from its data.
struct AlertFacts {
    var taskID: String
    var name: String
    var alert: WebhookAlert
    /// The line a person reads first (`WebhookBody.headline`).
    var headline: String

    init(_ event: TaskEvent, at now: EpochMilliseconds) {
        taskID = event.taskID
        alert = WebhookAlert(event)
        if case .object(let task)? = JSONValue.parse(event.data.utf8), case .string(let name)? = task["name"] {
            self.name = name
        } else {
            name = event.taskID
        }
        headline = WebhookBody.headline(event, at: now)
    }

    /// "Nightly backup of db-3 failed".
    var title: String { "\(name) \(alert.words)" }
}

extension WebhookBody {
    /// The line that opens every message for a person: the slack format's line
    /// (`slackText`); for an overdue or too quick task, how long it has run.
    public static func headline(_ event: TaskEvent, at now: EpochMilliseconds) -> String {
        let ran = Double((event.finishedAt ?? now) - event.createdAt) / 1000
        switch event.kind.rawValue {
        case "task.overdue", "task.too_quick":
            let facts = JSONValue.parse(event.data.utf8)
            var name = event.taskID
            if case .object(let task)? = facts, case .string(let text)? = task["name"] { name = text }
            let verb = event.kind.rawValue == "task.overdue" ? "is overdue: running for" : "finished too quickly: in"
            return "\(name) \(verb) \(WebhookText.duration(ran))"
        default:
            return slackText(event)
        }
    }

    /// The slack format: the line, and an alert's context below it (parents, time ran, a
    /// link, the output in a code block), escaped as Slack asks.
    static func slack(_ event: TaskEvent, context: AlertContext?, occurredAt: EpochMilliseconds) -> String {
        var text = slackEscaped(headline(event, at: occurredAt))
        if let context {
            if !context.parents.isEmpty { text += "\nParents: \(slackEscaped(context.parentsText))" }
            text += "\nRan: \(WebhookText.duration(context.ranSeconds))"
            if let link = context.link { text += "\n<\(link)|Open in Headway>" }
            if !context.output.isEmpty {
                text += "\n```\n" + WebhookText.fenced(context.output).map(slackEscaped).joined(separator: "\n") + "\n```"
            }
        }
        var object = JSONObjectWriter()
        object.string("text", text)
        return object.finish()
    }

    /// Discord's execute-webhook body: `content`, the line (at most 2,000 characters,
    /// Markdown escaped); for an alert one embed (title, link, colour, the output as a
    /// code block in `description` within 4,096 characters, parents and time ran as
    /// fields, timestamp); `allowed_mentions` empty, so no name or output line pings anyone.
    static func discord(_ event: TaskEvent, context: AlertContext?, occurredAt: EpochMilliseconds) -> String {
        let facts = AlertFacts(event, at: occurredAt)
        var object = JSONObjectWriter()
        object.string("content", WebhookText.truncated(discordEscaped(facts.headline), to: 2000))
        if let context {
            var embed = JSONObjectWriter()
            embed.string("title", WebhookText.truncated(facts.title, to: 256))
            if let link = context.link { embed.string("url", link) }
            embed.integer("color", facts.alert.color)
            if !context.output.isEmpty {
                let lines = WebhookText.newest(WebhookText.fenced(context.output), within: 4096 - 8)
                embed.string("description", "```\n" + lines.joined(separator: "\n") + "\n```")
            }
            var fields: [String] = []
            if !context.parents.isEmpty {
                fields.append(discordField("Parents", WebhookText.truncated(discordEscaped(context.parentsText), to: 1024), inline: false))
            }
            fields.append(discordField("Ran", WebhookText.duration(context.ranSeconds), inline: true))
            embed.raw("fields", "[" + fields.joined(separator: ",") + "]")
            embed.timestamp("timestamp", occurredAt)
            object.raw("embeds", "[" + embed.finish() + "]")
        }
        object.raw("allowed_mentions", #"{"parse":[]}"#)
        return object.finish()
    }

    private static func discordField(_ name: String, _ value: String, inline: Bool) -> String {
        var field = JSONObjectWriter()
        field.string("name", name)
        field.string("value", value)
        field.bool("inline", inline)
        return field.finish()
    }

    /// `text` with Discord's Markdown characters escaped by a backslash, so a task's name
    /// or message shows as written and cannot make a masked link or a heading.
    static func discordEscaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            if "\\*_~`|>[]()#-".contains(character) { out.append("\\") }
            out.append(character)
        }
        return out
    }

    /// ntfy's JSON publishing body: `topic`, `title`, `message` (the line, the context and
    /// the output, within ntfy's 4,096 bytes), `priority` (`WebhookAlert.ntfyPriority`),
    /// `tags` (an emoji and `headway`), `click` (the task's page, when known).
    static func ntfy(_ event: TaskEvent, topic: String, context: AlertContext?, occurredAt: EpochMilliseconds) -> String {
        let facts = AlertFacts(event, at: occurredAt)
        // Within ntfy's 4,096 bytes, whatever the task's message and parents.
        var lines = [WebhookText.truncated(facts.headline, to: 1000)]
        if let context {
            lines += WebhookText.contextLines(context).map { WebhookText.truncated($0, to: 500) }
            if !context.output.isEmpty {
                let used = lines.joined(separator: "\n").utf8.count + 2
                // Bytes, not characters, bound the message: four a character at most.
                lines += [""] + WebhookText.newest(context.output, within: max(0, (4000 - used) / 4))
            }
        }
        var object = JSONObjectWriter()
        object.string("topic", topic)
        object.string("title", WebhookText.truncated(facts.title, to: 250))
        object.string("message", lines.joined(separator: "\n"))
        object.integer("priority", Int64(facts.alert.ntfyPriority))
        object.raw("tags", JSONText.stringArray([facts.alert.emojiTag, "headway"]))
        if let link = context?.link { object.string("click", link) }
        return object.finish()
    }

    /// The Telegram Bot API's `sendMessage` body: `chat_id` (a number when it is one),
    /// `text` in Telegram's HTML (the line in bold, the context, the output in `<pre>`;
    /// within 4,096 characters), `parse_mode`, link previews off.
    static func telegram(_ event: TaskEvent, chatID: String, context: AlertContext?, occurredAt: EpochMilliseconds) -> String {
        let facts = AlertFacts(event, at: occurredAt)
        // A message may be 4,000 characters and a chain of parents long: the line and the
        // parents are cut so that the whole stays within Telegram's 4,096.
        var text = "<b>\(htmlEscaped(WebhookText.truncated(facts.headline, to: 1000)))</b>"
        if let context {
            if !context.parents.isEmpty {
                text += "\nParents: \(htmlEscaped(WebhookText.truncated(context.parentsText, to: 500)))"
            }
            text += "\nRan: \(WebhookText.duration(context.ranSeconds))"
            if let link = context.link { text += "\n<a href=\"\(htmlEscaped(link))\">Open in Headway</a>" }
            if !context.output.isEmpty {
                let room = max(0, 4000 - text.count)
                text += "\n<pre>" + WebhookText.newest(context.output, within: room).map(htmlEscaped).joined(separator: "\n") + "</pre>"
            }
        }
        var object = JSONObjectWriter()
        if let number = Int64(chatID) { object.integer("chat_id", number) } else { object.string("chat_id", chatID) }
        object.string("text", text)
        object.string("parse_mode", "HTML")
        object.raw("link_preview_options", #"{"is_disabled":true}"#)
        return object.finish()
    }

    /// `text` with the three characters Telegram's HTML mode asks to escape (`&`, `<`,
    /// `>`), and `"` for attribute values.
    static func htmlEscaped(_ text: String) -> String {
        // Slack escapes the same three; a quote is never one of them.
        slackEscaped(text).replacingOccurrences(of: "\"", with: "&quot;")
    }
}

/// PagerDuty's Events API v2 body: a stall, a failure, an overdue or too quick task
/// triggers an alert; a recovery, a success or a cancellation resolves it. An alert is
/// one per webhook and task (`dedup_key` `headway:<webhook>:<task>`), so a task that
/// stalls, recovers and fails opens one alert, resolved when it succeeds; a too quick
/// run has an alert of its own (`…:too_quick`), which its own success must not resolve.
public enum PagerDutyBody {
    /// Whether a pagerduty webhook sends anything for events of `kind`.
    public static func sends(_ kind: TaskEventKind) -> Bool {
        ["task.stalled", "task.recovered", "task.finished", "task.overdue", "task.too_quick"].contains(kind.rawValue)
    }

    /// The body for `event`, or nil when the format sends nothing for it.
    static func render(_ event: TaskEvent, webhook: WebhookRecord, context: AlertContext?, site: String?,
                       occurredAt: EpochMilliseconds) -> String? {
        guard sends(event.kind), let routingKey = webhook.destination.routingKey else { return nil }
        let facts = AlertFacts(event, at: occurredAt)
        let action: String, severity: String
        switch facts.alert {
        case .failed: (action, severity) = ("trigger", "error")
        case .stalled, .overdue, .tooQuick: (action, severity) = ("trigger", "warning")
        case .recovered, .succeeded, .canceled: (action, severity) = ("resolve", "info")
        default: return nil
        }
        var object = JSONObjectWriter()
        object.string("routing_key", routingKey)
        object.string("event_action", action)
        object.string("dedup_key", "headway:\(webhook.id):\(event.taskID)" + (facts.alert == .tooQuick ? ":too_quick" : ""))
        if action == "trigger" {
            var payload = JSONObjectWriter()
            payload.string("summary", WebhookText.truncated(facts.headline, to: 1024))
            payload.string("source", site.flatMap { try? WebhookURL.parse($0).host } ?? "headwayd")
            payload.string("severity", severity)
            payload.timestamp("timestamp", occurredAt)
            payload.string("component", event.taskID)
            payload.string("group", context?.parents.first?.id ?? event.taskID)
            payload.string("class", event.kind.rawValue)
            var details = JSONObjectWriter()
            details.raw("task", event.data)
            details.raw("context", context?.json)
            payload.raw("custom_details", details.finish())
            object.raw("payload", payload.finish())
            if let link = context?.link {
                var item = JSONObjectWriter()
                item.string("href", link)
                item.string("text", "Open in Headway")
                object.raw("links", "[" + item.finish() + "]")
            }
            object.string("client", "Headway")
            if let site { object.string("client_url", site) }
        }
        return object.finish()
    }
}

/// The ntfy format's topic and where it posts.
public enum NtfyBody {
    /// The topic an ntfy URL names: its last path segment, 1 to 64 letters, digits, `_`
    /// or `-` (ntfy's own rule), with no query; nil otherwise.
    public static func topic(of url: WebhookURL) -> String? {
        guard let split = split(url.text) else { return nil }
        return split.topic
    }

    /// Where ntfy takes JSON: the server's root, the URL without its topic (ntfy's
    /// documentation: "PUT/POST to the ntfy root URL, not to the topic URL").
    public static func publishURL(of url: WebhookURL) -> WebhookURL? {
        guard let split = split(url.text) else { return nil }
        var root = url
        root.text = split.root
        return root
    }

    private static func split(_ text: String) -> (root: String, topic: String)? {
        guard !text.contains("?"), let schemeEnd = text.range(of: "://"),
              let slash = text[schemeEnd.upperBound...].lastIndex(of: "/") else { return nil }
        let topic = text[text.index(after: slash)...]
        guard (1...64).contains(topic.utf8.count), topic.utf8.allSatisfy({ byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }) else { return nil }
        return (String(text[...slash]), String(topic))
    }
}
