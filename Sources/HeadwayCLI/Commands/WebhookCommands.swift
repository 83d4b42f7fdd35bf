import Foundation
import HeadwayCore

/// `headway webhook create|list|test|delete|deliveries`: webhooks over the API (`/v1/webhooks`),
/// with an admin token (`--token` / `HEADWAY_TOKEN`).
public struct WebhookCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "webhook",
        abstract: "Make, list, test and delete webhooks, and see their deliveries (needs an admin token)",
        subcommands: [WebhookCreateCommand.self, WebhookListCommand.self, WebhookTestCommand.self,
                      WebhookDeleteCommand.self, WebhookDeliveriesCommand.self],
        examples: ["headway webhook list"])
    public static let arguments: [ArgumentDefinition] = []

    public init(_ values: ParsedValues) {}

    public func run(_ context: CommandContext) throws {}
}

/// An event kind as an option value: task.stalled, task.finished, …
extension TaskEventKind: ArgumentValue {
    public init?(argument text: String) { self.init(rawValue: text) }
    public static var kindDescription: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// A webhook's format as an option value: json, slack, discord, ntfy, telegram, pagerduty or email.
extension WebhookFormat: ArgumentValue {
    public init?(argument text: String) { self.init(rawValue: text) }
    public static var kindDescription: String {
        allCases.dropLast().map(\.rawValue).joined(separator: ", ") + " or " + allCases.last!.rawValue
    }
}

/// `headway webhook create URL --event E…`: makes a webhook and prints its signing secret alone.
public struct WebhookCreateCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "create", abstract: "Make a webhook and print its signing secret",
        discussion: """
        The signing secret is printed alone on stdout, shown this once (each delivery carries
        Headway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>);
        --json prints the whole reply, with the webhook's id.
        """,
        examples: ["headway webhook create https://hooks.example.com/headway --event task.stalled --event task.finished"])
    static let url = Argument<String>("url", help: "Where events are posted (http:// or https://; smtp:// or smtps:// for email)")
    static let event = Option<TaskEventKind>("event", valueName: "event",
                                             help: "task.stalled, task.recovered, task.finished, task.cancel_requested, "
                                                 + "… (repeatable)", required: true)
    static let prefix = Option<String>("prefix", valueName: "prefix", help: "Only tasks whose id starts with this")
    static let outcome = Option<String>("outcome", valueName: "outcome",
                                        help: "For task.finished: only succeeded, failed or canceled (repeatable)")
    static let format = Option<WebhookFormat>("format", valueName: "format",
                                              help: "json (default), slack, discord, ntfy, telegram, pagerduty or email")
    static let chatID = Option<String>("chat-id", valueName: "chat", help: "telegram: the chat the bot writes to")
    static let routingKey = Option<String>("routing-key", valueName: "key", help: "pagerduty: the integration key")
    static let mailFrom = Option<String>("mail-from", valueName: "address", help: "email: the sender")
    static let mailTo = Option<String>("mail-to", valueName: "address", help: "email: a recipient (repeatable)")
    public static let arguments = [url.definition, event.definition, prefix.definition, outcome.definition,
                                   format.definition, chatID.definition, routingKey.definition, mailFrom.definition,
                                   mailTo.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let prefix = values[Self.prefix], !TaskIDPrefix.isValid(prefix) {
            throw UsageError("--prefix must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}, not '\(prefix)'")
        }
        for outcome in values.all(Self.outcome) where !["succeeded", "failed", "canceled"].contains(outcome) {
            throw UsageError("--outcome must be succeeded, failed or canceled, not '\(outcome)'")
        }
    }

    public func run(_ context: CommandContext) throws {
        var seen = Set<TaskEventKind>()
        let events = values.all(Self.event).filter { seen.insert($0).inserted }
        var body: JSONObject = [
            "url": .string(values[Self.url]),
            "events": .array(events.map { .string($0.rawValue) }),
            "format": .string((values[Self.format] ?? .json).rawValue),
        ]
        if let prefix = values[Self.prefix] { body["task_prefix"] = .string(prefix) }
        let outcomes = values.all(Self.outcome)
        if !outcomes.isEmpty { body["outcomes"] = .array(outcomes.map { .string($0) }) }
        if let chat = values[Self.chatID] { body["chat_id"] = .string(chat) }
        if let key = values[Self.routingKey] { body["routing_key"] = .string(key) }
        if let from = values[Self.mailFrom] { body["mail_from"] = .string(from) }
        let recipients = values.all(Self.mailTo)
        if !recipients.isEmpty { body["mail_to"] = .array(recipients.map { .string($0) }) }
        try TokenCreateCommand.printCreated(try context.api.post("/v1/webhooks", body), context)
    }
}

/// `headway webhook list`: the webhooks, without secrets.
public struct WebhookListCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the webhooks (without secrets)",
        discussion: "A table of id, URL, events, prefix, outcomes and format; --json prints one webhook per line.",
        examples: ["headway webhook list --json"])
    public static let arguments: [ArgumentDefinition] = []

    public init(_ values: ParsedValues) {}

    public func run(_ context: CommandContext) throws {
        guard let webhooks = try TokenListCommand.listing("/v1/webhooks", key: "webhooks", noun: "webhook", context)
        else { return }
        let header = ["ID", "URL", "EVENTS", "PREFIX", "OUTCOMES", "FORMAT"]
        let rows = webhooks.map { webhook -> [String] in
            let cells = Cells(webhook)
            return [cells.text("id"), cells.text("url"), cells.list("events"), cells.text("task_prefix"),
                    cells.list("outcomes", empty: "any"), cells.text("format")]
        }
        context.print(TokenListCommand.table([header] + rows))
    }
}

/// `headway webhook test ID`: sends a sample event now and says what the receiver answered.
public struct WebhookTestCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "test", abstract: "Send a webhook a test event now and show the outcome",
        discussion: """
        Posts a sample event about a task named "Headway test delivery" in the webhook's
        format, signed, with Headway-Test: true, and prints what came of it: delivered or
        failed, the HTTP status or the error, and how long it took (exit status 1 unless
        delivered). It is listed among the webhook's deliveries. One test per webhook per
        10 s; --json prints the delivery.
        """,
        examples: ["headway webhook test whk_8c1d"])
    static let id = Argument<String>("id", help: "The webhook's id (whk_…)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let reply = try context.api.post("/v1/webhooks/" + WebhookDeliveriesCommand.pathSegment(values[Self.id]) + "/test")
        guard let delivery = reply.json, case .object = delivery else {
            throw CLIError.unexpectedReply("the server's reply holds no delivery")
        }
        let cells = Cells(delivery)
        let delivered = cells.text("state") == "delivered"
        if context.options.json {
            context.print(delivery.canonicalText)
        } else {
            context.print(Self.line(cells))
        }
        if !delivered { throw CommandExit(status: 1) }
    }

    /// "delivered: HTTP 200 in 34 ms (task.finished)", "failed: HTTP 500 in 12 ms (task.finished)",
    /// "failed: Couldn't connect to server, after 3 ms (task.finished)".
    fileprivate static func line(_ cells: Cells) -> String {
        let state = cells.text("state")
        let took = cells.number("latency_ms").map { "\($0) ms" } ?? "?"
        let event = cells.text("event")
        if let status = cells.number("status_code") {
            return "\(state): HTTP \(status) in \(took) (\(event))"
        }
        return "\(state): \(cells.text("error")), after \(took) (\(event))"
    }
}

/// `headway webhook delete ID`: nothing more is posted to it.
public struct WebhookDeleteCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a webhook",
        discussion: "Its deliveries not yet made are dropped.",
        examples: ["headway webhook delete whk_8c1d"])
    static let id = Argument<String>("id", help: "The webhook's id (whk_…)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let id = values[Self.id]
        _ = try context.api.delete("/v1/webhooks/" + WebhookDeliveriesCommand.pathSegment(id))
        context.print("deleted \(id)")
    }
}

/// `headway webhook deliveries ID`: the webhook's latest deliveries, newest first.
public struct WebhookDeliveriesCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "deliveries", abstract: "Show a webhook's latest deliveries",
        discussion: """
        A table of the latest 100, newest first: when last tried, event, state (pending,
        delivered, failed), attempts, last status, latency and error; --json prints one
        delivery per line.
        """,
        examples: ["headway webhook deliveries whk_8c1d"])
    static let id = Argument<String>("id", help: "The webhook's id (whk_…)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let reply = try context.api.get("/v1/webhooks/" + Self.pathSegment(values[Self.id]) + "/deliveries")
        guard case .object(let list)? = reply.json, case .array(let deliveries)? = list["deliveries"] else {
            throw CLIError.unexpectedReply("the server's reply holds no delivery list")
        }
        if context.options.json {
            for delivery in deliveries { context.print(delivery.canonicalText) }
            return
        }
        let header = ["TIME", "EVENT", "STATE", "ATTEMPTS", "STATUS", "LATENCY", "ERROR"]
        let rows = deliveries.map { delivery -> [String] in
            let cells = Cells(delivery)
            let time = cells.text("last_attempt_at", empty: cells.text("created_at"))
            let latency = cells.number("latency_ms").map { "\($0) ms" } ?? "-"
            return [time, cells.text("event"), cells.text("state"), cells.number("attempts").map(String.init) ?? "0",
                    cells.number("status_code").map(String.init) ?? "-", latency, cells.text("error")]
        }
        context.print(TokenListCommand.table([header] + rows))
    }

    /// `text` escaped for one path segment.
    static func pathSegment(_ text: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;?#%")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// The members of a listed object as table cells, texts sanitized for the terminal.
private struct Cells {
    let object: JSONObject

    init(_ value: JSONValue) {
        if case .object(let object) = value { self.object = object } else { object = [:] }
    }

    func text(_ name: String, empty: String = "-") -> String {
        if case .string(let value)? = object[name] { return DisplayWidth.sanitize(value) }
        return empty
    }

    func number(_ name: String) -> Int64? {
        if case .integer(let value)? = object[name] { return value }
        return nil
    }

    func list(_ name: String, empty: String = "-") -> String {
        guard case .array(let values)? = object[name] else { return empty }
        return values.compactMap { if case .string(let item) = $0 { DisplayWidth.sanitize(item) } else { nil } }
            .joined(separator: ",")
    }
}
