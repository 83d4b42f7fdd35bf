import Foundation
import HeadwayCore
import HeadwayStore
import HTTPServer
import Lifecycle
import Telemetry

/// The routes of the task API (`/v1/tasks…`). A request is checked on the
/// server's thread; its read then runs on a connection of the read pool (the connection
/// suspended meanwhile, so a slow query never stalls the server), and a flood of reads
/// waits in the pool's bounded queue or is refused 503 `server_busy`. Changes go to the
/// group-commit writer and are answered only after commit (the writer has published their
/// events by then).
package struct TaskAPI: Sendable {
    let writer: GroupCommitWriter
    let reads: ReadPool
    let store: TaskStore
    let clock: any WallClock
    let logger: Logger
    /// How failures are answered.
    let errors: ErrorReplies
    /// Where updates accepted and refused are counted.
    let metrics: ServiceMetrics
    /// Items one batch may hold (`--max-batch-items`).
    let maximumBatchItems: Int
    /// The replies that wait for their clients to take them (`--max-unsent-reply-bytes`).
    let unreadReplies: UnreadReplies
    /// Where large batches are parsed and checked, one after another in the order they came
    /// (`batchParsedInPlaceBytes`).
    let batchParsing: DispatchQueue

    /// The batch route: many progress reports in one request.
    package static let batchPath = "/v1/progress"
    /// The most bytes a batch's body may take (1 MiB, or `--max-body-bytes` if larger):
    /// room for the default 1,000 items with long ids and labels.
    package static let batchBodyBytes = 1 << 20
    /// The most bytes of task JSON one page of `GET /v1/tasks` holds (1 MiB): a page of
    /// `page_size` tasks that would take more ends early, with its `next_page_token`. 500
    /// tasks of the usual size take about 300 KB; at the size limits a task takes about 9 KB.
    static let maximumPageBytes = 1 << 20

    /// The task routes with the access each needs (`report`, `read`, `control`); the OpenAPI test compares the route table with the paths of
    /// `openapi.yaml`. A token's task prefix is applied by each handler: another prefix's
    /// task is 404, absent from lists, and may not be registered (403).
    package func register(in routes: inout ServiceRoutes) {
        routes.add("POST", "/v1/tasks", .scope(.report)) { request, grant, responder in registerTask(request, grant, responder) }
        routes.add("GET", "/v1/tasks", .scope(.read)) { request, grant, responder in list(request, grant, responder) }
        // Before `/v1/tasks/{id}`, which would take it: a task whose id is `summary` is read
        // through the listing (`id_prefix=summary`).
        routes.add("GET", "/v1/tasks/summary", .scope(.read)) { request, grant, responder in summary(request, grant, responder) }
        routes.add("GET", "/v1/tasks/{id}", .scope(.read)) { request, grant, responder in get(request, grant, responder) }
        routes.add("GET", "/v1/tasks/{id}/output", .scope(.read)) { request, grant, responder in output(request, grant, responder) }
        routes.add("DELETE", "/v1/tasks/{id}", .scope(.control)) { request, grant, responder in delete(request, grant, responder) }
        routes.add("GET", "/v1/tasks/{id}/history", .scope(.read)) { request, grant, responder in history(request, grant, responder) }
        routes.add("POST", "/v1/tasks/{id}/progress", .scope(.report)) { request, grant, responder in
            update(request, grant, responder, kind: .progress, readPlain: ProgressUpdate.readPlain,
                   parse: ProgressUpdate.parse) { [store] id, update, now, database in
                try store.progress(id, update, now: now, in: database)
            }
        }
        routes.add("POST", "/v1/tasks/{id}/heartbeat", .scope(.report)) { request, grant, responder in
            update(request, grant, responder, kind: .heartbeat, parse: Heartbeat.parse) { [store] id, heartbeat, now, database in
                try store.heartbeat(id, heartbeat, now: now, in: database)
            }
        }
        routes.add("POST", "/v1/tasks/{id}/finish", .scope(.report)) { request, grant, responder in
            update(request, grant, responder, kind: .finish, emptyBodyAllowed: false, parse: Finish.parse) { [store] id, finish, now, database in
                try store.finish(id, finish, now: now, in: database)
            }
        }
        routes.add("POST", "/v1/tasks/{id}/cancel", .scope(.control)) { request, grant, responder in cancel(request, grant, responder) }
        routes.add("POST", "/v1/tasks/{id}/terminate", .scope(.control)) { request, grant, responder in terminate(request, grant, responder) }
        routes.add("POST", Self.batchPath, .scope(.report)) { request, grant, responder in progressBatch(request, grant, responder) }
    }

    // MARK: - Handlers

    private func registerTask(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let registration: Registration
        do {
            registration = try Registration.parse(try jsonBody(request, emptyAllowed: false))
            if let prefix = grant.taskPrefix {
                guard let id = registration.id, grant.covers(id) else {
                    throw AccessRefusal.prefixNotAllowed(prefix: prefix, field: "id")
                }
                if let parentID = registration.parentID, !grant.covers(parentID) {
                    throw AccessRefusal.prefixNotAllowed(prefix: prefix, field: "parent_id")
                }
            }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        writer.submit({ [store, clock] database in
            try store.register(registration, now: clock.now(), in: database)
        }) { result in
            responder.respond(reply(result, request) { registered in
                let location = HTTPField("Location", "/v1/tasks/\(registered.task.id)")
                return .json(registered.created ? 201 : 200,
                             grant.visible(taskJSON: registered.task.json, parentID: registered.task.parentID),
                             headers: [location])
            })
        }
    }

    private func get(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id: String
        do throws(TaskError) { id = try taskID(request, grant) } catch { return responder.respond(errors.response(for: error, request)) }
        read(request, responder) { reader in
            guard let task = try reader.read({ database in try TaskRepository.find(id, in: database) }) else {
                throw TaskError.notFound(id)
            }
            return .json(200, grant.visible(taskJSON: task.json, parentID: task.parentID))
        }
    }

    /// The task's output tail: `{"task_id": …, "lines": [{"t": …, "line": …}, …]}`, oldest
    /// first (empty before any output).
    private func output(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id: String
        do throws(TaskError) {
            id = try taskID(request, grant)
            let query = QueryReader(request.queryParameters, allowed: [])
            guard query.errors.isEmpty else { throw TaskError.invalidRequest(query.errors) }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        read(request, responder) { reader in
            let lines = try reader.snapshot { database -> String?? in
                guard let task = try TaskRepository.find(id, in: database) else { return nil }
                return .some(task.lastOutput == nil ? nil : try TaskOutput.json(of: id, in: database))
            }
            guard let lines else { throw TaskError.notFound(id) }
            var body = JSONText()
            body.appendRaw(#"{"task_id":"#)
            body.appendString(id)
            body.appendRaw(#","lines":"#)
            body.appendRaw(lines ?? "[]")
            body.appendRaw("}")
            return .json(200, body.text)
        }
    }

    /// How many of the tasks the caller may see are in each state (`running` counting the
    /// stalled too) and stalled; `root=true` counts only tasks without a parent.
    private func summary(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let rootOnly: Bool
        do throws(TaskError) {
            var query = QueryReader(request.queryParameters, allowed: ["root"])
            rootOnly = query.boolean("root") ?? false
            guard query.errors.isEmpty else { throw TaskError.invalidRequest(query.errors) }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        read(request, responder) { reader in
            let summary = try reader.read { database in
                try TaskRepository.summary(taskPrefix: grant.taskPrefix, rootOnly: rootOnly, in: database)
            }
            return .json(200, summary.json)
        }
    }

    /// The progress curve, downsampled (largest triangle three buckets) to `max_points`.
    private func history(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id: String
        let maximum: Int
        do throws(TaskError) {
            id = try taskID(request, grant)
            var query = QueryReader(request.queryParameters, allowed: ["max_points"])
            maximum = query.integer("max_points", in: 2...1000) ?? 200
            guard query.errors.isEmpty else { throw TaskError.invalidRequest(query.errors) }
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        read(request, responder) { reader in
            let points = try reader.snapshot { database -> [History.Point]? in
                guard let task = try TaskRepository.find(id, in: database) else { return nil }
                return try History.points(of: task, in: database)
            }
            guard let points else { throw TaskError.notFound(id) }
            let kept = Downsampling.largestTriangleThreeBuckets(
                points.map { (x: Double($0.t), y: $0.fraction ?? Double($0.completed)) }, maximum: maximum)
            var body = JSONText()
            body.appendRaw(#"{"task_id":"#)
            body.appendString(id)
            body.appendRaw(#","points":["#)
            for (index, position) in kept.enumerated() {
                let point = points[position]
                var item = JSONObjectWriter()
                item.string("t", Timestamp.rfc3339(point.t))
                item.integer("completed", point.completed)
                item.integer("total", point.total)
                item.number("fraction", point.fraction)
                if index > 0 { body.appendRaw(",") }
                body.appendRaw(item.finish())
            }
            body.appendRaw("]}")
            return .json(200, body.text)
        }
    }

    private func list(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        var parsed: ListQuery
        let possible: Bool
        do {
            parsed = try ListQuery.parse(request.queryParameters)
            possible = parsed.restrict(toTokenPrefix: grant.taskPrefix)
            // A parent outside the token's prefix does not exist for it, as the task
            // itself would not: its children are not listed, whatever their prefix.
            if let parentID = parsed.filter.parentID, !grant.covers(parentID) { throw TaskError.notFound(parentID) }
            try parsed.resolvePageToken()
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        guard possible else {
            // The search and the token's prefix exclude each other: nothing to read.
            return responder.respond(.json(200, #"{"tasks":[],"next_page_token":null,"total_size":0}"#))
        }
        let query = parsed
        read(request, responder) { reader in
            let page = try reader.snapshot { database in
                try TaskRepository.page(query.filter, size: query.pageSize, beforeKey: query.beforeKey, in: database)
            }
            var body = JSONText()
            body.appendRaw(#"{"tasks":["#)
            var nextKey = page.nextKey
            for (index, task) in page.tasks.enumerated() {
                let json = grant.visible(taskJSON: task.json, parentID: task.parentID)
                // A page ends early once its tasks take `maximumPageBytes`: one reply a
                // client leaves unread holds about that at most, whatever its tasks' sizes.
                if index > 0 && body.count + json.utf8.count > Self.maximumPageBytes {
                    nextKey = page.keys[index - 1]
                    break
                }
                if index > 0 { body.appendRaw(",") }
                body.appendRaw(json)
            }
            body.appendRaw(#"],"next_page_token":"#)
            if let next = nextKey {
                body.appendString(PageToken(beforeKey: next, filter: query.filter).encoded)
            } else {
                body.appendRaw("null")
            }
            body.appendRaw(#","total_size":\#(page.totalSize)}"#)
            return .json(200, body.text)
        }
    }

    /// Deletes the task and its subtree in steps (`TaskStore.inSteps`), other writes
    /// committing between them; the writer publishes each step's tombstones once it has
    /// committed, and the 204 is sent after the last step: the whole subtree is gone.
    private func delete(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id: String
        do throws(TaskError) { id = try taskID(request, grant) } catch { return responder.respond(errors.response(for: error, request)) }
        store.inSteps(on: writer, { [store, clock] database in try store.delete(id, taskPrefix: grant.taskPrefix, now: clock.now(), in: database) }) { result in
            if case .success = result { audit("audit.task_delete", grant, request, id) }
            responder.respond(reply(result, request) { _ in HTTPResponse(status: 204) })
        }
    }

    /// Requests cancellation of the task and its unfinished descendants in steps
    /// (`TaskStore.inSteps`), other writes committing between them; the writer publishes
    /// each step's events once it has committed, and the 202 with the task is sent after the
    /// last step: every unfinished task of the subtree is then cancel-requested.
    private func cancel(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        guard let (id, _) = parsed(request, grant, responder, emptyBodyAllowed: true, parse: { _ throws(TaskError) in () }) else { return }
        store.inSteps(on: writer, { [store, clock] database in try store.cancel(id, taskPrefix: grant.taskPrefix, now: clock.now(), in: database) }) { result in
            if case .success = result { audit("audit.task_cancel", grant, request, id) }
            responder.respond(reply(result, request) { step in
                // A cancel's first step always has its task's outcome.
                step.outcome.map { Self.taskReply(202, $0, events: step.events, grant) } ?? HTTPResponse(status: 202)
            })
        }
    }

    /// Finishes the task `canceled` with the message "terminated", and its unfinished
    /// descendants (within the token's prefix), each after its own descendants, in steps
    /// (`TaskStore.terminateInSteps`), other writes committing between them: for a runner
    /// that died or ignores its cancel. Each step's events are published once it has
    /// committed; the reply comes after the last step, which ends the task itself: 200 with
    /// the task; on a task already `canceled`, 200 with `Headway-Unchanged` (its unfinished
    /// descendants still ended); on one that succeeded or failed, 409 `task_finished`.
    private func terminate(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        guard let (id, _) = parsed(request, grant, responder, emptyBodyAllowed: true, parse: { _ throws(TaskError) in () }) else { return }
        store.terminateInSteps(id, taskPrefix: grant.taskPrefix, on: writer, now: { [clock] in clock.now() }) { result in
            if case .success = result { audit("audit.task_terminate", grant, request, id) }
            responder.respond(reply(result, request) { step in
                guard let outcome = step.outcome else { return HTTPResponse(status: 200) }
                var headers: [HTTPField] = []
                if case .unchanged = outcome { headers.append(HTTPField("Headway-Unchanged", "true")) }
                return .json(200, grant.visible(taskJSON: outcome.task.json, parentID: outcome.task.parentID), headers: headers)
            })
        }
    }

    /// The shape shared by progress, heartbeat and finish: validate the id and body, run
    /// the change in the writer, answer with the task once committed; counted by `kind`
    /// as accepted, or refused with its problem's code. `readPlain`, where given, reads a
    /// body of the common plain shape without the JSON tree (`ProgressUpdate.readPlain`);
    /// `parse` reads every other body.
    private func update<Body: Sendable>(
        _ request: HTTPRequest, _ grant: Grant, _ responder: any Responder, kind: UpdateKind, emptyBodyAllowed: Bool = true,
        readPlain: ((UnsafeBufferPointer<UInt8>) -> Body?)? = nil, parse: (JSONValue) throws(TaskError) -> Body,
        apply: @escaping @Sendable (String, Body, EpochMilliseconds, Database) throws -> TaskStore.Changed
    ) {
        let id: String
        let body: Body
        do {
            (id, body) = (try taskID(request, grant),
                          try Self.plainBody(request, readPlain) ?? parse(try jsonBody(request, emptyAllowed: emptyBodyAllowed)))
        } catch {
            return Self.refuseUpdate(kind, error, request, responder, errors: errors, metrics: metrics)
        }
        // The closures capture what they use, not `self`: capturing a struct copies it.
        writer.submit({ [clock] database in try apply(id, body, clock.now(), database) }) { [metrics, errors] result in
            switch result {
            case .success(let changed):
                metrics.updatesAccepted.add(kind)
                metrics.countFlags(changed.events)
                responder.respond(Self.taskReply(200, changed.outcome, events: changed.events, grant))
            case .failure(let error):
                Self.refuseUpdate(kind, error, request, responder, errors: errors, metrics: metrics)
            }
        }
    }

    /// Many progress reports in one request and one writer job (one commit): each item is
    /// applied, in order, as `POST /v1/tasks/{id}/progress` would apply it, or refused alone
    /// with the problem that route would give, nothing of it stored (an item that cannot be
    /// read, or names another prefix's task, never reaches the writer). The reply lists
    /// each item's outcome in the order sent; the events of the items applied are
    /// published once committed, before it. A body that is no batch, or a batch the writer
    /// could not store at all, is refused whole with nothing applied. Each item counts as a
    /// progress update, accepted or refused by its code (all by the whole refusal's code
    /// when the writer could not store the batch).
    ///
    /// Its reply lists every item's task (about 0.8 MiB for 1,000 items), so a batch is
    /// admitted as a read is (`UnreadReplyBudget`), and once parsed reserves
    /// `batchReplyBytesPerItem` an item until its reply is made: a client that sent batches
    /// on many connections at once and read no reply held any amount of them (256 MB with
    /// 300 connections), past everyone's budget, and every reader was refused meanwhile.
    ///
    /// The server reserves a batch's reply bytes from its head (`replyBytesReserved`), so a
    /// client past its share is refused there, its body dropped as it comes, never parsed;
    /// a batch that comes without such a reservation is admitted here.
    private func progressBatch(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        if request.replyReservation == nil {
            let (admitted, clientBytes, totalBytes) = unreadReplies.admits(request.clientAddress)
            guard admitted else {
                let problem = Problem.repliesUnread(clientBytes: clientBytes, totalBytes: totalBytes)
                return responder.respond(errors.response(for: problem, request))
            }
        }
        guard request.body.count < Self.batchParsedInPlaceBytes else {
            return batchParsing.async { [self] in applyBatch(request, grant, responder) }
        }
        applyBatch(request, grant, responder)
    }

    /// A batch body this large or larger is parsed on `batchParsing`, not on the server's
    /// thread: parsing a 1,000-item batch takes about a millisecond, and 512 clients
    /// sending them held every other request of the request daemon (`/healthz` took up to
    /// seconds) while a smaller body costs less than handing it over.
    static let batchParsedInPlaceBytes = 16 * 1024

    /// What a batch reserves of the unread-reply budget per item until its reply is made:
    /// about an item's share of a reply (a task's JSON with little metadata, ~0.85 KiB).
    static let batchReplyBytesPerItem = 1024

    /// What a batch reserves from its head, before its items are counted
    /// (`MicroHTTPServer.Configuration.largerBodyReplyBytes`): room for the most items its
    /// announced body can hold (an item takes at least three bytes, `{}` and a comma), at
    /// most `maximumItems`; the most items for a chunked body.
    package static func replyBytesReserved(announcedBodyBytes: Int?, maximumItems: Int) -> Int {
        let items = announcedBodyBytes.map { min(maximumItems, ($0 + 1) / 3) } ?? maximumItems
        return max(1, items) * batchReplyBytesPerItem
    }

    /// `progressBatch`'s work: parses, checks and hands the batch to the writer.
    private func applyBatch(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let batch: ProgressBatch
        do {
            batch = try ProgressBatch.parse(try jsonBody(request, emptyAllowed: false), maximumItems: maximumBatchItems)
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        let replyBytes = batch.items.count * Self.batchReplyBytesPerItem
        let reservation: ReplyReservation
        if let fromHead = request.replyReservation {
            fromHead.shrink(to: replyBytes)
            reservation = fromHead
        } else {
            let (made, clientBytes, totalBytes) = unreadReplies.reservation(replyBytes, client: request.clientAddress)
            guard let made else {
                let problem = Problem.repliesUnread(clientBytes: clientBytes, totalBytes: totalBytes)
                return responder.respond(errors.response(for: problem, request))
            }
            reservation = made
        }
        // The reply, which counts as it is queued, replaces the reservation.
        let respond: @Sendable (HTTPResponse) -> Void = { response in
            reservation.release()
            responder.respond(response)
        }
        // Each item's place: refused already, or its index among those the writer applies.
        var places: [Result<Int, any Error>] = []
        var applied: [ProgressItem] = []
        for item in batch.items {
            // As on the single route, a task outside the token's prefix does not exist for
            // it, whatever the rest of the item says.
            if let id = item.taskID, TaskID.isValid(id), !grant.covers(id) {
                places.append(.failure(TaskError.notFound(id)))
                continue
            }
            switch item.parsed {
            case .success(let item):
                places.append(.success(applied.count))
                applied.append(item)
            case .failure(let error): places.append(.failure(error))
            }
        }
        let taskIDs = batch.items.map(\.taskID)
        guard !applied.isEmpty else { return respond(batchReply(taskIDs, places, results: [], request, grant)) }
        writer.submit({ [store, clock, applied] database in
            try store.progress(each: applied, now: clock.now(), in: database)
        }) { [metrics, places] result in
            switch result {
            case .success(let results):
                respond(batchReply(taskIDs, places, results: results, request, grant))
            case .failure(let error):
                let problem = errors.problem(for: error, request)
                metrics.updatesRefused.add([UpdateKind.progress.name, problem.code], UInt64(places.count))
                respond(problem.response)
            }
        }
    }

    /// The reply to a batch: `{"results": [...]}`, one object per item in the order sent,
    /// `{"task_id": …, "status": 200, "task": {…}}` (with `"unchanged": true` for a
    /// repeated `seq`) or `{"task_id": …, "status": 4xx, "problem": {…}}` (`task_id` as
    /// the item gave it; null if it gave none); each counted as accepted or refused. A
    /// task is shown as `grant` sees it (a parent outside its prefix hidden).
    private func batchReply(_ taskIDs: [String?], _ places: [Result<Int, any Error>],
                            results: [Result<TaskStore.Changed, any Error>], _ request: HTTPRequest,
                            _ grant: Grant) -> HTTPResponse {
        var body = JSONText()
        body.appendRaw(#"{"results":["#)
        var accepted: UInt64 = 0
        for (index, place) in places.enumerated() {
            if index > 0 { body.appendByte(UInt8(ascii: ",")) }
            // Written at the end of the body itself: no buffer and no copy per item.
            var item = JSONObjectWriter(continuing: &body)
            item.string("task_id", taskIDs[index])
            switch place.flatMap({ results[$0] }) {
            case .success(let changed):
                accepted += 1
                item.integer("status", 200)
                if case .unchanged = changed.outcome { item.bool("unchanged", true) }
                item.raw("task", grant.visible(taskJSON: changed.events.first?.data ?? changed.outcome.task.json,
                                               parentID: changed.outcome.task.parentID))
            case .failure(let error):
                let problem = errors.problem(for: error, request)
                metrics.updatesRefused.add([UpdateKind.progress.name, problem.code])
                item.integer("status", Int64(problem.status))
                item.raw("problem", problem.json)
            }
            item.finishAppending(into: &body)
            // Room for the rest at the first item's size: the body (200 tasks, ~140 KiB) is
            // not copied again each time it doubles.
            if index == 0 { body.reserveCapacity(body.count * places.count + 2) }
        }
        if accepted > 0 { metrics.updatesAccepted.add(.progress, accepted) }
        body.appendRaw("]}")
        return .json(200, bytes: body.bytes)
    }

    /// Answers an update refused with `error`, counting it by its problem's code.
    private static func refuseUpdate(_ kind: UpdateKind, _ error: any Error, _ request: HTTPRequest, _ responder: any Responder,
                                     errors: ErrorReplies, metrics: ServiceMetrics) {
        let problem = errors.problem(for: error, request)
        metrics.updatesRefused.add([kind.name, problem.code])
        responder.respond(problem.response)
    }

    // MARK: - Request and reply helpers

    /// The task id and the parsed body of a change, or nil once the refusal is answered.
    private func parsed<Body>(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder, emptyBodyAllowed: Bool,
                              parse: (JSONValue) throws(TaskError) -> Body) -> (String, Body)? {
        do {
            return (try taskID(request, grant), try parse(try jsonBody(request, emptyAllowed: emptyBodyAllowed)))
        } catch {
            responder.respond(errors.response(for: error, request))
            return nil
        }
    }

    /// The reply to a change of one task: the task as written (`Headway-Unchanged` when
    /// nothing changed), as `grant` sees it (a parent outside its prefix hidden). The
    /// task's own last event already carries its JSON: not the first, which is an earlier
    /// state when one change made several (a finish past the due moment is `task.overdue`,
    /// still running, then `task.finished`).
    private static func taskReply(_ status: Int, _ outcome: TaskRules.Outcome, events: [TaskEvent],
                                  _ grant: Grant) -> HTTPResponse {
        var headers: [HTTPField] = []
        if case .unchanged = outcome { headers.append(HTTPField("Headway-Unchanged", "true")) }
        let json = events.last { $0.taskID == outcome.task.id }?.data ?? outcome.task.json
        return .json(status, grant.visible(taskJSON: json, parentID: outcome.task.parentID), headers: headers)
    }

    /// Answers `request` with what `body` reads, on a connection of the read pool: a
    /// failure becomes its problem; 503 `server_busy` when too many reads already wait or
    /// replies not yet taken leave no room (`UnreadReplyBudget`), 503 `shutting_down` once
    /// the pool is closing.
    private func read(_ request: HTTPRequest, _ responder: any Responder,
                      _ body: @escaping @Sendable (DatabaseReader) throws -> HTTPResponse) {
        reads.answer(request, responder, errors: errors, replies: unreadReplies, body)
    }

    /// The task id of the path: 400 unless valid, 404 outside the grant's task prefix
    /// (another prefix's task does not exist for it).
    private func taskID(_ request: HTTPRequest, _ grant: Grant) throws(TaskError) -> String {
        let id = request.pathParameters["id"] ?? ""
        guard TaskID.isValid(id) else { throw .invalidID(id) }
        guard grant.covers(id) else { throw .notFound(id) }
        return id
    }

    /// Logs an admin action, once done, with the token's id and name (never its secret).
    private func audit(_ event: String, _ grant: Grant, _ request: HTTPRequest, _ taskID: String) {
        logger.log(.info, event, ["request_id": request.requestID, "task_id": taskID,
                                  "token_id": grant.tokenID ?? "none", "token_name": grant.tokenName ?? "none"])
    }

    /// The body as JSON: 415 unless it is declared JSON, 400 unless it parses. An empty
    /// body counts as `{}` where `emptyAllowed`.
    private func jsonBody(_ request: HTTPRequest, emptyAllowed: Bool) throws -> JSONValue {
        if request.body.isEmpty {
            guard emptyAllowed else { throw TaskError.malformedJSON("This request needs a JSON object as its body.") }
            return .object([:])
        }
        let mediaType = Self.mediaType(request.header("content-type") ?? "")
        guard Self.isJSON(mediaType) else { throw Problem.unsupportedMediaType(mediaType) }
        switch JSONParser.parse(request.body) {
        case .success(let value): return value
        case .failure(let failure): throw TaskError.malformedJSON("The request body is not valid JSON: \(failure).")
        }
    }

    /// The body as `readPlain` reads it (a body of the plain shape it knows, declared JSON),
    /// or nil: `jsonBody` and the route's parser then read it, and judge what is wrong.
    private static func plainBody<Body>(_ request: HTTPRequest, _ readPlain: ((UnsafeBufferPointer<UInt8>) -> Body?)?) -> Body? {
        guard let readPlain, !request.body.isEmpty, isJSON(mediaType(request.header("content-type") ?? "")) else { return nil }
        return request.body.withUnsafeBufferPointer(readPlain)
    }

    /// Whether a media type is JSON's (`application/json`, or `application/…+json`).
    private static func isJSON(_ mediaType: String) -> Bool {
        mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json"))
    }

    /// The media type of a `Content-Type` value: before any `;`, without surrounding
    /// spaces or tabs, lower-cased.
    static func mediaType(_ contentType: String) -> String {
        // What clients send almost always, and then its own media type.
        if contentType == "application/json" { return contentType }
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        let type = contentType.utf8.prefix { $0 != UInt8(ascii: ";") }.drop(while: isBlank)
        let end = type.lastIndex { !isBlank($0) }.map { type.index(after: $0) } ?? type.startIndex
        return String(decoding: type[..<end], as: UTF8.self).lowercased()
    }

    private func reply<Value>(_ result: Result<Value, any Error>, _ request: HTTPRequest,
                              success: (Value) -> HTTPResponse) -> HTTPResponse {
        switch result {
        case .success(let value): success(value)
        case .failure(let error): errors.response(for: error, request)
        }
    }

    package init(writer: GroupCommitWriter, reads: ReadPool, store: TaskStore, clock: any WallClock, logger: Logger,
                 errors: ErrorReplies, metrics: ServiceMetrics, maximumBatchItems: Int, unreadReplies: UnreadReplies,
                 batchParsing: DispatchQueue) {
        self.writer = writer
        self.reads = reads
        self.store = store
        self.clock = clock
        self.logger = logger
        self.errors = errors
        self.metrics = metrics
        self.maximumBatchItems = maximumBatchItems
        self.unreadReplies = unreadReplies
        self.batchParsing = batchParsing
    }
}

extension ReadPool {
    /// Runs `body` on a connection of the pool and answers with what it returns (nil:
    /// `body` answers later itself), or with its failure's problem; 503 `server_busy` when
    /// too many reads already wait, or (given `replies`) when replies not yet taken by their
    /// clients leave no room for this client's (`UnreadReplyBudget`, asked when the read is
    /// about to run); 503 `shutting_down` once the pool is closing or when the stop
    /// refuses the read while it waits. Reads wait in turns by client
    /// (`HTTPRequest.client`). A read whose exchange ended while it
    /// waited (its client went away) is not run: nobody would take its answer (it is
    /// answered 499, "client closed request", which is never sent).
    func answer(_ request: HTTPRequest, _ responder: any Responder, errors: ErrorReplies, replies: UnreadReplies? = nil,
                _ body: @escaping @Sendable (DatabaseReader) throws -> HTTPResponse?) {
        // Set by the exchange's end (a daemon's thread), read by the read's thread.
        let over = Locked(false)
        responder.onComplete { _ in over.withLock { $0 = true } }
        let address = request.clientAddress
        do throws(ReadPool.Refusal) {
            try submit({ reader in
                // Nobody takes this answer: it only tells the server that the request is
                // done (a stop waits until every request handed over has been answered).
                guard !over.withLock({ $0 }) else { return responder.respond(HTTPResponse(status: 499)) }
                if let (admitted, clientBytes, totalBytes) = replies?.admits(address), !admitted {
                    let problem = Problem.repliesUnread(clientBytes: clientBytes, totalBytes: totalBytes)
                    return responder.respond(errors.response(for: problem, request))
                }
                do {
                    if let response = try body(reader) { responder.respond(response) }
                } catch {
                    responder.respond(errors.response(for: error, request))
                }
            }, client: request.client, refused: {
                responder.respond(errors.response(for: Problem.shuttingDown, request))
            })
        } catch .busy {
            responder.respond(errors.response(for: Problem.serverBusy(waitingReads: maximumWaiting), request))
        } catch {
            responder.respond(errors.response(for: Problem.shuttingDown, request))
        }
    }
}
