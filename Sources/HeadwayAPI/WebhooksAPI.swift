import Access
import Dispatch
import HeadwayCore
import HeadwayStore
import HTTPServer
import Lifecycle
import Telemetry

/// `/v1/webhooks` (scope `admin`): make a webhook (its signing secret is shown in that
/// reply only), list them without secrets, delete one (its pending deliveries with it),
/// and read a webhook's latest deliveries. A new webhook's URL must be an `http` or
/// `https` URL and, unless `--webhook-allow-private`, its host must resolve to public
/// addresses only (else 422 `webhook_url_refused`, as when its lookup takes longer than
/// `--webhook-timeout` or eight others are still running: `HostLookups.checks`; no thread
/// waits for the lookup). Each change goes through the writer, which reads the table back
/// in the same transaction for the writer's in-memory list (`WebhookOutbox`), so the very
/// next change is delivered to it.
///
/// A token with a task prefix manages only the webhooks inside it: a webhook it makes
/// must have a task prefix that starts with its own (403 `prefix_not_allowed`), and any
/// other webhook is 404 to it.
/// Looks the host of a new webhook's URL up and calls `then` once with the reason the URL
/// is refused, or nil when deliveries may be posted to it. The daemon passes the webhook
/// transport's check, which the routes do not import.
package typealias WebhookURLCheck = @Sendable (_ url: WebhookURL, _ then: @escaping @Sendable (_ refusal: String?) -> Void) -> Void

/// Sends a test of a webhook now and calls `then` once with its outcome, stored among the
/// webhook's deliveries; no thread waits. The daemon passes the dispatcher's
/// (`WebhookDispatcher.sendTest`), which the routes do not import.
package typealias WebhookTestSender = @Sendable (_ webhook: WebhookRecord,
                                                 _ then: @escaping @Sendable (WebhookDelivery) -> Void) -> Void

package struct WebhooksAPI: Sendable {
    let writer: GroupCommitWriter
    let reads: ReadPool
    let outbox: WebhookOutbox
    /// Checks a new webhook's URL (its host's lookup, `--webhook-allow-private`,
    /// `--webhook-timeout`).
    let checkURL: WebhookURLCheck
    let clock: any WallClock
    let logger: Logger
    let errors: ErrorReplies
    /// Called once a webhook was made or deleted (the dispatcher looks again).
    let changed: @Sendable () -> Void
    /// Sends a test (`POST /v1/webhooks/{id}/test`).
    let sendTest: WebhookTestSender
    /// How often tests may be sent: shared by the request threads that start tests and
    /// the threads that give their outcomes.
    let testLimit: Locked<WebhookTestLimit>

    /// Deliveries listed by `GET /v1/webhooks/{id}/deliveries`, newest first.
    static let listedDeliveries = 100

    package func register(in routes: inout ServiceRoutes) {
        routes.add("POST", "/v1/webhooks", .scope(.admin)) { request, grant, responder in create(request, grant, responder) }
        routes.add("GET", "/v1/webhooks", .scope(.admin)) { _, grant, responder in list(grant, responder) }
        routes.add("DELETE", "/v1/webhooks/{id}", .scope(.admin)) { request, grant, responder in
            delete(request, grant, responder)
        }
        routes.add("GET", "/v1/webhooks/{id}/deliveries", .scope(.admin)) { request, grant, responder in
            deliveries(request, grant, responder)
        }
        routes.add("POST", "/v1/webhooks/{id}/test", .scope(.admin)) { request, grant, responder in
            test(request, grant, responder)
        }
    }

    /// Sends a sample event to the webhook now and answers with the attempt's outcome (the
    /// delivery, as `GET …/deliveries` then lists it) once it is known and stored: within
    /// `--webhook-timeout`, no thread waiting meanwhile. At most one test of a webhook at
    /// a time and one per 10 s, and 8 under way in all (`WebhookTestLimit`: else 429
    /// `webhook_test_too_soon` with `Retry-After`). The body, if any, is `{}`.
    private func test(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id = request.pathParameters["id"] ?? ""
        let webhook: WebhookRecord
        do {
            if let body = try Self.jsonBody(request) {
                let reader = FieldReader(body, allowed: [])
                if !reader.errors.isEmpty { throw TaskError.invalidRequest(reader.errors) }
            }
            guard let found = outbox.current.first(where: { $0.id == id }), grant.manages(tokenPrefix: found.filter.taskPrefix)
            else { throw Problem.webhookNotFound(id) }
            webhook = found
            let now = clock.now()
            do throws(WebhookTestLimit.Refusal) {
                try testLimit.withLock { limit throws(WebhookTestLimit.Refusal) in try limit.start(id, now: now) }
            } catch {
                throw Problem.webhookTestTooSoon(error)
            }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        logger.log(.info, "audit.webhook_test", [
            "request_id": request.requestID, "token_id": grant.tokenID ?? "none",
            "token_name": grant.tokenName ?? "none", "webhook_id": id,
        ])
        sendTest(webhook) { [testLimit] delivery in
            testLimit.withLock { $0.finish(id) }
            responder.respond(.json(200, Self.json(delivery), headers: [HTTPField("Cache-Control", "no-store")]))
        }
    }

    private func create(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let asked: WebhookRequest
        let url: WebhookURL
        do {
            guard let body = try Self.jsonBody(request) else {
                throw TaskError.malformedJSON("This request needs a JSON object as its body.")
            }
            asked = try WebhookRequest.parse(body)
            do throws(WebhookURL.Refusal) { url = try WebhookURL.parse(asked.url) } catch {
                throw Problem.webhookURLRefused(error.message)
            }
            let refusals = asked.refusals(url: url)
            if !refusals.isEmpty { throw Problem.webhookFormatInvalid(asked.format, refusals) }
            if !grant.manages(tokenPrefix: asked.filter.taskPrefix), let prefix = grant.taskPrefix {
                throw AccessRefusal.prefixNotAllowed(prefix: prefix, field: "task_prefix")
            }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        // The host's lookup may take a while: the reply follows its answer, and no thread
        // waits for it.
        checkURL(url) { [self] refusal in
            let made: WebhookRecord
            do {
                if let refusal { throw Problem.webhookURLRefused(refusal) }
                made = WebhookRecord(id: try WebhookCrypto.newWebhookID(), url: url.text, filter: asked.filter,
                                     format: asked.format, secret: try WebhookCrypto.newSecret(), createdAt: clock.now(),
                                     destination: asked.destination)
            } catch {
                return responder.respond(errors.response(for: error, request))
            }
            writer.submit({ database in
                guard try WebhookRepository.count(in: database) < WebhookRepository.maximumWebhooks else {
                    throw Problem.tooManyWebhooks
                }
                try WebhookRepository.insert(made, in: database)
                return try WebhookRepository.all(in: database)
            }) { [outbox, logger, errors, changed] result in
                switch result {
                case .success(let webhooks):
                    outbox.load(webhooks)
                    changed()
                    logger.log(.info, "audit.webhook_create", [
                        "request_id": request.requestID, "token_id": grant.tokenID ?? "none",
                        "token_name": grant.tokenName ?? "none", "webhook_id": made.id,
                        "events": made.filter.events.map(\.rawValue).sorted().joined(separator: ","),
                        "task_prefix": made.filter.taskPrefix ?? "", "format": made.format.rawValue,
                    ])
                    responder.respond(.json(201, Self.json(made, revealingSecrets: true),
                                            headers: [HTTPField("Location", "/v1/webhooks/\(made.id)"),
                                                      HTTPField("Cache-Control", "no-store")]))
                case .failure(let error):
                    responder.respond(errors.response(for: error, request))
                }
            }
        }
    }

    /// The request's body as JSON, nil when it is empty: 415 unless it is declared JSON,
    /// 400 unless it parses.
    private static func jsonBody(_ request: HTTPRequest) throws -> JSONValue? {
        guard !request.body.isEmpty else { return nil }
        let mediaType = TaskAPI.mediaType(request.header("content-type") ?? "")
        guard mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json")) else {
            throw Problem.unsupportedMediaType(mediaType)
        }
        switch JSONParser.parse(request.body) {
        case .success(let value): return value
        case .failure(let failure): throw TaskError.malformedJSON("The request body is not valid JSON: \(failure).")
        }
    }

    private func list(_ grant: Grant, _ responder: any Responder) {
        var body = JSONText()
        body.appendRaw(#"{"webhooks":["#)
        for (index, webhook) in outbox.current.filter({ grant.manages(tokenPrefix: $0.filter.taskPrefix) }).enumerated() {
            if index > 0 { body.appendRaw(",") }
            body.appendRaw(Self.json(webhook, revealingSecrets: false))
        }
        body.appendRaw("]}")
        responder.respond(.json(200, body.text))
    }

    /// One step of a webhook's deletion.
    struct DeletionStep: Sendable, BatchSized {
        /// Whether the webhook existed (false: nothing was deleted).
        var existed: Bool
        /// Whether the webhook is gone (else another step follows).
        var finished: Bool
        var estimatedBytes: Int { 0 }
    }

    /// Deliveries deleted per writer job when a webhook is deleted: a long backlog does not
    /// hold the writer for long.
    static let deletionStepRows = 10_000

    private func delete(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id = request.pathParameters["id"] ?? ""
        guard let webhook = outbox.current.first(where: { $0.id == id }), grant.manages(tokenPrefix: webhook.filter.taskPrefix)
        else { return responder.respond(errors.response(for: Problem.webhookNotFound(id), request)) }
        // From the first step on, no change writes deliveries for it; its backlog goes in
        // steps of their own; the row last, so that until the reply the webhook exists.
        let first: @Sendable (Database) throws -> DeletionStep = { [outbox] database in
            outbox.forget(id)
            return try Self.deletionStep(id, in: database)
        }
        let next: @Sendable (DeletionStep) -> (@Sendable (Database) throws -> DeletionStep)? = { step in
            guard !step.finished else { return nil }
            return { database in try Self.deletionStep(id, in: database) }
        }
        writer.submitSteps(first, nextStep: next) { [writer, outbox, logger, errors, changed] result in
            switch result {
            case .success(let step) where step.existed:
                changed()
                logger.log(.info, "audit.webhook_delete", [
                    "request_id": request.requestID, "token_id": grant.tokenID ?? "none",
                    "token_name": grant.tokenName ?? "none", "webhook_id": id,
                ])
                responder.respond(HTTPResponse(status: 204))
            case .success:
                responder.respond(errors.response(for: Problem.webhookNotFound(id), request))
            case .failure(let error):
                // Not deleted (wholly): the list is read again, with the webhook if it is still there.
                writer.submit({ database in try WebhookRepository.all(in: database) }) { reloaded in
                    if case .success(let webhooks) = reloaded { outbox.load(webhooks) }
                }
                responder.respond(errors.response(for: error, request))
            }
        }
    }

    /// Deletes up to `deletionStepRows` deliveries of the webhook `id`, and the webhook
    /// itself once fewer were left.
    private static func deletionStep(_ id: String, in database: Database) throws -> DeletionStep {
        let deleted = try WebhookRepository.deleteDeliveries(of: id, limit: deletionStepRows, in: database)
        if deleted == deletionStepRows { return DeletionStep(existed: true, finished: false) }
        return DeletionStep(existed: try WebhookRepository.delete(id, in: database), finished: true)
    }

    private func deliveries(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id = request.pathParameters["id"] ?? ""
        guard let webhook = outbox.current.first(where: { $0.id == id }), grant.manages(tokenPrefix: webhook.filter.taskPrefix)
        else { return responder.respond(errors.response(for: Problem.webhookNotFound(id), request)) }
        reads.answer(request, responder, errors: errors) { reader in
            let deliveries = try reader.read { database in
                try WebhookRepository.recent(of: id, limit: Self.listedDeliveries, in: database)
            }
            var body = JSONText()
            body.appendRaw(#"{"deliveries":["#)
            for (index, delivery) in deliveries.enumerated() {
                if index > 0 { body.appendRaw(",") }
                body.appendRaw(Self.json(delivery))
            }
            body.appendRaw("]}")
            return .json(200, body.text)
        }
    }

    /// A webhook as the API shows it. Its secrets — `secret`, `routing_key` and the
    /// credentials its URL may carry (`WebhookRecord.listedURL`) — only when
    /// `revealingSecrets`, in the reply that made it.
    static func json(_ webhook: WebhookRecord, revealingSecrets: Bool) -> String {
        var object = JSONObjectWriter()
        object.string("id", webhook.id)
        object.string("url", revealingSecrets ? webhook.url : webhook.listedURL)
        object.raw("events", JSONText.stringArray(webhook.filter.events.map(\.rawValue).sorted()))
        object.string("task_prefix", webhook.filter.taskPrefix)
        object.raw("outcomes", webhook.filter.outcomes.map { JSONText.stringArray($0.map(\.rawValue).sorted()) })
        object.string("format", webhook.format.rawValue)
        object.string("created_at", Timestamp.rfc3339(webhook.createdAt))
        let destination = webhook.destination
        if webhook.format == .telegram { object.string("chat_id", destination.chatID) }
        if webhook.format == .email {
            object.string("mail_from", destination.mailFrom)
            object.raw("mail_to", JSONText.stringArray(destination.mailTo))
        }
        if revealingSecrets {
            object.string("secret", webhook.secret)
            if webhook.format == .pagerduty { object.string("routing_key", destination.routingKey) }
        }
        return object.finish()
    }

    /// A delivery as the API shows it (its body left out).
    static func json(_ delivery: WebhookDelivery) -> String {
        var object = JSONObjectWriter()
        object.string("id", delivery.id)
        object.string("event", delivery.eventType.rawValue)
        object.integer("event_id", max(0, delivery.eventID))
        object.bool("test", delivery.isTest)
        object.string("state", delivery.state.rawValue)
        object.integer("attempts", Int64(delivery.attempts))
        object.string("created_at", Timestamp.rfc3339(delivery.createdAt))
        object.string("last_attempt_at", delivery.lastAttemptAt.map(Timestamp.rfc3339))
        object.string("next_attempt_at", delivery.state == .pending ? Timestamp.rfc3339(delivery.nextAttemptAt) : nil)
        object.integer("status_code", delivery.lastStatus.map { Int64($0) })
        object.integer("latency_ms", delivery.lastLatencyMilliseconds)
        object.string("error", delivery.lastError)
        return object.finish()
    }

    package init(writer: GroupCommitWriter, reads: ReadPool, outbox: WebhookOutbox, checkURL: @escaping WebhookURLCheck,
                 clock: any WallClock, logger: Logger, errors: ErrorReplies, changed: @escaping @Sendable () -> Void,
                 sendTest: @escaping WebhookTestSender, testLimit: WebhookTestLimit = WebhookTestLimit()) {
        self.sendTest = sendTest
        self.testLimit = Locked(testLimit)
        self.writer = writer
        self.reads = reads
        self.outbox = outbox
        self.checkURL = checkURL
        self.clock = clock
        self.logger = logger
        self.errors = errors
        self.changed = changed
    }
}

extension Problem {
    /// No webhook has this id (or none the token may manage).
    static func webhookNotFound(_ id: String) -> Problem {
        Problem(status: 404, code: "webhook_not_found", title: "Webhook not found",
                detail: "No webhook has the id '\(id)'.")
    }

    /// The URL's target may not be posted to.
    static func webhookURLRefused(_ detail: String) -> Problem {
        Problem(status: 422, code: "webhook_url_refused", title: "Webhook URL refused", detail: "url: \(detail).",
                errors: [FieldError(field: "url", message: detail)])
    }

    /// A request its format refuses: a scheme it does not speak, a field it needs and
    /// lacks, another format's field, an event it never sends.
    static func webhookFormatInvalid(_ format: WebhookFormat, _ errors: [FieldError]) -> Problem {
        Problem(status: 422, code: "webhook_format_invalid", title: "Webhook fields do not suit its format",
                detail: "A \(format.rawValue) webhook: " + errors.map { "\($0.field): \($0.message)" }.joined(separator: "; ") + ".",
                errors: errors)
    }

    /// A test may not be sent now (`WebhookTestLimit`).
    static func webhookTestTooSoon(_ refusal: WebhookTestLimit.Refusal) -> Problem {
        let (detail, seconds): (String, Int) = switch refusal {
        case .tooSoon(let seconds):
            ("A test of this webhook is under way or was sent less than 10 s ago; send the next in \(seconds) s.", seconds)
        case .busy(let seconds):
            ("8 tests of webhooks are under way; send this one when one has ended, in \(seconds) s.", seconds)
        }
        return Problem(status: 429, code: "webhook_test_too_soon", title: "Webhook test too soon", detail: detail,
                       headers: [HTTPField("Retry-After", "\(seconds)")])
    }

    /// As many webhooks as may be stored exist already.
    static let tooManyWebhooks = Problem(
        status: 422, code: "too_many_webhooks", title: "Too many webhooks",
        detail: "At most \(WebhookRepository.maximumWebhooks) webhooks may exist; delete one first.")
}
