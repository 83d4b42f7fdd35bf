import Lifecycle
import Foundation
import Dispatch
import HTTPServer
import HeadwayCore
import HeadwayStore

/// `GET /v1/events`: the Server-Sent Events stream. A new subscriber is attached to the
/// broker first (so it misses nothing), then its catch-up — a snapshot, or the changes
/// after its last event id, only of the tasks it follows — is read from one database
/// snapshot on a connection of the catch-up read pool, and live events already covered by
/// that snapshot are dropped (`CatchUpMerge`). Catch-ups of different subscribers are
/// read side by side; one whose client has left before its turn is not read at all, and
/// none while the catch-ups held in memory use up their budget (`CatchUpBudget`): that
/// stream gets `retry:` and ends, and its client comes back later.
struct EventsAPI: Sendable {
    let broker: EventBroker
    /// Connections of their own, so a large catch-up never waits behind API reads (the
    /// application closes them once every catch-up accepted has been read).
    let reads: ReadPool
    let clock: any WallClock
    let logger: Logger
    /// How failures are answered.
    let errors: ErrorReplies
    /// Catch-ups just read, shared by subscribers that arrive with the same query while
    /// nothing has changed (a reconnection storm after a restart).
    let recentCatchUps: CatchUpCache
    /// What the catch-ups cost.
    let statistics: CatchUpStatistics
    /// The bound on catch-up bytes held in memory by all streams.
    let budget: CatchUpBudget
    /// How long a client waits before reconnecting (`retry:`).
    static let retryMilliseconds = 3000
    /// The `retry:` field, sent first on every stream.
    static let retryField = Array("retry: \(retryMilliseconds)\n".utf8)
    /// The snapshot also shows tasks finished this recently.
    static let recentlyFinishedMilliseconds: Int64 = 60_000
    /// The path of the stream; its connections get a daemon of their own.
    static let path = "/v1/events"

    /// The stream needs the `read` scope; a token's task prefix narrows what it shows
    /// (catch-up and live), and its revocation or expiry closes it.
    func register(in routes: inout ServiceRoutes) {
        routes.add("GET", Self.path, .scope(.read)) { request, grant, responder in subscribe(request, grant, responder) }
    }

    private func subscribe(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        var parsed: EventsQuery
        do throws(TaskError) {
            parsed = try EventsQuery.parse(request)
            parsed.filter.taskPrefix = grant.taskPrefix
            // A parent outside the token's prefix does not exist for it (404, as on
            // `GET /v1/tasks`): a stream of its children would say it has some.
            if let parentID = parsed.filter.parentID, !grant.covers(parentID) { throw TaskError.notFound(parentID) }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        let query = parsed
        guard broker.reserveSlot() else {
            return responder.respond(Problem.tooManySubscribers(limit: broker.settings.maximumSubscribers).response)
        }
        let stream = ResponseStream()
        let subscriber = broker.attach(stream, filter: query.filter, tokenID: grant.tokenID ?? TokenRegistry.noToken)
        responder.respond(HTTPResponse(status: 200, headers: [
            HTTPField("Content-Type", "text/event-stream; charset=utf-8"),
            HTTPField("Cache-Control", "no-cache"),
            HTTPField("X-Accel-Buffering", "no"),
        ], stream: stream))
        do {
            try reads.submit { [self] reader in catchUp(subscriber, on: stream, query, request, with: reader) }
        } catch {
            // The pool is closing, or more catch-ups wait than subscribers are allowed
            // (clients that left faster than their catch-ups were skipped): the client
            // reconnects after `retry`.
            stream.finish()
        }
    }

    /// Reads `subscriber`'s catch-up and hands it to the broker — unless its client has
    /// left meanwhile: then nothing is read and the stream is ended.
    private func catchUp(_ subscriber: SubscriberID, on stream: ResponseStream, _ query: EventsQuery,
                         _ request: HTTPRequest, with reader: DatabaseReader) {
        guard stream.isPeerConnected else {
            statistics.countSkipped()
            stream.abort()
            return
        }
        guard budget.admits else { return refuse(stream) }
        do {
            let catchUp = try catchUp(query, with: reader)
            broker.caughtUp(subscriber, catchUp, holding: catchUp.charge.map(budget.hold))
        } catch {
            logger.log(.error, "events.catch_up_failed", ["request_id": request.requestID, "error": "\(error)"])
            stream.finish()
        }
    }

    /// Ends `stream` with only `retry:` (nothing read: the catch-up budget is used up); logs
    /// the refusals as one count a second.
    private func refuse(_ stream: ResponseStream) {
        statistics.countRefused()
        stream.write(Self.retryField + [10])
        stream.finish()
        if let count = budget.countRefusal(now: clock.now()) {
            logRefusals(count)
        } else if budget.claimFlush() {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(CatchUpBudget.lineIntervalMilliseconds))) {
                [budget, clock] in
                if let count = budget.flush(now: clock.now()) { logRefusals(count) }
            }
        }
    }

    private func logRefusals(_ count: Int) {
        logger.log(.warn, "events.catch_ups_refused", [
            "count": "\(count)", "used_bytes": "\(budget.usedBytes)", "limit_bytes": "\(budget.limitBytes)",
        ])
    }

    /// Reads, in one database snapshot, what a subscriber must see before live events —
    /// or takes it from `recentCatchUps` when the same query was answered at the same
    /// position and that answer still holds.
    private func catchUp(_ query: EventsQuery, with reader: DatabaseReader) throws -> CatchUp {
        try reader.snapshot { database in
            let rowsBefore = database.rowsRead
            defer { statistics.countRead(rows: database.rowsRead - rowsBefore) }
            let now = clock.now()
            let position = try ChangeFeed.position(in: database)
            if let cached = recentCatchUps.catchUp(for: query, at: position, now: now) { return cached }
            let catchUp = try read(query, at: position, now: now, in: database)
            recentCatchUps.remember(catchUp.value, for: query, at: position, validUntil: catchUp.validUntil)
            return catchUp.value
        }
    }

    /// What `catchUp` reads (only the rows of the tasks the query follows); the answer
    /// holds at its position until `validUntil` (when the oldest finished task it shows
    /// leaves the last minute), if given.
    private func read(_ query: EventsQuery, at position: ChangeFeed.Position, now: EpochMilliseconds,
                      in database: Database) throws -> (value: CatchUp, validUntil: EpochMilliseconds?) {
            var validUntil: EpochMilliseconds?
            var holdBack = HoldBack(filter: query.filter)
            var frames: [[UInt8]] = []
            let filter = query.filter
            let selection = ChangeFeed.Selection(taskIDs: filter.taskIDs.sorted(), parentID: filter.parentID,
                                                 taskPrefix: filter.taskPrefix)
            if let lastID = query.lastEventID, position.canResume(from: lastID) {
                // Tasks held back by min_duration when the client left are older than any
                // change it saw, so they are looked up by age and sent without an id.
                if filter.minDurationMilliseconds > 0 {
                    let since = try ChangeFeed.timeNoLaterThan(change: lastID, in: database) - filter.minDurationMilliseconds
                    for task in try ChangeFeed.unfinished(createdSince: since, of: selection, in: database)
                    where task.changeNumber <= lastID {
                        if case .send(let event) = holdBack.offer(TaskEvent(task.changeKind, task), now: now) {
                            frames.append(EventFrames.event(event, withID: false, hidingParentOutside: filter.taskPrefix))
                        }
                    }
                }
                for event in try ChangeFeed.changes(after: lastID, of: selection, in: database) {
                    if case .send(let event) = holdBack.offer(event, now: now) {
                        frames.append(EventFrames.event(event, withID: true, hidingParentOutside: filter.taskPrefix))
                    }
                }
            } else {
                var shown: [TaskRecord] = []
                let since = now - Self.recentlyFinishedMilliseconds
                for task in try ChangeFeed.snapshot(finishedSince: since, of: selection, in: database) {
                    if case .send = holdBack.offer(TaskEvent(task.changeKind, task), now: now) { shown.append(task) }
                    if let finishedAt = task.finishedAt {
                        validUntil = min(validUntil ?? .max, finishedAt + Self.recentlyFinishedMilliseconds)
                    }
                }
                frames.append(EventFrames.snapshot(shown, changeNumber: position.last, hidingParentOutside: filter.taskPrefix))
            }
            // `retry:` rides on the first event: some clients dispatch a frame without data.
            if frames.isEmpty { frames = [Self.retryField + [10]] } else { frames[0] = Self.retryField + frames[0] }
            return (CatchUp(frames: frames, highWater: position.last, holdBack: holdBack, charge: CatchUpCharge(frames)),
                    validUntil)
    }
}

/// What event-stream catch-ups cost (for tests and measurements).
final class CatchUpStatistics: Sendable {
    struct Counts: Equatable {
        /// Catch-ups read (or taken from the cache) for a client still there.
        var read = 0
        /// Catch-ups not read because the client had left before their turn.
        var skipped = 0
        /// Catch-ups not read because the catch-up budget was used up.
        var refused = 0
        /// Rows the catch-ups read from the database.
        var rowsRead = 0
    }

    private let counts = Locked(Counts())

    var current: Counts { counts.withLock { $0 } }

    func countRead(rows: Int) {
        counts.withLock {
            $0.read += 1
            $0.rowsRead += rows
        }
    }

    func countSkipped() { counts.withLock { $0.skipped += 1 } }

    func countRefused() { counts.withLock { $0.refused += 1 } }
}

/// The catch-ups read lately, keyed by query and change position. An answer is reused
/// only when it is exactly what a new read would give: same filter and last event id, no
/// change since (same position, which also moves when retention forgets anything a resume
/// could see), no `min_duration` (whose answer depends on the time), and no finished task
/// in it old enough to have left the snapshot's last minute. Holds the answers of one
/// position at a time.
final class CatchUpCache: Sendable {
    private struct Key: Hashable {
        var taskIDs: Set<String>
        var parentID: String?
        var taskPrefix: String?
        var lastEventID: Int64?
    }

    private struct Answers {
        var position: ChangeFeed.Position?
        var byQuery: [Key: (catchUp: CatchUp, validUntil: EpochMilliseconds?)] = [:]
        var reused = 0
    }

    private let answers = Locked(Answers())

    /// How many answers were reused (for tests and measurements).
    var hits: Int { answers.withLock { $0.reused } }

    func catchUp(for query: EventsQuery, at position: ChangeFeed.Position, now: EpochMilliseconds) -> CatchUp? {
        guard let key = Self.key(query) else { return nil }
        return answers.withLock { answers in
            guard answers.position == position, let answer = answers.byQuery[key] else { return nil }
            if let validUntil = answer.validUntil, now >= validUntil { return nil }
            answers.reused += 1
            return answer.catchUp
        }
    }

    func remember(_ catchUp: CatchUp, for query: EventsQuery, at position: ChangeFeed.Position,
                  validUntil: EpochMilliseconds?) {
        guard let key = Self.key(query) else { return }
        answers.withLock { answers in
            // Catch-ups are read side by side: one read from an older snapshot does not
            // push out the answers of a newer position.
            if let current = answers.position, current.last > position.last { return }
            if answers.position != position {
                answers.position = position
                answers.byQuery = [:]
            }
            if answers.byQuery.count >= 256 { answers.byQuery = [:] }
            answers.byQuery[key] = (catchUp, validUntil)
        }
    }

    private static func key(_ query: EventsQuery) -> Key? {
        guard query.filter.minDurationMilliseconds == 0 else { return nil }
        return Key(taskIDs: query.filter.taskIDs, parentID: query.filter.parentID, taskPrefix: query.filter.taskPrefix,
                   lastEventID: query.lastEventID)
    }
}

/// The query of `GET /v1/events`, validated.
struct EventsQuery {
    var filter = StreamFilter()
    /// From `Last-Event-ID` (preferred: a reconnecting EventSource sends it) or `last_event_id=`.
    /// Nil when absent or not a number; such a client gets a fresh snapshot.
    var lastEventID: Int64?

    static func parse(_ request: HTTPRequest) throws(TaskError) -> EventsQuery {
        var result = EventsQuery()
        // `access_token` is the gate's (a token for EventSource, which cannot send headers).
        var query = QueryReader(request.queryParameters,
                                allowed: ["task", "parent_id", "min_duration", "last_event_id", "access_token"])
        result.filter.taskIDs = Set(query.ids("task"))
        result.filter.parentID = query.id("parent_id")
        if let seconds = query.number("min_duration", in: 0...86_400, unit: "seconds") {
            result.filter.minDurationMilliseconds = Int64((seconds * 1000).rounded())
        }
        guard query.errors.isEmpty else { throw .invalidRequest(query.errors) }
        let lastID = request.header("last-event-id") ?? query.values("last_event_id").last
        result.lastEventID = lastID.flatMap(LastEventID.parse)
        return result
    }
}
