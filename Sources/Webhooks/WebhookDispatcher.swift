import Access
import Foundation
import HeadwayCore
import HeadwayStore
import Lifecycle
import Synchronization
import Telemetry

/// Sends the outbox's deliveries: a service whose thread (`headway-webhooks`) looks, on a
/// reader connection of its own, for the oldest pending delivery of each webhook and,
/// when it is due, starts its attempt (`WebhookTransport`: the host's lookup on a thread of
/// `lookups`, then the POST, with every other attempt's, on the one thread of
/// `transfers`; both are services of the daemon's group, started before this one and
/// stopped after it). One attempt per webhook is in flight
/// (so a webhook's deliveries arrive in the order of their events), and every webhook
/// has its own, whatever the others' receivers do: none waits for another's attempt. An
/// attempt's outcome is written back as a small writer job (delivered; pending again at a
/// later time, `WebhookRetryPolicy`; or failed), after which the thread looks again. The
/// writer and the event stream never wait for a receiver.
///
/// The thread wakes when a committed batch wrote deliveries (`wake`), when an attempt's
/// outcome is stored, when the next retry falls due, and once a second regardless (on a
/// shared PostgreSQL database other daemons write deliveries too, and make or delete
/// webhooks: the list is then read again, at most once a second). On such a database
/// only the leader (`Leadership`) sends. A crash loses nothing: a delivery stays pending
/// until its outcome is stored, and is sent again after a restart (at least once).
///
/// Every format keeps these rules: an e-mail is one delivery like a POST (an SMTP reply
/// of 250 delivers it, a 4xx or a lost connection retries it, a 5xx fails it), and waits
/// its turn when one of its recipients had as many messages as `MailRateLimit` allows;
/// a PagerDuty trigger and its resolve go out in their events' order, so a resolve never
/// overtakes the trigger it closes. Only `json` deliveries need their signature (the
/// headers go with every HTTP format; an e-mail carries none).
package final class WebhookDispatcher: Service {
    package struct Settings: Sendable, Equatable {
        /// How long one attempt may take.
        package var timeoutSeconds = 10.0
        /// When failed attempts are retried, and for how long.
        package var retry = WebhookRetryPolicy()
        /// Whether private and loopback targets may be posted to.
        package var allowPrivate = false
        /// The longest the thread sleeps without being woken.
        var idleLookSeconds = 1.0

        package init() {}
    }

    private let settings: Settings
    private let location: String
    private let writer: GroupCommitWriter
    private let outbox: WebhookOutbox
    private let clock: any WallClock
    private let logger: Logger
    private let leadership: Leadership?
    private let counters: WebhookAttemptCounters
    private let doorbell: Doorbell
    private let stopping = Atomic(false)
    /// The webhooks with an attempt in flight: shared by this service's thread and the
    /// threads that give outcomes (the transfers', a Dispatch worker after a lookup).
    private let inFlight = Locked<Set<String>>([])
    /// How many e-mails each address may get now (this service's thread only; `Locked`
    /// for `Sendable`).
    private let mailLimit = Locked(MailRateLimit())

    /// The webhooks with a test under way (`sendTest`), by how many: shared by the
    /// request threads that start tests, the threads that give outcomes and this service's
    /// thread, which ends those of deleted webhooks.
    private let testsUnderWay = Locked<[String: Int]>([:])
    /// Opened by `prepare` (the group's thread), then used by this service's thread.
    private let reader = Locked<DatabaseReader?>(nil)
    /// Every attempt's POST, on one thread (`headway-webhook`, a service of the group).
    package let transfers = WebhookTransfers()
    /// Where hosts are looked up, deliveries' and new webhooks' checks (`headway-lookups`,
    /// a service of the group).
    package let lookups: HostLookups

    package init(settings: Settings, location: String, writer: GroupCommitWriter, outbox: WebhookOutbox, clock: any WallClock,
                 logger: Logger, leadership: Leadership?, counters: WebhookAttemptCounters, doorbell: Doorbell = Doorbell(),
                 lookups: HostLookups = HostLookups()) {
        self.doorbell = doorbell
        self.lookups = lookups
        self.settings = settings
        self.location = location
        self.writer = writer
        self.outbox = outbox
        self.clock = clock
        self.logger = logger
        self.leadership = leadership
        self.counters = counters
    }

    package func prepare() throws {
        let opened = try DatabaseReader(path: location)
        reader.withLock { $0 = opened }
    }

    /// Looks for due deliveries until a stop is requested. The transfers stop after it (the
    /// group's order): the attempts in flight are dropped, their connections closed, and
    /// their deliveries, still pending, are sent again after a restart.
    package func run() {
        var nextReload = DispatchTime.now()
        while !stopping.load(ordering: .acquiring) {
            var sleepUntil = DispatchTime.now() + settings.idleLookSeconds
            if leadership != nil && DispatchTime.now() >= nextReload {
                nextReload = .now() + settings.idleLookSeconds
                reloadWebhooks()
            }
            if leadership?.isLeader() ?? true {
                do {
                    if let nextDue = try startDueAttempts() {
                        let wait = max(0, Double(nextDue - clock.now()) / 1000)
                        sleepUntil = min(sleepUntil, .now() + wait)
                    }
                } catch {
                    logger.log((error as? DatabaseError)?.isUnavailable == true ? .warn : .error,
                               "webhook.read_failed", ["error": "\(error)"])
                }
            }
            _ = doorbell.wait(until: sleepUntil)
        }
        reader.withLock { reader in
            reader?.close()
            reader = nil
        }
    }

    package func requestStop() {
        stopping.store(true, ordering: .releasing)
        doorbell.ring()
    }

    /// On a database other daemons share: reads the webhooks again, since another daemon
    /// may have made or deleted one (each daemon's writer then writes their deliveries).
    private func reloadWebhooks() {
        guard let reader = reader.withLock({ $0 }) else { return }
        do {
            outbox.load(try reader.read { database in try WebhookRepository.all(in: database) })
        } catch {
            logger.log(.warn, "webhook.read_failed", ["error": "\(error)"])
        }
    }

    /// Makes the thread look now (deliveries were committed, an outcome was stored).
    func wake() { doorbell.ring() }

    /// Starts an attempt for each webhook whose oldest pending delivery is due and that has
    /// none in flight; returns when the earliest delivery not due yet falls due, if any.
    private func startDueAttempts() throws -> EpochMilliseconds? {
        guard let reader = reader.withLock({ $0 }) else { return nil }
        var nextDue: EpochMilliseconds?
        let webhooks = outbox.current
        // Attempts of webhooks deleted since end now (asked again at each look until their
        // outcome comes, since one still looking its host up reaches the transfers later).
        let ids = Set(webhooks.map(\.id))
        let deleted = inFlight.withLock { $0.subtracting(ids) }.union(testsUnderWay.withLock { Set($0.keys) }.subtracting(ids))
        if !deleted.isEmpty { transfers.cancel(deleted) }
        for webhook in webhooks {
            if inFlight.withLock({ $0.contains(webhook.id) }) { continue }
            guard let delivery = try reader.read({ database in
                try WebhookRepository.oldestPending(of: webhook.id, in: database)
            }) else { continue }
            let now = clock.now()
            if delivery.nextAttemptAt > now {
                nextDue = min(nextDue ?? delivery.nextAttemptAt, delivery.nextAttemptAt)
                continue
            }
            if webhook.format.isMail, let readyAt = mailLimit.withLock({ $0.admit(webhook.destination.mailTo, now: now) }) {
                nextDue = min(nextDue ?? readyAt, readyAt)
                continue
            }
            inFlight.withLock { _ = $0.insert(webhook.id) }
            attempt(delivery, webhook)
        }
        return nextDue
    }

    /// How long a webhook waits after an attempt whose outcome could not be stored.
    static let pauseAfterLostOutcome = 5.0

    /// Starts posting one delivery; its outcome is stored through the writer (`record`).
    private func attempt(_ delivery: WebhookDelivery, _ webhook: WebhookRecord) {
        let startedAt = clock.now()
        let started = DispatchTime.now()
        let url: WebhookURL
        do throws(WebhookURL.Refusal) {
            url = try WebhookURL.parse(webhook.url)
        } catch {
            // A URL stored before a rule refused it (a host that reads as another address): never posted.
            let outcome = WebhookTransport.Outcome(verdict: .fail, status: nil,
                                                   error: "the URL cannot be posted to: \(error.message)")
            return record(outcome, of: delivery, to: webhook, startedAt: startedAt, started: started)
        }
        send(delivery.body, deliveryID: delivery.id, eventKind: delivery.eventType, to: webhook, at: url,
             signedAt: startedAt, lookups: lookups.deliveries) { [self] outcome in
            record(outcome, of: delivery, to: webhook, startedAt: startedAt, started: started)
        }
    }

    /// Sends one body to `webhook` at `url` in its format's way: an e-mail through SMTP to
    /// its envelope, every other format POSTed signed (ntfy's JSON at its server's root, the
    /// topic in the body: `NtfyBody`). `extraHeaders` go with a POST only.
    private func send(_ body: String, deliveryID: String, eventKind: TaskEventKind, to webhook: WebhookRecord,
                      at url: WebhookURL, signedAt: EpochMilliseconds, lookups: HostLookup,
                      extraHeaders: [String] = [], then: @escaping @Sendable (WebhookTransport.Outcome) -> Void) {
        let transport = WebhookTransport(timeoutSeconds: settings.timeoutSeconds, allowPrivate: settings.allowPrivate,
                                         lookups: lookups)
        if webhook.format.isMail {
            let envelope = WebhookTransfers.MailEnvelope(from: webhook.destination.mailFrom ?? "", to: webhook.destination.mailTo)
            return transport.post(url, body: body, headers: [], mail: envelope, owner: webhook.id,
                                  through: transfers, then: then)
        }
        let signature = WebhookCrypto.signature(secret: webhook.secret, unixSeconds: signedAt / 1000, body: body)
        let target = webhook.format == .ntfy ? NtfyBody.publishURL(of: url) ?? url : url
        transport.post(target, body: body, headers: [
            "Headway-Event: \(eventKind.rawValue)", "Headway-Delivery: \(deliveryID)", "Headway-Signature: \(signature)",
        ] + extraHeaders, owner: webhook.id, through: transfers, then: then)
    }

    /// Sends a test of `webhook` now (`WebhookTest`): a sample event in its format, signed,
    /// posted as its deliveries are (the host looked up and checked, the connection made to
    /// the addresses checked, `--webhook-timeout` for the whole) but beside them, out of
    /// their queue, once, never retried. Its host is looked up with new webhooks' checks,
    /// not with deliveries. Calls `then` once with the outcome, stored among the webhook's
    /// deliveries (or not, if storing failed: logged), from the thread that stored it;
    /// no thread waits for the receiver. A deletion of the webhook ends the test at once.
    /// The HTTP server stops before the transfers, so a test started by a request always
    /// gets its outcome.
    package func sendTest(_ webhook: WebhookRecord, then: @escaping @Sendable (WebhookDelivery) -> Void) {
        let startedAt = clock.now()
        let started = DispatchTime.now()
        let eventID = WebhookTest.storedEventID(startedAt: startedAt)
        let deliveryID = WebhookDelivery.id(webhookID: webhook.id, eventID: eventID)
        let event = WebhookTest.sampleEvent(for: webhook, now: startedAt)
        // A test carries no alert context: the sample task has no parents and no output.
        let body = WebhookBody.render(for: webhook, deliveryID: deliveryID, event: event, occurredAt: startedAt,
                                      site: outbox.site) ?? ""
        let finish: @Sendable (WebhookTransport.Outcome) -> Void = { [self] outcome in
            testsUnderWay.withLock { tests in
                let left = tests[webhook.id, default: 1] - 1
                tests[webhook.id] = left > 0 ? left : nil
            }
            let latency = Int64((DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000)
            let delivery = WebhookDelivery(webhookID: webhook.id, eventID: eventID, eventType: event.kind, body: body,
                                           state: outcome.verdict == .delivered ? .delivered : .failed, attempts: 1,
                                           createdAt: startedAt, nextAttemptAt: startedAt, lastAttemptAt: startedAt,
                                           lastStatus: outcome.status, lastError: outcome.error,
                                           lastLatencyMilliseconds: latency)
            writer.submit({ database in try WebhookRepository.recordTest(delivery, in: database) }) { [logger] result in
                if case .failure(let error) = result {
                    logger.log(.warn, "webhook.record_failed", ["delivery_id": deliveryID, "error": "\(error)"])
                }
                then(delivery)
            }
        }
        testsUnderWay.withLock { $0[webhook.id, default: 0] += 1 }
        let url: WebhookURL
        do throws(WebhookURL.Refusal) {
            url = try WebhookURL.parse(webhook.url)
        } catch {
            return finish(WebhookTransport.Outcome(verdict: .fail, status: nil,
                                                   error: "the URL cannot be posted to: \(error.message)"))
        }
        if body.isEmpty {
            return finish(WebhookTransport.Outcome(verdict: .fail, status: nil,
                                                   error: "this format sends nothing for \(event.kind.rawValue)"))
        }
        send(body, deliveryID: deliveryID, eventKind: event.kind, to: webhook, at: url, signedAt: startedAt,
             lookups: lookups.checks, extraHeaders: ["Headway-Test: true"], then: finish)
    }

    /// Stores an attempt's outcome through the writer; the webhook's next attempt may start
    /// once it is stored. Called on the transfers' thread, on a Dispatch worker (a refusal
    /// after a lookup) or on this service's (a refusal before any lookup): never blocks.
    private func record(_ outcome: WebhookTransport.Outcome, of delivery: WebhookDelivery, to webhook: WebhookRecord,
                        startedAt: EpochMilliseconds, started: DispatchTime) {
        // A webhook deleted meanwhile has no delivery left to record an outcome on, nor a
        // count of its own: its next attempt is simply never started.
        guard outbox.current.contains(where: { $0.id == webhook.id }) else {
            inFlight.withLock { _ = $0.remove(webhook.id) }
            return doorbell.ring()
        }
        let latency = Int64((DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000)
        let now = clock.now()
        var state = WebhookDeliveryState.pending
        var nextAttemptAt = now
        switch outcome.verdict {
        case .delivered:
            state = .delivered
            counters.delivered.add()
        case .fail:
            state = .failed
            counters.failed.add()
        case .retry:
            if let next = settings.retry.nextAttempt(afterAttempts: delivery.attempts + 1, now: now,
                                                     createdAt: delivery.createdAt, random: { Double.random(in: 0...1) }) {
                nextAttemptAt = next
                counters.retried.add()
            } else {
                state = .failed
                counters.failed.add()
            }
        }
        if state == .failed {
            logger.log(.warn, "webhook.failed", [
                "webhook_id": webhook.id, "delivery_id": delivery.id, "event": delivery.eventType.rawValue,
                "attempts": "\(delivery.attempts + 1)", "error": outcome.error ?? "",
            ])
        }
        let (finalState, retryAt, reply) = (state, nextAttemptAt, outcome)
        writer.submit({ database in
            try WebhookRepository.recordAttempt(webhookID: delivery.webhookID, eventID: delivery.eventID,
                                                revision: delivery.revision, state: finalState,
                                                attemptAt: startedAt, nextAttemptAt: retryAt, status: reply.status,
                                                error: reply.error, latencyMilliseconds: latency, in: database)
        }) { [self] result in
            let done: @Sendable () -> Void = { [self] in
                inFlight.withLock { _ = $0.remove(webhook.id) }
                doorbell.ring()
            }
            guard case .failure(let error) = result else { return done() }
            if (error as? WriterError) != .stopped {
                logger.log(.warn, "webhook.record_failed", ["delivery_id": delivery.id, "error": "\(error)"])
            }
            // The delivery is still pending as it was: it is sent again, but not at once
            // (a full disk would otherwise have the receiver posted to in a loop).
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.pauseAfterLostOutcome, execute: done)
        }
    }
}
