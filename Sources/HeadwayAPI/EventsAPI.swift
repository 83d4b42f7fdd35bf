import Access
import Dispatch
import EventStream
import Foundation
import HeadwayCore
import HeadwayStore
import HTTPServer
import Lifecycle
import Telemetry

/// `GET /v1/events`: the Server-Sent Events stream. A new subscriber is attached to the
/// broker first (so it misses nothing), then its catch-up — a snapshot, or the changes
/// after its last event id, only of the tasks it follows — is read from one database
/// snapshot on a connection of the catch-up read pool, and live events already covered by
/// that snapshot are dropped (`CatchUpMerge`). Catch-ups of different subscribers are
/// read side by side; one whose client has left before its turn is not read at all. A
/// catch-up is read once for every stream that selects the same tasks at the same
/// position (`CatchUpCache`), and each stream's `min_duration` is applied to it
/// (`CatchUpBase.view`). Its bytes are counted, before they are made, against its client's
/// fair share of a global budget (`CatchUpBudget`); when that refuses, the stream gets
/// `retry:` and ends, and its client comes back later.
package struct EventsAPI: Sendable {
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
    /// The path of the stream; its connections get a daemon of their own.
    package static let path = "/v1/events"

    /// The stream needs the `read` scope; a token's task prefix narrows what it shows
    /// (catch-up and live), and its revocation or expiry closes it.
    package func register(in routes: inout ServiceRoutes) {
        routes.add("GET", Self.path, .scope(.read)) { request, grant, responder in subscribe(request, grant, responder) }
    }

    private func subscribe(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        var parsed: EventsQuery
        do throws(TaskError) {
            parsed = try EventsQuery.parse(request)
            parsed.filter.taskPrefix = grant.taskPrefix
            // A parent outside the token's prefix does not exist for it (404, as on
            // `GET /v1/tasks`): a stream of its children would say it has some.
            if let parentID = parsed.filter.parentIDs.sorted().first(where: { !grant.covers($0) }) {
                throw TaskError.notFound(parentID)
            }
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
        let party = CatchUpParty(client: request.client, tokenID: grant.tokenID)
        do {
            try reads.submit { [self] reader in catchUp(subscriber, on: stream, query, request, party, with: reader) }
        } catch {
            // The pool is closing, or more catch-ups wait than subscribers are allowed
            // (clients that left faster than their catch-ups were skipped): the client
            // reconnects after `retry`.
            stream.finish()
        }
    }

    /// The budget refused a catch-up's bytes.
    private struct Refused: Error {}

    /// Reads `subscriber`'s catch-up, counted against `party`'s share of the budget, and
    /// hands it to the broker — unless its client has left meanwhile (then nothing is read
    /// and the stream is ended), the budget refuses it (the stream gets `retry:`) or the read
    /// fails (the stream ends, with the problem's `Retry-After` as `retry:` if it has one).
    private func catchUp(_ subscriber: SubscriberID, on stream: ResponseStream, _ query: EventsQuery,
                         _ request: HTTPRequest, _ party: CatchUpParty, with reader: DatabaseReader) {
        guard stream.isPeerConnected else {
            statistics.countSkipped()
            stream.abort()
            return
        }
        let hold = budget.hold(for: party)
        hold.isFor(stream)
        do {
            let catchUp = try catchUp(query, hold: hold, with: reader)
            broker.caughtUp(subscriber, catchUp, holding: hold)
        } catch is Refused {
            refuse(stream)
        } catch {
            // The head (200) went out with the stream, so the problem cannot; its
            // `Retry-After` can, as `retry:` before the stream ends (the database unavailable:
            // EventSource comes back when a catch-up may be read, not at once, over and over).
            // `problem(for:)` logs what is not expected.
            if let seconds = errors.problem(for: error, request).retryAfterSeconds {
                stream.write(Array("retry: \(seconds * 1000)\n\n".utf8))
            }
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

    /// Reads, in one database snapshot, what a subscriber must see before live events:
    /// the catch-up of the tasks it selects (taken from `recentCatchUps` when it was read
    /// at the same position and still holds; else read, unless `hold` may take nothing
    /// more), seen through its `min_duration`. Every byte is counted on `hold` before it is
    /// made; throws `Refused` when the budget refuses one.
    private func catchUp(_ query: EventsQuery, hold: CatchUpHold, with reader: DatabaseReader) throws -> CatchUp {
        try reader.snapshot { database in
            let rowsBefore = database.rowsRead
            let catchUp = try catchUp(query, hold: hold, in: database)
            statistics.countRead(rows: database.rowsRead - rowsBefore)
            return catchUp
        }
    }

    /// `catchUp(_:hold:with:)` in `database`'s snapshot.
    private func catchUp(_ query: EventsQuery, hold: CatchUpHold, in database: Database) throws -> CatchUp {
        let now = clock.now()
        let position = try ChangeFeed.position(in: database)
        let filter = query.filter
        let selection = ChangeFeed.Selection(taskIDs: filter.taskIDs.sorted(), parentIDs: filter.parentIDs.sorted(), newRoots: filter.newRoots,
                                             taskPrefix: filter.taskPrefix)
        let resumeFrom = query.lastEventID.flatMap { position.canResume(from: $0) ? $0 : nil }
        let base: CatchUpBase
        if let (charge, cached) = recentCatchUps.catchUp(for: query, resumingFrom: resumeFrom, at: position, now: now) {
            guard hold.join(charge) else { throw Refused() }
            base = cached
        } else {
            guard hold.mayTakeMore else { throw Refused() }
            base = try read(selection, resumingFrom: resumeFrom, at: position, now: now, hold: hold, in: database)
            let charge = CatchUpCharge(bytes: base.bytes, contents: base)
            hold.settle(charge)
            recentCatchUps.remember(charge, for: query, resumingFrom: resumeFrom, at: position)
        }
        var holdBack = HoldBack(filter: filter)
        var frames = [Self.retryField]
        var ownBytes = 0
        if let lastID = resumeFrom, filter.minDurationMilliseconds > 0 {
            // Tasks held back by min_duration when the client left are older than any
            // change it saw, so they are looked up by age and sent as a release (the last
            // with `LastEventID.release`). Held then means created after its last change's
            // time minus the minimum, and, when its id ended a release, not of age by that
            // release (those it was sent).
            var since = try ChangeFeed.timeNoLaterThan(change: lastID, in: database) - filter.minDurationMilliseconds
            if let releasedAt = query.releasedAt {
                since = max(since, releasedAt - filter.minDurationMilliseconds + 1)
            }
            var released: [TaskEvent] = []
            for task in try ChangeFeed.unfinished(createdSince: since, of: selection, in: database)
            where task.changeNumber <= lastID {
                guard case .send(let event) = holdBack.offer(TaskEvent(task.changeKind, task), now: now) else { continue }
                released.append(event)
            }
            let releaseID = LastEventID.release(change: lastID, at: now)
            for (index, event) in released.enumerated() {
                let id = index == released.count - 1 ? releaseID : nil
                let frame = EventFrames.event(event, id: id, hidingParentOutside: filter.taskPrefix)
                guard hold.reserve(frame.count) else { throw Refused() }
                ownBytes += frame.count
                frames.append(frame)
            }
        }
        var reserved = 0
        guard let view = base.view(holdBack: &holdBack, now: now, reserve: { bytes in
            reserved = bytes
            return hold.reserve(bytes)
        }) else { throw Refused() }
        ownBytes += reserved
        if ownBytes > 0 { hold.settle(CatchUpCharge(bytes: ownBytes)) }
        frames += view.frames
        // `retry:` rides on the first event: some clients dispatch a frame without data.
        if frames.count == 1 { frames = [Self.retryField + [10]] }
        return CatchUp(frames: frames, highWater: base.highWater, holdBack: holdBack)
    }

    /// Reads the catch-up of `selection` at `position` (the changes after `lastID` when
    /// given, else a snapshot), only the rows of the tasks it selects, each task's parent
    /// hidden when it lies outside the selection's task prefix, reserving each item's
    /// bytes on `hold` before adding it.
    private func read(_ selection: ChangeFeed.Selection, resumingFrom lastID: Int64?, at position: ChangeFeed.Position,
                      now: EpochMilliseconds, hold: CatchUpHold, in database: Database) throws -> CatchUpBase {
        var builder: CatchUpBase.Builder
        let events: [TaskEvent]
        if let lastID {
            builder = .changes(through: position.last)
            events = try ChangeFeed.changes(after: lastID, of: selection, in: database)
        } else {
            builder = .snapshot(changeNumber: position.last)
            let since = now - CatchUpBase.recentlyFinishedMilliseconds
            events = try ChangeFeed.snapshot(finishedSince: since, of: selection, in: database)
                .map { TaskEvent($0.changeKind, $0) }
        }
        guard hold.reserve(builder.fixedBytes) else { throw Refused() }
        for event in events {
            // Every stream sharing it has the same task prefix (it is part of the key).
            guard builder.append(event.hidingParent(outside: selection.taskPrefix), reserve: hold.reserve) else {
                throw Refused()
            }
        }
        return builder.finish()
    }

    package init(broker: EventBroker, reads: ReadPool, clock: any WallClock, logger: Logger, errors: ErrorReplies,
                 recentCatchUps: CatchUpCache, statistics: CatchUpStatistics, budget: CatchUpBudget) {
        self.broker = broker
        self.reads = reads
        self.clock = clock
        self.logger = logger
        self.errors = errors
        self.recentCatchUps = recentCatchUps
        self.statistics = statistics
        self.budget = budget
    }
}

/// What event-stream catch-ups cost (for tests and measurements).
package final class CatchUpStatistics: Sendable {
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

    /// Shared by the catch-up readers (counting) and the threads that read `/metrics`.
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

    package init() {}
}

/// The catch-ups read lately, keyed by what they select and change position. A catch-up is
/// reused only when it is exactly what a new read would give before `min_duration` (which
/// each stream applies to it): same tasks selected and same resume point, no change since
/// (same position, which also moves when retention forgets anything a resume could see),
/// and no finished task in it old enough to have left the snapshot's last minute. Holds
/// the catch-ups of one position at a time, and only while the budget keeps them (weakly:
/// the budget decides how long a catch-up no stream holds stays in memory); one replaced
/// is retired, so that memory goes to the catch-ups that can still be shared.
package final class CatchUpCache: Sendable {
    private struct Key: Hashable {
        var taskIDs: Set<String>
        var parentIDs: Set<String>
        var newRoots: Bool
        var taskPrefix: String?
        var lastEventID: Int64?
    }

    private struct Entry {
        weak var charge: CatchUpCharge?
    }

    private struct Answers {
        var position: ChangeFeed.Position?
        var byQuery: [Key: Entry] = [:]
        var reused = 0
    }

    /// Shared by the catch-up readers: one's answer is reused by another.
    private let answers = Locked(Answers())
    private let budget: CatchUpBudget

    package init(budget: CatchUpBudget) {
        self.budget = budget
    }

    /// How many answers were reused (for tests and measurements).
    var hits: Int { answers.withLock { $0.reused } }

    /// The catch-up read for what `query` selects (resuming from `lastID`, if given) at
    /// `position`, with its charge, if it is still kept and still true at `now`.
    func catchUp(for query: EventsQuery, resumingFrom lastID: Int64?, at position: ChangeFeed.Position,
                 now: EpochMilliseconds) -> (CatchUpCharge, CatchUpBase)? {
        let key = Self.key(query, lastID)
        return answers.withLock { answers in
            guard answers.position == position, let charge = answers.byQuery[key]?.charge,
                  let base = charge.contents as? CatchUpBase else { return nil }
            if let validUntil = base.validUntil, now >= validUntil { return nil }
            answers.reused += 1
            return (charge, base)
        }
    }

    /// Keeps `charge` (a `CatchUpBase` read for what `query` selects at `position`) for
    /// the streams that will want the same; the catch-ups it replaces are retired.
    func remember(_ charge: CatchUpCharge, for query: EventsQuery, resumingFrom lastID: Int64?,
                  at position: ChangeFeed.Position) {
        let key = Self.key(query, lastID)
        let replaced = answers.withLock { answers -> [CatchUpCharge] in
            // Catch-ups are read side by side: one read from an older snapshot does not
            // push out the answers of a newer position.
            if let current = answers.position, current.last > position.last { return [charge] }
            var replaced: [Entry] = []
            if answers.position != position || answers.byQuery.count >= 256 {
                replaced = Array(answers.byQuery.values)
                answers.position = position
                answers.byQuery = [:]
            }
            if let previous = answers.byQuery.updateValue(Entry(charge: charge), forKey: key) { replaced.append(previous) }
            return replaced.compactMap(\.charge).filter { $0 !== charge }
        }
        for old in replaced { budget.retire(old) }
    }

    /// What a catch-up is shared by: the tasks selected and the resume point, not the
    /// `min_duration`.
    private static func key(_ query: EventsQuery, _ lastID: Int64?) -> Key {
        Key(taskIDs: query.filter.taskIDs, parentIDs: query.filter.parentIDs, newRoots: query.filter.newRoots, taskPrefix: query.filter.taskPrefix,
            lastEventID: lastID)
    }
}

/// The query of `GET /v1/events`, validated.
struct EventsQuery {
    var filter = StreamFilter()
    /// From `Last-Event-ID` (preferred: a reconnecting EventSource sends it) or `last_event_id=`.
    /// Nil when absent or not a number; such a client gets a fresh snapshot.
    var lastEventID: Int64?
    /// When the id ended a `min_duration` release (`LastEventID.release`): the time up to
    /// which the stream had released the tasks it held.
    var releasedAt: EpochMilliseconds?

    static func parse(_ request: HTTPRequest) throws(TaskError) -> EventsQuery {
        var result = EventsQuery()
        // `access_token` is the gate's (a token for EventSource, which cannot send headers).
        var query = QueryReader(request.queryParameters,
                                allowed: ["task", "parent_id", "new_roots", "min_duration", "last_event_id", "access_token"])
        result.filter.taskIDs = Set(query.ids("task"))
        result.filter.parentIDs = Set(query.ids("parent_id"))
        result.filter.newRoots = query.boolean("new_roots") ?? false
        if let seconds = query.number("min_duration", in: 0...86_400, unit: "seconds") {
            result.filter.minDurationMilliseconds = Int64((seconds * 1000).rounded())
        }
        guard query.errors.isEmpty else { throw .invalidRequest(query.errors) }
        let lastID = request.header("last-event-id") ?? query.values("last_event_id").last
        let resumePoint = lastID.flatMap(LastEventID.resumePoint)
        result.lastEventID = resumePoint?.change
        result.releasedAt = resumePoint?.releasedAt
        return result
    }
}
