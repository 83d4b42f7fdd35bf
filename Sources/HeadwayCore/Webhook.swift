import Foundation

/// How a webhook's deliveries are written, and to which kind of receiver
/// (`WebhookBody.render`; the table of docs/webhooks.md says which events each sends).
public enum WebhookFormat: String, Sendable, CaseIterable {
    /// `{"id", "type", "event_id", "occurred_at", "task", "context"?}`: the event and the
    /// task as the API shows it, signed (`Headway-Signature`).
    case json
    /// `{"text": …}`: a line for a person (and, for an alert, its context), which Slack
    /// (and tools that copy its incoming webhooks) posts as it is.
    case slack
    /// Discord's execute-webhook body: `content` and one embed, mentions disabled.
    case discord
    /// ntfy's JSON publishing (`topic`, `title`, `message`, `priority`, `tags`, `click`),
    /// posted to the server's root URL; the webhook's URL is the topic's.
    case ntfy
    /// The Telegram Bot API's `sendMessage` (`chat_id`, HTML `text`); the URL is the bot's
    /// `…/bot<token>/sendMessage`.
    case telegram
    /// PagerDuty's Events API v2: `trigger` and `resolve`, one alert per webhook and task.
    case pagerduty
    /// An RFC 5322 message through SMTP (`smtp://` or `smtps://`), to `mail_to`.
    case email

    /// Whether the format's deliveries go out over SMTP rather than HTTP.
    public var isMail: Bool { self == .email }
}

/// What a webhook is told about: which kinds of event, of which tasks.
public struct WebhookFilter: Sendable, Equatable {
    /// The kinds of event delivered (`task.created` … `task.deleted`).
    public var events: Set<TaskEventKind>
    /// Only tasks whose id starts with this.
    public var taskPrefix: String?
    /// For `task.finished`: only these outcomes (nil: every one).
    public var outcomes: Set<TaskState>?

    public init(events: Set<TaskEventKind>, taskPrefix: String? = nil, outcomes: Set<TaskState>? = nil) {
        self.events = events
        self.taskPrefix = taskPrefix
        self.outcomes = outcomes
    }

    /// Whether an event of `kind` about the task `taskID` may concern the webhook, before
    /// the task's state is known (cheap: no JSON is read).
    public func mayMatch(kind: TaskEventKind, taskID: String) -> Bool {
        guard events.contains(kind) else { return false }
        if let taskPrefix, !taskID.utf8.starts(with: taskPrefix.utf8) { return false }
        return true
    }

    /// Whether an event of `kind` about a task now in `state` is delivered.
    public func matches(kind: TaskEventKind, taskID: String, state: TaskState?) -> Bool {
        guard mayMatch(kind: kind, taskID: taskID) else { return false }
        if kind == .finished, let outcomes, let state { return outcomes.contains(state) }
        return true
    }
}

/// A webhook as stored: where events are posted, which ones, and the secret that signs them.
public struct WebhookRecord: Sendable, Equatable {
    /// `whk_` followed by 16 hex digits.
    public var id: String
    public var url: String
    public var filter: WebhookFilter
    public var format: WebhookFormat
    /// The signing secret (`whsec_` and 43 base64url characters). Kept in clear: every
    /// delivery is signed with it. Shown only in the reply that made the webhook.
    public var secret: String
    public var createdAt: EpochMilliseconds
    /// Where the format's receiver is told to put the message, besides its URL: the
    /// fields of `WebhookDestination` the format takes, the others nil or empty.
    public var destination: WebhookDestination

    public init(id: String, url: String, filter: WebhookFilter, format: WebhookFormat, secret: String,
                createdAt: EpochMilliseconds, destination: WebhookDestination = WebhookDestination()) {
        self.id = id
        self.url = url
        self.filter = filter
        self.format = format
        self.secret = secret
        self.createdAt = createdAt
        self.destination = destination
    }

    /// The URL as listings show it: without what lets anyone post as the webhook's owner
    /// (`WebhookURL.redacted`).
    public var listedURL: String { WebhookURL.redacted(url, format: format) }
}

/// The per-format fields of a webhook: Telegram's chat, PagerDuty's routing key, the
/// e-mail sender and recipients.
public struct WebhookDestination: Sendable, Equatable {
    /// `telegram`: the chat the bot writes to (a number, or `@channelname`).
    public var chatID: String?
    /// `pagerduty`: the Events API v2 integration key. A secret: whoever holds it can open
    /// and resolve alerts on the service, so it is shown only in the reply that made the
    /// webhook, like `secret`.
    public var routingKey: String?
    /// `email`: the sender (`MAIL FROM` and `From:`).
    public var mailFrom: String?
    /// `email`: the recipients (`RCPT TO` and `To:`), each sent one message per event.
    public var mailTo: [String]

    public init(chatID: String? = nil, routingKey: String? = nil, mailFrom: String? = nil, mailTo: [String] = []) {
        self.chatID = chatID
        self.routingKey = routingKey
        self.mailFrom = mailFrom
        self.mailTo = mailTo
    }

    /// The most recipients an e-mail webhook may have.
    public static let maximumRecipients = 10
    /// The longest e-mail address accepted (RFC 5321's path limit, less its brackets).
    public static let maximumAddressBytes = 254

    /// Whether `text` is an e-mail address this daemon writes into a header and an SMTP
    /// command as it is: `local@domain`, a dot-atom local part and a host name, nothing a
    /// header or a command line could be broken by (no spaces, quotes, brackets, commas,
    /// controls or non-ASCII).
    public static func isMailAddress(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count <= maximumAddressBytes, let at = bytes.lastIndex(of: UInt8(ascii: "@")) else { return false }
        let local = bytes[..<at], domain = bytes[(at + 1)...]
        let localAllowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.!#$%&'*+/=?^_`{|}~-".utf8)
        guard (1...64).contains(local.count), local.allSatisfy(localAllowed.contains), local.first != UInt8(ascii: "."),
              local.last != UInt8(ascii: "."), !zip(local, local.dropFirst()).contains(where: { $0 == $1 && $0 == UInt8(ascii: ".") })
        else { return false }
        let labels = domain.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let labelAllowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-".utf8)
        return !domain.isEmpty && labels.allSatisfy { label in
            (1...63).contains(label.count) && label.allSatisfy(labelAllowed.contains)
                && label.first != UInt8(ascii: "-") && label.last != UInt8(ascii: "-")
        }
    }

    /// Whether `text` names a Telegram chat: a chat's number (negative for groups and
    /// channels) or a public channel's `@username` (5 to 32 letters, digits, underscores).
    public static func isTelegramChat(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        let digit = { (byte: UInt8) in (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        if bytes.first == UInt8(ascii: "@") {
            return (6...33).contains(bytes.count) && bytes.dropFirst().allSatisfy { byte in
                digit(byte) || byte == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
            }
        }
        let digits = bytes.first == UInt8(ascii: "-") ? bytes.dropFirst() : bytes[...]
        return (1...20).contains(digits.count) && digits.allSatisfy(digit)
    }

    /// Whether `text` may be a PagerDuty routing key: PagerDuty's are 32 letters and
    /// digits; 1 to 64 letters, digits, `_` and `-` are taken, for receivers that copy the API.
    public static func isRoutingKey(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }
}

/// Where a delivery stands.
public enum WebhookDeliveryState: String, Sendable, CaseIterable {
    /// Not delivered yet: sent at `next_attempt_at` (again, after a failed attempt that may be retried).
    case pending
    /// A receiver answered 2xx.
    case delivered
    /// Given up: a refusal that retrying cannot change (a 4xx other than 408 or 429, a
    /// redirect, a refused address), or retried for `--webhook-retry-for`.
    case failed
}

/// One delivery of one event to one webhook, as stored in the outbox.
public struct WebhookDelivery: Sendable, Equatable {
    public var webhookID: String
    /// The change number of the event (its id in the event stream).
    public var eventID: Int64
    public var eventType: TaskEventKind
    /// The bytes posted, the same at every attempt.
    public var body: String
    public var state: WebhookDeliveryState
    public var attempts: Int
    public var createdAt: EpochMilliseconds
    public var nextAttemptAt: EpochMilliseconds
    public var lastAttemptAt: EpochMilliseconds?
    public var lastStatus: Int?
    public var lastError: String?
    public var lastLatencyMilliseconds: Int64?
    /// For a `task.updated` delivery that newer updates of its task may still replace (it
    /// waits unsent and is the task's newest delivery for the webhook): the task. Nil
    /// otherwise.
    public var openTaskID: String?
    /// How many times a newer `task.updated` of the task replaced the body while it waited
    /// unsent (it is then the newest one's): deliveries of a task's updates coalesce.
    public var revision: Int

    public init(webhookID: String, eventID: Int64, eventType: TaskEventKind, body: String, state: WebhookDeliveryState,
                attempts: Int, createdAt: EpochMilliseconds, nextAttemptAt: EpochMilliseconds,
                lastAttemptAt: EpochMilliseconds? = nil, lastStatus: Int? = nil, lastError: String? = nil,
                lastLatencyMilliseconds: Int64? = nil, openTaskID: String? = nil, revision: Int = 0) {
        self.webhookID = webhookID
        self.eventID = eventID
        self.eventType = eventType
        self.body = body
        self.state = state
        self.attempts = attempts
        self.createdAt = createdAt
        self.nextAttemptAt = nextAttemptAt
        self.lastAttemptAt = lastAttemptAt
        self.lastStatus = lastStatus
        self.lastError = lastError
        self.lastLatencyMilliseconds = lastLatencyMilliseconds
        self.openTaskID = openTaskID
        self.revision = revision
    }

    /// The delivery's id (`Headway-Delivery`): the webhook's id and the event's, and the
    /// revision once a newer update replaced the body: unique, and the same at every attempt
    /// of the same body, so a receiver can drop a repeated delivery.
    public var id: String { Self.id(webhookID: webhookID, eventID: eventID, revision: revision) }

    /// The id of the delivery of event `eventID` to webhook `webhookID`, at `revision`; a
    /// test's (`eventID` below zero, `WebhookTest`) says so: `<webhook>-test-<milliseconds>`.
    public static func id(webhookID: String, eventID: Int64, revision: Int = 0) -> String {
        if eventID < 0 { return "\(webhookID)-test-\(-eventID)" }
        return revision == 0 ? "\(webhookID)-\(eventID)" : "\(webhookID)-\(eventID)-\(revision)"
    }
}

/// Reads a `POST /v1/webhooks` body: `{url, events, task_prefix?, outcomes?, format?,
/// chat_id?, routing_key?, mail_from?, mail_to?}`.
public struct WebhookRequest: Sendable, Equatable {
    /// The URL as given (a string of at most `maximumURLBytes`; `WebhookURL.parse` judges it).
    public var url: String
    public var filter: WebhookFilter
    public var format: WebhookFormat
    /// The format's own fields as given (whether the format takes them is judged by `refusals`).
    public var destination: WebhookDestination

    /// The longest URL accepted, in bytes.
    public static let maximumURLBytes = 2048
    /// The outcomes a `task.finished` webhook may be limited to.
    public static let outcomeStates: [TaskState] = [.succeeded, .failed, .canceled]
    /// The most items `events` and `outcomes` may hold (repeats allowed, as in openapi.yaml).
    static let maximumEvents = 14, maximumOutcomes = 6

    public init(url: String, filter: WebhookFilter, format: WebhookFormat, destination: WebhookDestination = WebhookDestination()) {
        self.url = url
        self.filter = filter
        self.format = format
        self.destination = destination
    }

    /// The request in `body`, or every field error at once (400). Whether the URL is one a
    /// webhook may post to is judged after (`WebhookURL.parse`, then `AddressPolicy`).
    public static func parse(_ body: JSONValue) throws(TaskError) -> WebhookRequest {
        var reader = FieldReader(body, allowed: ["url", "events", "task_prefix", "outcomes", "format", "chat_id", "routing_key",
                                                 "mail_from", "mail_to"])
        let format = reader.choice("format", of: WebhookFormat.allCases) ?? .json
        var errors: [FieldError] = []
        var url: String?
        var events: Set<TaskEventKind> = []
        var prefix: String?
        var outcomes: Set<TaskState>?
        var destination = WebhookDestination()
        if case .object(let members) = body {
            switch members["url"] {
            case .string(let text)?: url = text
            case nil, .null?: errors.append(FieldError(field: "url", message: "is required"))
            default: errors.append(FieldError(field: "url", message: "must be a string"))
            }
            let kinds = TaskEventKind.allCases.map(\.rawValue).joined(separator: ", ")
            switch members["events"] {
            case .array(let items)? where (1...maximumEvents).contains(items.count):
                for item in items {
                    guard case .string(let text) = item, let kind = TaskEventKind(rawValue: text) else {
                        errors.append(FieldError(field: "events", message: "must hold only \(kinds)"))
                        break
                    }
                    events.insert(kind)
                }
            default:
                errors.append(FieldError(field: "events", message: "is required: 1 to \(maximumEvents) of \(kinds)"))
            }
            switch members["task_prefix"] {
            case nil, .null?: break
            case .string(let text)? where TaskIDPrefix.isValid(text): prefix = text
            default:
                errors.append(FieldError(field: "task_prefix", message: "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}"))
            }
            let names = outcomeStates.map(\.rawValue).joined(separator: ", ")
            switch members["outcomes"] {
            case nil, .null?: break
            case .array(let items)? where (1...maximumOutcomes).contains(items.count):
                var chosen: Set<TaskState> = []
                for item in items {
                    guard case .string(let text) = item, let state = TaskState(rawValue: text), state.isFinished else {
                        errors.append(FieldError(field: "outcomes", message: "must hold only \(names)"))
                        break
                    }
                    chosen.insert(state)
                }
                outcomes = chosen
                if !events.isEmpty && !events.contains(.finished) {
                    errors.append(FieldError(field: "outcomes", message: "applies to task.finished only: add it to events"))
                }
            default: errors.append(FieldError(field: "outcomes", message: "must be 1 to \(maximumOutcomes) of \(names)"))
            }
            switch members["chat_id"] {
            case nil, .null?: break
            case .string(let text)? where (1...64).contains(text.utf8.count): destination.chatID = text
            case .integer(let number)?: destination.chatID = String(number)
            default: errors.append(FieldError(field: "chat_id", message: "must be a chat's number or @channelname"))
            }
            for (field, path) in [("routing_key", \WebhookDestination.routingKey), ("mail_from", \.mailFrom)] {
                switch members[field] {
                case nil, .null?: break
                case .string(let text)? where (1...WebhookDestination.maximumAddressBytes).contains(text.utf8.count):
                    destination[keyPath: path] = text
                default: errors.append(FieldError(field: field, message: "must be a string of 1 to 254 bytes"))
                }
            }
            switch members["mail_to"] {
            case nil, .null?: break
            case .array(let items)? where (1...WebhookDestination.maximumRecipients).contains(items.count):
                for item in items {
                    guard case .string(let text) = item else {
                        errors.append(FieldError(field: "mail_to", message: "must hold only e-mail addresses (strings)"))
                        break
                    }
                    if !destination.mailTo.contains(text) { destination.mailTo.append(text) }
                }
            default:
                errors.append(FieldError(field: "mail_to", message: "must be a list of 1 to \(WebhookDestination.maximumRecipients) e-mail addresses"))
            }
        }
        let all = reader.errors + errors
        guard all.isEmpty, let url else { throw .invalidRequest(all) }
        return WebhookRequest(url: url, filter: WebhookFilter(events: events, taskPrefix: prefix, outcomes: outcomes),
                              format: format, destination: destination)
    }

    /// What the format refuses in a well-formed request whose URL parsed as `url`: a
    /// scheme it does not speak, a field it needs and lacks, a field of another format, an
    /// event it never sends (each a field error; the API answers 422
    /// `webhook_format_invalid` and stores nothing).
    public func refusals(url: WebhookURL) -> [FieldError] {
        var errors: [FieldError] = []
        let name = format.rawValue
        if format.isMail != url.isMail {
            errors.append(FieldError(field: "url", message: format.isMail
                ? "an email webhook sends through an smtp:// or smtps:// URL"
                : "a \(name) webhook posts to an http:// or https:// URL"))
        }
        if url.hasUserInfo && !url.isMail {
            errors.append(FieldError(field: "url", message: "must not carry a user name or password"))
        }
        let uses: [(field: String, given: Bool, format: WebhookFormat)] = [
            ("chat_id", destination.chatID != nil, .telegram), ("routing_key", destination.routingKey != nil, .pagerduty),
            ("mail_from", destination.mailFrom != nil, .email), ("mail_to", !destination.mailTo.isEmpty, .email),
        ]
        for use in uses where use.given && use.format != format {
            errors.append(FieldError(field: use.field, message: "applies to the \(use.format.rawValue) format only"))
        }
        switch format {
        case .telegram:
            if let chat = destination.chatID {
                if !WebhookDestination.isTelegramChat(chat) {
                    errors.append(FieldError(field: "chat_id", message: "must be a chat's number (e.g. -1001234567890) or @channelname"))
                }
            } else {
                errors.append(FieldError(field: "chat_id", message: "is required for a telegram webhook: the chat the bot writes to"))
            }
        case .pagerduty:
            if let key = destination.routingKey {
                if !WebhookDestination.isRoutingKey(key) {
                    errors.append(FieldError(field: "routing_key", message: "must be the integration key: 1 to 64 letters, digits, _ or -"))
                }
            } else {
                errors.append(FieldError(field: "routing_key", message: "is required for a pagerduty webhook: its integration key"))
            }
            let never = filter.events.filter { !PagerDutyBody.sends($0) }.map(\.rawValue).sorted()
            if !never.isEmpty {
                errors.append(FieldError(field: "events", message: "a pagerduty webhook never sends \(never.joined(separator: ", ")): "
                                            + "it triggers and resolves alerts on task.stalled, task.recovered, task.finished"
                                            + " and task.overdue"))
            }
        case .email:
            if let from = destination.mailFrom {
                if !WebhookDestination.isMailAddress(from) {
                    errors.append(FieldError(field: "mail_from", message: "must be an address such as headway@example.com"))
                }
            } else {
                errors.append(FieldError(field: "mail_from", message: "is required for an email webhook: the sender"))
            }
            if destination.mailTo.isEmpty {
                errors.append(FieldError(field: "mail_to", message: "is required for an email webhook: 1 to "
                                            + "\(WebhookDestination.maximumRecipients) recipients"))
            }
            for address in destination.mailTo where !WebhookDestination.isMailAddress(address) {
                errors.append(FieldError(field: "mail_to", message: "'\(address)' is not an address such as ops@example.com"))
            }
        case .ntfy:
            if NtfyBody.topic(of: url) == nil {
                errors.append(FieldError(field: "url", message: "must be an ntfy topic's URL, such as https://ntfy.sh/backups "
                                            + "(the topic: 1 to 64 letters, digits, _ or -)"))
            }
        case .json, .slack, .discord: break
        }
        return errors
    }
}

/// An `http` or `https` URL a webhook posts to, or the `smtp` or `smtps` URL an e-mail
/// webhook sends through, split into what the daemon checks.
public struct WebhookURL: Sendable, Equatable {
    /// Why a text is not a URL a webhook may post to.
    public struct Refusal: Error, Equatable, Sendable {
        public var message: String
    }

    /// The URL as given.
    public var text: String
    /// `http`, `https`, `smtp` or `smtps`.
    public var scheme: String
    /// The host: a name, an IPv4 literal, or an IPv6 literal without its brackets.
    public var host: String
    /// The port: given, or the scheme's (80, 443, 25, 465).
    public var port: Int
    /// Whether a user name (and password) precede the host: SMTP's login, refused for HTTP.
    public var hasUserInfo = false

    /// Whether this is an SMTP URL.
    public var isMail: Bool { scheme == "smtp" || scheme == "smtps" }

    /// The port each scheme defaults to.
    static let defaultPorts = ["http": 80, "https": 443, "smtp": 25, "smtps": 465]

    /// Parses `text`: `http://`, `https://`, `smtp://` or `smtps://` (any case), a host, an
    /// optional port, then a path, query or nothing; no fragment, no spaces or controls; a
    /// user name and password (percent-encoded) only before an SMTP host, whose server
    /// may ask for a login. Whether the scheme suits the webhook's format is judged after
    /// (`WebhookRequest.refusals`).
    public static func parse(_ text: String) throws(Refusal) -> WebhookURL {
        let bytes = text.utf8
        guard bytes.count <= WebhookRequest.maximumURLBytes else {
            throw Refusal(message: "must be at most \(WebhookRequest.maximumURLBytes) bytes (got \(bytes.count))")
        }
        guard bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Refusal(message: "must be printable ASCII without spaces (percent-encode the rest)")
        }
        guard let schemeEnd = text.range(of: "://") else {
            throw Refusal(message: "must be an absolute http:// or https:// URL (smtp:// or smtps:// for email)")
        }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        guard let defaultPort = defaultPorts[scheme] else {
            throw Refusal(message: "must use http or https (smtp or smtps for email), not '\(scheme)'")
        }
        let rest = text[schemeEnd.upperBound...]
        guard !rest.contains("#") else { throw Refusal(message: "must not have a fragment (#…)") }
        var authority = rest.prefix { $0 != "/" && $0 != "?" }
        var hasUserInfo = false
        if let at = authority.lastIndex(of: "@") {
            guard scheme == "smtp" || scheme == "smtps" else { throw Refusal(message: "must not carry a user name or password") }
            guard at != authority.startIndex else { throw Refusal(message: "has an empty user name before its host") }
            authority = authority[authority.index(after: at)...]
            hasUserInfo = true
        }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw Refusal(message: "has an unclosed [ in its host") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw Refusal(message: "has text after its IPv6 host") }
                portText = after.dropFirst()
            }
            guard IPAddress.parseV6(String(host)) != nil else { throw Refusal(message: "has an invalid IPv6 address") }
        } else {
            if let colon = authority.firstIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
            let allowed = host.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default: false
                }
            }
            // Empty labels ("a..b", ".a") name no host; one trailing dot (the root) is allowed.
            let labels = host.split(separator: ".", omittingEmptySubsequences: false)
            guard !host.isEmpty, host.utf8.count <= 253, allowed, labels.dropLast().allSatisfy({ !$0.isEmpty }) else {
                throw Refusal(message: "must name a host")
            }
            if endsInNumber(host) && IPAddress.parseV4(String(host)) == nil {
                throw Refusal(message: "has a host that reads as an IPv4 address but is not written as one: write "
                                + "four decimal numbers from 0 to 255 without leading zeros (a.b.c.d); other "
                                + "spellings (leading zeros, octal or hex parts, fewer or more than four parts, "
                                + "one 32-bit number, a trailing dot) are read as different addresses by different "
                                + "parsers (libcurl reads 012.9.9.9 as 10.9.9.9)")
            }
        }
        var port = defaultPort
        if let portText {
            // Digits only: `Int` would take a sign ("+80"), which libcurl does not.
            guard portText.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                  let number = Int(portText), (1...65535).contains(number) else {
                throw Refusal(message: "must have a port from 1 to 65535")
            }
            port = number
        }
        return WebhookURL(text: text, scheme: scheme, host: String(host).lowercased(), port: port, hasUserInfo: hasUserInfo)
    }

    /// `text` as listings show it, without the credentials a format's URL carries: an SMTP
    /// URL's password, a Telegram bot's token (`/bot<id>:<secret>/`), a Discord webhook's
    /// token (`/api/webhooks/<id>/<token>`); each replaced by `…`.
    public static func redacted(_ text: String, format: WebhookFormat) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        var path = String(rest[authorityEnd...])
        if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
            authority = String(authority[...colon]) + "…" + String(authority[at...])
        }
        switch format {
        case .telegram:
            if let bot = path.range(of: "/bot"), let colon = path[bot.upperBound...].firstIndex(of: ":") {
                let end = path[colon...].firstIndex(of: "/") ?? path.endIndex
                path = String(path[...colon]) + "…" + String(path[end...])
            }
        case .discord:
            if let hooks = path.range(of: "/webhooks/"), let slash = path[hooks.upperBound...].firstIndex(of: "/") {
                let end = path[path.index(after: slash)...].firstIndex { $0 == "/" || $0 == "?" } ?? path.endIndex
                path = String(path[...slash]) + "…" + String(path[end...])
            }
        default: break
        }
        return text[..<schemeEnd.upperBound] + authority + path
    }

    /// Whether a URL parser may read `host` as an IPv4 address: the WHATWG URL Standard's
    /// "ends in a number" (its last label, one trailing dot aside, is all digits or `0x`
    /// and hex digits). Such a host must be the one canonical dotted quad
    /// (`IPAddress.parseV4`): libcurl and glibc's `inet_aton` read `012.9.9.9` as
    /// 10.9.9.9, `127.1` and `0x7f000001` as 127.0.0.1, where a stricter reader sees a
    /// name or another address, and no one can say which reading a check and a
    /// connection would each make. `1.2.3.4.nip.io` ends in a name: a name it stays.
    public static func endsInNumber<Text: StringProtocol>(_ host: Text) -> Bool {
        var labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.count > 1 && labels.last!.isEmpty { labels.removeLast() }
        guard let last = labels.last, !last.isEmpty else { return false }
        let bytes = Array(last.utf8)
        let isDigit = { (byte: UInt8) in (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        if bytes.allSatisfy(isDigit) { return true }
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "0"), bytes[1] | 0x20 == UInt8(ascii: "x") else { return false }
        return bytes.dropFirst(2).allSatisfy { isDigit($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0 | 0x20) }
    }
}

/// An IP address as its bytes (4 or 16), with the one question the daemon asks of it.
public struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6).
    public var bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A canonical dotted IPv4 literal (`parseV4`) or an IPv6 literal, or nil.
    public static func parse(_ text: String) -> IPAddress? {
        if let v4 = parseV4(text) { return v4 }
        return parseV6(text)
    }

    /// Four decimal numbers 0–255 separated by dots, without leading zeros ("0" itself
    /// aside): the one spelling every parser reads alike. Others (`012.1.1.1`, `127.1`,
    /// `0x7f.0.0.1`, `2130706433`) are nil: libcurl and `inet_aton` read them as other
    /// addresses (octal, hex, the last part filling the rest) than a decimal reading.
    public static func parseV4(_ text: String) -> IPAddress? {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.count), part.first != UInt8(ascii: "0") || part.count == 1 else { return nil }
            var value = 0
            for byte in part {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            guard value <= 255 else { return nil }
            bytes.append(UInt8(value))
        }
        return IPAddress(bytes: bytes)
    }

    /// An IPv6 literal: eight groups of hex, `::` for a run of zeros, an IPv4 tail allowed
    /// (canonical, as `parseV4`: `::ffff:012.1.1.1` is nil).
    public static func parseV6(_ text: String) -> IPAddress? {
        guard text.contains(":"), text.utf8.count <= 45 else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var sawGap = false
        let halves = text.components(separatedBy: "::")
        guard halves.count <= 2 else { return nil }
        func groups(_ part: String, allowV4Tail: Bool) -> [UInt16]? {
            if part.isEmpty { return [] }
            var result: [UInt16] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if index == pieces.count - 1, allowV4Tail, piece.contains("."), let v4 = parseV4(String(piece)) {
                    result.append(UInt16(v4.bytes[0]) << 8 | UInt16(v4.bytes[1]))
                    result.append(UInt16(v4.bytes[2]) << 8 | UInt16(v4.bytes[3]))
                    continue
                }
                guard (1...4).contains(piece.count), let value = UInt16(piece, radix: 16) else { return nil }
                result.append(value)
            }
            return result
        }
        if halves.count == 2 {
            sawGap = true
            guard let first = groups(halves[0], allowV4Tail: false), let second = groups(halves[1], allowV4Tail: true)
            else { return nil }
            (head, tail) = (first, second)
            guard head.count + tail.count <= 7 else { return nil }
        } else {
            guard let all = groups(text, allowV4Tail: true), all.count == 8 else { return nil }
            head = all
        }
        let words = head + [UInt16](repeating: 0, count: sawGap ? 8 - head.count - tail.count : 0) + tail
        return IPAddress(bytes: words.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] })
    }

    public var description: String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        var words: [String] = []
        for index in stride(from: 0, to: 16, by: 2) {
            words.append(String(UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1]), radix: 16))
        }
        return words.joined(separator: ":")
    }

    /// Whether this is an address on the public Internet. False for loopback, private
    /// (RFC 1918; IPv6 unique local fc00::/7), link-local, shared (CGNAT 100.64.0.0/10),
    /// unspecified, multicast, broadcast, "this network" (0.0.0.0/8), reserved (240/4),
    /// documentation and benchmarking ranges, and those in IPv4-mapped (::ffff:0:0/96),
    /// IPv4-compatible, IPv4-translated (::ffff:0:0/96), NAT64 (64:ff9b::/96) or 6to4
    /// (2002::/16) form, and IPv6's other ranges that are not globally reachable (IANA's
    /// special-purpose registry: 2001::/23 with Teredo, 100::/64, 3fff::/20, 5f00::/16).
    public var isPublic: Bool {
        if bytes.count == 4 { return Self.isPublicV4(bytes) }
        let b = bytes
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF { return Self.isPublicV4(Array(b[12..<16])) }
        if b[0..<12].allSatisfy({ $0 == 0 }) { return false }  // ::, ::1, IPv4-compatible
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B { return Self.isPublicV4(Array(b[12..<16])) }
        if b[0] == 0x20 && b[1] == 0x02 { return Self.isPublicV4(Array(b[2..<6])) }
        // SIIT's IPv4-translated form ::ffff:0:a.b.c.d (RFC 2765) leads to its IPv4 address too.
        if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xFF && b[9] == 0xFF && b[10] == 0 && b[11] == 0 {
            return Self.isPublicV4(Array(b[12..<16]))
        }
        // IETF protocol assignments 2001::/23: Teredo (2001::/32) reaches whatever IPv4
        // address its last 32 bits hide (2001:0:…:80ff:fffe is 127.0.0.1), ORCHID and the rest
        // are not globally reachable.
        if b[0] == 0x20 && b[1] == 0x01 && b[2] & 0xFE == 0 { return false }
        if b[0] == 0x01 && b[1] == 0x00 && b[2..<8].allSatisfy({ $0 == 0 }) { return false } // discard-only 100::/64
        if b[0] == 0x3F && b[1] == 0xFF && b[2] & 0xF0 == 0 { return false }                 // documentation 3fff::/20
        if b[0] == 0x5F && b[1] == 0x00 { return false }                                     // SRv6 SIDs 5f00::/16
        if b[0] & 0xFE == 0xFC { return false }                // unique local fc00::/7
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return false } // link-local fe80::/10
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return false } // site-local fec0::/10 (deprecated)
        if b[0] == 0xFF { return false }                        // multicast
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return false } // documentation
        return true
    }

    private static func isPublicV4(_ b: [UInt8]) -> Bool {
        switch (b[0], b[1], b[2]) {
        case (0, _, _), (10, _, _), (127, _, _): return false
        case (100, 64...127, _): return false               // shared address space (CGNAT)
        case (169, 254, _): return false                    // link-local
        case (172, 16...31, _): return false
        case (192, 168, _): return false
        case (192, 0, 0), (192, 0, 2), (198, 51, 100), (203, 0, 113): return false
        case (198, 18...19, _): return false                // benchmarking
        case (224...255, _, _): return false                // multicast, reserved, broadcast
        default: return true
        }
    }
}

/// When a failed delivery is tried again: exponential backoff (the base, doubled after
/// each failed attempt, at most `cap`) with full jitter (a uniformly random delay from 0
/// to that bound), given up once the delivery is older than `giveUpAfter`.
public struct WebhookRetryPolicy: Sendable, Equatable {
    /// The bound of the first retry's delay, in milliseconds.
    public var baseMilliseconds: Int64
    /// The largest bound, in milliseconds.
    public var capMilliseconds: Int64
    /// How long after its event a delivery is still retried, in milliseconds.
    public var giveUpAfterMilliseconds: Int64
    /// Whether the delay is random below its bound (full jitter) or the bound itself.
    public var jitter: Bool

    public init(baseMilliseconds: Int64 = 1000, capMilliseconds: Int64 = 600_000,
                giveUpAfterMilliseconds: Int64 = 86_400_000, jitter: Bool = true) {
        self.baseMilliseconds = baseMilliseconds
        self.capMilliseconds = capMilliseconds
        self.giveUpAfterMilliseconds = giveUpAfterMilliseconds
        self.jitter = jitter
    }

    /// The bound of the delay after the `attempts`-th failed attempt (1 for the first).
    public func bound(afterAttempts attempts: Int) -> Int64 {
        let doublings = min(max(attempts - 1, 0), 40)
        let bound = baseMilliseconds.multipliedReportingOverflow(by: Int64(1) << doublings)
        return bound.overflow ? capMilliseconds : min(bound.partialValue, capMilliseconds)
    }

    /// When to try again after the `attempts`-th failed attempt at `now`, of a delivery
    /// made at `createdAt`; nil when it is to be given up. `random` gives a number in 0…1.
    public func nextAttempt(afterAttempts attempts: Int, now: EpochMilliseconds, createdAt: EpochMilliseconds,
                            random: () -> Double) -> EpochMilliseconds? {
        let bound = self.bound(afterAttempts: attempts)
        let delay = jitter ? Int64((Double(bound) * min(max(random(), 0), 1)).rounded()) : bound
        let next = now + delay
        return next - createdAt > giveUpAfterMilliseconds ? nil : next
    }
}

/// What an attempt's outcome means for its delivery.
public enum WebhookAttemptVerdict: Sendable, Equatable {
    case delivered
    /// Worth trying again later: a 5xx, 408, 429, a timeout, a connection refused or lost.
    case retry
    /// Never worth trying again: another 4xx, a redirect (never followed), another status,
    /// an address the daemon refuses to post to.
    case fail

    /// The verdict on an HTTP status.
    public static func of(status: Int) -> WebhookAttemptVerdict {
        switch status {
        case 200...299: .delivered
        case 408, 429, 500...599: .retry
        default: .fail
        }
    }
}

/// The body of a delivery, in the webhook's format.
public enum WebhookBody {
    /// The `json` format: `{"id", "type", "event_id", "occurred_at", "task", "context"?}`
    /// (`task` the event's data: the task as the API shows it, or `{"id"}` for a deletion;
    /// `context` an alert's, `AlertContext.json`).
    static func json(deliveryID: String, event: TaskEvent, occurredAt: EpochMilliseconds, context: AlertContext?) -> String {
        var object = JSONObjectWriter(capacity: event.data.utf8.count + 160)
        object.string("id", deliveryID)
        object.string("type", event.kind.rawValue)
        object.integer("event_id", event.changeNumber)
        object.string("occurred_at", Timestamp.rfc3339(occurredAt))
        object.raw("task", event.data)
        if let context { object.raw("context", context.json) }
        return object.finish()
    }

    /// One line about the event, as a person would say it: "Nightly backup of db-3
    /// stalled: no signal for 42 s — 64%, 768 of 1,200 files".
    public static func slackText(_ event: TaskEvent) -> String {
        guard case .object(let task)? = JSONValue.parse(event.data.utf8) else { return "\(event.taskID): \(event.kind.rawValue)" }
        func text(_ key: String) -> String? { if case .string(let value)? = task[key] { return value } else { return nil } }
        func integer(_ key: String) -> Int64? { if case .integer(let value)? = task[key] { return value } else { return nil } }
        func number(_ key: String) -> Double? {
            switch task[key] {
            case .integer(let value)?: Double(value)
            case .number(let value)?: value
            default: nil
            }
        }
        let name = text("name") ?? event.taskID
        var progress = ""
        if let completed = integer("completed") {
            let unit = text("unit").map { " \($0)" } ?? ""
            if let total = integer("total") {
                let percent = number("fraction").map { "\(Int(($0 * 100).rounded(.down)))%, " } ?? ""
                progress = "\(percent)\(grouped(completed)) of \(grouped(total))\(unit)"
            } else if completed > 0 {
                progress = "\(grouped(completed))\(unit)"
            } else if let fraction = number("fraction") {
                progress = "\(Int((fraction * 100).rounded(.down)))%"
            }
        }
        let tail = progress.isEmpty ? "" : " — \(progress)"
        switch event.kind {
        case .stalled:
            let reason: String
            if text("stall_reason") == StallReason.noProgress.rawValue {
                reason = "no progress for \(seconds(number("progress_timeout_seconds")))"
            } else {
                reason = "no signal for \(seconds(number("stall_timeout_seconds")))"
            }
            return "\(name) stalled: \(reason)\(tail)"
        case .recovered: return "\(name) is moving again\(tail)"
        case .overdue: return "\(name) is overdue\(tail)"
        case .tooQuick: return "\(name) finished sooner than its min_seconds\(tail)"
        case .finished:
            let message = text("message").map { ": \($0)" } ?? ""
            switch text("state") {
            case "succeeded": return "\(name) succeeded\(message)\(tail)"
            case "canceled": return "\(name) was canceled\(message)\(tail)"
            default: return "\(name) failed\(message)\(tail)"
            }
        case .cancelRequested: return "\(name): cancellation requested\(tail)"
        case .created: return "\(name) started\(tail)"
        case .updated: return "\(name)\(tail.isEmpty ? " updated" : ":" + tail.dropFirst(2))"
        case .deleted: return "\(name) was deleted"
        }
    }

    /// `text` with Slack's three control characters escaped (`&` `<` `>` as `&amp;` `&lt;`
    /// `&gt;`), so that a task's name or message is shown as written: a reporter cannot
    /// make a mention (`<!channel>`) or a link with a text of its choosing (`<url|text>`).
    public static func slackEscaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            default: out.append(character)
            }
        }
        return out
    }

    /// A count with commas between thousands (no locale: 1,200).
    static func grouped(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return value < 0 ? "-" + out : out
    }

    /// Seconds as a person reads them: "42 s", "1.5 s".
    static func seconds(_ value: Double?) -> String {
        guard let value else { return "a while" }
        return value == value.rounded() ? "\(Int64(value)) s" : "\(value) s"
    }
}
