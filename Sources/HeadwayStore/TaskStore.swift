import Lifecycle
import Foundation
import Synchronization
import HeadwayCore

/// Hands out change numbers: each change of a task (or deletion) takes the next one, the
/// global order of changes and the event stream's `id`. Loaded from the database at start,
/// so numbers go on rising across restarts. Used by the writer thread; readable anywhere.
public final class ChangeCounter: Sendable {
    private let latest: Atomic<Int64>
    /// How the numbers handed out ahead of the writers' order moved when the batch took it
    /// (`shiftAhead`), until the next batch begins. Used by the writer thread only.
    private let shift = Locked<NumberShift?>(nil)

    public init(last: Int64) { latest = Atomic(last) }

    /// Loads the position of `database`.
    public convenience init(database: Database) throws(DatabaseError) {
        self.init(last: try ChangeFeed.position(in: database).last)
    }

    /// The latest number handed out.
    public var last: Int64 { latest.load(ordering: .relaxed) }

    fileprivate func next() -> Int64 { latest.add(1, ordering: .relaxed).newValue }

    /// Gives back the numbers handed out after `mark` (their changes were rolled back); a
    /// mark taken before the numbers moved (`shiftAhead`) moves with them.
    fileprivate func rewind(to mark: Int64) {
        let mark = shift.withLock { shift -> Int64 in
            guard let moved = shift, moved.contains(mark, orItsStart: true) else { return mark }
            // The numbers above `mark` are given back: those handed out again are not moved.
            shift = NumberShift(after: moved.after, through: mark, by: moved.by)
            return mark + moved.by
        }
        latest.store(mark, ordering: .relaxed)
    }

    /// Continues from `last`, the latest number committed by every writer of a shared
    /// database (`SharedWriting`).
    func continueFrom(_ last: Int64) {
        shift.withLock { $0 = nil }
        latest.store(last, ordering: .relaxed)
    }

    /// The numbers handed out after `start` were handed out ahead of the writers' order,
    /// which has reached `last` meanwhile: they move up by `last - start`, and the counter
    /// goes on after them. Returns the move (`final`, `TaskCache.moveNumbers`).
    func shiftAhead(from start: Int64, to last: Int64) -> NumberShift {
        let moved = NumberShift(after: start, through: self.last, by: last - start)
        shift.withLock { $0 = moved }
        latest.store(moved.through + moved.by, ordering: .relaxed)
        return moved
    }

    /// `number` as it is once the batch took the order: a number handed out ahead of it
    /// moved (`shiftAhead`).
    public func final(_ number: Int64) -> Int64 {
        shift.withLock { $0.map { $0.contains(number, orItsStart: false) ? number + $0.by : number } ?? number }
    }

    /// `events` numbered as they are once the batch took the order (`final`).
    public func final(_ events: [TaskEvent]) -> [TaskEvent] {
        guard let shift = shift.withLock({ $0 }), shift.by != 0 else { return events }
        return events.map { event in
            var event = event
            if shift.contains(event.changeNumber, orItsStart: false) { event.changeNumber += shift.by }
            return event
        }
    }
}

/// How a batch's numbers handed out ahead of the writers' order moved once it took it:
/// those above `after` and up to `through` went up by `by`.
struct NumberShift: Sendable, Equatable {
    let after: Int64
    let through: Int64
    let by: Int64

    /// Whether `number` is one that moved (or, with `orItsStart`, is `after` itself: a mark
    /// taken before the first of them, which the counter rewinds to).
    func contains(_ number: Int64, orItsStart: Bool) -> Bool {
        (orItsStart ? number >= after : number > after) && number <= through
    }
}

/// The tasks the writer read or wrote lately, exactly as stored, so that an update reads
/// its task without asking the database. Only the writer's connection writes tasks, and only
/// through `TaskStore`, so the cache stays exact provided that nothing a rolled-back
/// savepoint or transaction wrote is kept: whenever a rollback undoes changes
/// (`Database.rollbacks`, kept by the connection's transaction helpers, moves), everything
/// is forgotten. On a PostgreSQL database other daemons write too: when a batch finds
/// that others wrote since this one's last batch, `SharedWriting` forgets exactly the
/// tasks they wrote (each batch names every task it wrote, `takeWritten`, quiet writes
/// included) and remembers those the change feed brought as committed (`refresh`). Used by
/// the writer thread (its mutex is never contended).
///
/// It also holds the writer's changes of tasks back until the batch commits (`HeldWrites`,
/// once the writer's connection is given it, `GroupCommitWriter`'s `heldWrites`): a task
/// changed by many updates of one batch (dozens, under load) has its row written once, with
/// its latest values, and the history samples of the batch's changes are held with their
/// tasks. All are written at the batch's end by the dialect (`SQLDialect.writeHeldTasks`):
/// on SQLite an `UPDATE` per task and an `INSERT` per sample, prepared statements run in
/// process; on PostgreSQL one statement per table for the whole batch, whatever its number
/// of tasks (`PostgresSetWrites`). A held task is read from here (it is the task as the batch
/// left it). Statements that read tasks' rows or samples on the writer's connection must come
/// after `writeHeld`: `TaskStore` writes what is held before the walks of a cancel or delete,
/// the stall sweep, retention and a thinning of samples, and the connection before each
/// commit. Each savepoint keeps what it changed in an undo log, so a savepoint rolled back
/// gives back what was held before it.
public final class TaskCache: Sendable, HeldWrites {
    /// A task changed since the batch began, not written yet. Changed in place only by
    /// changes made in the savepoint that made it (`savepoint`): a savepoint's undo log
    /// keeps the one it replaced, as it was.
    private final class HeldWrite: @unchecked Sendable {  // touched only under the cache's lock
        /// The task as its row stores it.
        let stored: TaskRecord
        /// The task as the batch left it.
        var latest: TaskRecord
        /// The history samples its changes in the batch took, oldest first.
        var samples: [History.Sample]
        /// The savepoint it was made in (`Contents.savepoints`), 0 outside any.
        let savepoint: Int

        init(stored: TaskRecord, latest: TaskRecord, samples: [History.Sample], savepoint: Int) {
            self.stored = stored
            self.latest = latest
            self.samples = samples
            self.savepoint = savepoint
        }
    }

    /// An open savepoint: its number, and what `held` had for each task before the
    /// savepoint changed it, in order.
    private struct Savepoint {
        let number: Int
        var undo: [(id: String, before: HeldWrite?)] = []
    }

    private struct Contents {
        var tasks: [String: TaskRecord] = [:]
        var rollbacksSeen = 0
        var held: [String: HeldWrite] = [:]
        /// An empty dictionary with the room of an earlier batch's held writes, swapped in
        /// for `held` when they are written, so that a batch does not grow `held` again
        /// from nothing.
        var spareHeld: [String: HeldWrite] = [:]
        /// The open savepoints, innermost last.
        var savepoints: [Savepoint] = []
        var savepointsBegun = 0
        /// Whether the ids of the tasks written are noted (`notesWrittenTasks`).
        var notesWritten = false
        /// The tasks written (inserted, changed or deleted) since `takeWritten` last took
        /// them, whether their writes are held, made or rolled back since.
        var written: Set<String> = []
        /// Whether the ids of the tasks asked for are noted (`noteReads`).
        var notesReads = false
        /// The tasks asked for (found or not) since `noteReads`.
        var read: Set<String> = []

        /// Notes that the task with `id` is written.
        mutating func noteWritten(_ id: String) {
            if notesWritten { written.insert(id) }
        }

        /// The innermost open savepoint's number, 0 outside any.
        var savepoint: Int { savepoints.last?.number ?? 0 }

        mutating func forgetIfRolledBack(_ database: Database) {
            guard database.rollbacks != rollbacksSeen else { return }
            rollbacksSeen = database.rollbacks
            tasks.removeAll(keepingCapacity: true)
        }

        mutating func remember(_ task: TaskRecord, in database: Database, capacity: Int) {
            forgetIfRolledBack(database)
            if tasks.count >= capacity && tasks[task.id] == nil { tasks.removeAll(keepingCapacity: true) }
            tasks[task.id] = task
        }

        /// Holds `task`'s change over `previous` (as stored, when nothing is held for it yet),
        /// with its history sample, if it took one.
        mutating func hold(_ task: TaskRecord, previous: TaskRecord, sample: History.Sample?) {
            let current = held[task.id]
            if let current, current.savepoint == savepoint {
                current.latest = task
                if let sample { current.samples.append(sample) }
                return
            }
            if !savepoints.isEmpty { savepoints[savepoints.count - 1].undo.append((task.id, current)) }
            var samples = current?.samples ?? []
            if let sample { samples.append(sample) }
            held[task.id] = HeldWrite(stored: current?.stored ?? previous, latest: task, samples: samples, savepoint: savepoint)
        }
    }

    /// Used by the writer's thread only (its batches read, change and hold tasks here).
    private let contents = Locked(Contents())
    /// At most this many tasks are kept (then the cache starts afresh; held writes stay).
    public let capacity: Int

    public init(capacity: Int = 10_000) { self.capacity = capacity }

    /// The task as stored, or as the batch left it when its write is held; nil if unknown.
    fileprivate func task(_ id: String, in database: Database) -> TaskRecord? {
        contents.withLock { contents in
            if contents.notesReads { contents.read.insert(id) }
            if let held = contents.held[id] { return held.latest }
            contents.forgetIfRolledBack(database)
            return contents.tasks[id]
        }
    }

    /// Remembers a task as read from or written to `database`.
    fileprivate func remember(_ task: TaskRecord, in database: Database) {
        contents.withLock { contents in contents.remember(task, in: database, capacity: capacity) }
    }

    /// Remembers a task just inserted into `database`.
    fileprivate func inserted(_ task: TaskRecord, in database: Database) {
        contents.withLock { contents in
            contents.noteWritten(task.id)
            contents.remember(task, in: database, capacity: capacity)
        }
    }

    /// Writes `task` over `previous` (the task as `task(_:in:)` gave it), with the history
    /// `sample` its change took, if any: held until the commit when `database` holds its
    /// writes here and a transaction is open, else at once.
    fileprivate func write(_ task: TaskRecord, previous: TaskRecord, sample: History.Sample? = nil,
                           in database: Database) throws(DatabaseError) {
        contents.withLock { contents in contents.noteWritten(task.id) }
        guard database.heldWrites === self, database.isInsideTransaction else {
            try TaskRepository.update(task, previous: previous, in: database)
            if let sample { try History.insert([sample], in: database) }
            return remember(task, in: database)
        }
        contents.withLock { contents in contents.hold(task, previous: previous, sample: sample) }
        database.countHeldChange()
    }

    /// Writes every held change (`SQLDialect.writeHeldTasks`: each task's row once, with the
    /// columns that differ from the row, and every sample), then remembers the tasks as
    /// stored. If a write fails, everything stays held. On PostgreSQL, inside a pipeline
    /// (`Database.pipelineUntilCommit`) the statements are only sent: a failure is reported
    /// by the statement that reads their answers (the `COMMIT`), flagged `pipelined`.
    public func writeHeld(in database: Database) throws {
        // Their numbers must be final before they are written.
        if contents.withLock({ !$0.held.isEmpty }) { try database.passOrderGate() }
        var writes = contents.withLock { contents -> [String: HeldWrite] in
            guard !contents.held.isEmpty else { return [:] }
            // A savepoint rolled back gives them back, as the rows' writes are undone.
            if !contents.savepoints.isEmpty {
                contents.savepoints[contents.savepoints.count - 1].undo += contents.held.map { ($0.key, $0.value) }
            }
            var taken = [String: HeldWrite]()
            swap(&taken, &contents.spareHeld)
            swap(&taken, &contents.held)
            return taken
        }
        guard !writes.isEmpty else { return }
        do {
            try database.dialect.writeHeldTasks(writes.values.map { ($0.latest, $0.stored) },
                                                samples: writes.values.flatMap(\.samples), in: database)
        } catch {
            contents.withLock { contents in swap(&contents.held, &writes) }
            throw error
        }
        database.heldWritesMade()
        contents.withLock { contents in
            for write in writes.values { contents.remember(write.latest, in: database, capacity: capacity) }
            writes.removeAll(keepingCapacity: true)
            swap(&contents.spareHeld, &writes)
        }
    }

    public func savepointBegan() {
        contents.withLock { contents in
            contents.savepointsBegun += 1
            contents.savepoints.append(Savepoint(number: contents.savepointsBegun))
        }
    }

    public func savepointEnded(rolledBack: Bool) {
        contents.withLock { contents in
            guard let ended = contents.savepoints.popLast() else { return }
            if rolledBack {
                for (id, before) in ended.undo.reversed() { contents.held[id] = before }
            } else if !contents.savepoints.isEmpty {
                contents.savepoints[contents.savepoints.count - 1].undo += ended.undo
            }
        }
    }

    public func transactionEnded() {
        contents.withLock { contents in
            guard !contents.held.isEmpty || !contents.savepoints.isEmpty else { return }
            contents.held.removeAll(keepingCapacity: true)
            contents.savepoints.removeAll()
        }
    }

    /// Forgets a task whose row was deleted or changed by a statement of its own (after
    /// `writeHeld`: a write still held for it would outlive it).
    fileprivate func forget(_ id: String) {
        contents.withLock { contents in
            contents.noteWritten(id)
            contents.tasks.removeValue(forKey: id)
        }
    }

    /// Forgets every task: another daemon wrote to the database since they were read, and
    /// which tasks it wrote is not known.
    func forgetAll() { contents.withLock { $0.tasks.removeAll(keepingCapacity: true) } }

    /// Forgets the tasks with `ids`: another daemon wrote them since they were read.
    func forget(writtenElsewhere ids: some Sequence<String>) {
        contents.withLock { contents in
            for id in ids { contents.tasks.removeValue(forKey: id) }
        }
    }

    /// Remembers `task` as committed in `database` (read from the change feed: another
    /// daemon's change), unless the cache is full and does not hold it: a daemon need not
    /// keep every task the others write, and a full cache starts afresh when it must.
    func refresh(_ task: TaskRecord, in database: Database) {
        contents.withLock { contents in
            contents.forgetIfRolledBack(database)
            guard contents.tasks.count < capacity || contents.tasks[task.id] != nil else { return }
            contents.tasks[task.id] = task
        }
    }

    /// From now on, notes the tasks written, for `takeWritten` (the writer of a database
    /// other daemons write too).
    func notesWrittenTasks() { contents.withLock { $0.notesWritten = true } }

    /// From now on, notes the ids of the tasks asked for, until `takeReadAndWritten`: a
    /// batch that runs ahead of the writers' order learns which tasks it depends on.
    func noteReads() {
        contents.withLock { contents in
            contents.notesReads = true
            contents.read.removeAll(keepingCapacity: true)
        }
    }

    /// Whether a task with one of `ids` was asked for since `noteReads`, or written since
    /// `takeWritten`; stops noting reads.
    func readOrWroteAny(of ids: some Sequence<String>) -> Bool {
        contents.withLock { contents in
            contents.notesReads = false
            return ids.contains { contents.read.contains($0) || contents.written.contains($0) }
        }
    }

    /// Stops noting the tasks asked for.
    func stopNotingReads() {
        contents.withLock { $0.notesReads = false }
    }

    /// Moves the change numbers of the held tasks that `shift` moves (handed out ahead of
    /// the writers' order, which has moved on since), as they are and as each savepoint
    /// would give them back.
    func moveNumbers(_ shift: NumberShift) {
        guard shift.by != 0 else { return }
        contents.withLock { contents in
            var moved = Set<ObjectIdentifier>()
            func move(_ write: HeldWrite?) {
                guard let write, moved.insert(ObjectIdentifier(write)).inserted,
                      shift.contains(write.latest.changeNumber, orItsStart: false) else { return }
                write.latest.changeNumber += shift.by
            }
            for write in contents.held.values { move(write) }
            for savepoint in contents.savepoints { for entry in savepoint.undo { move(entry.before) } }
        }
    }

    /// The ids of the tasks written since the last call (in the batch about to commit, or
    /// rolled back), in no order; nothing is noted until `notesWrittenTasks` was called.
    func takeWritten() -> [String] {
        contents.withLock { contents in
            guard !contents.written.isEmpty else { return [] }
            defer { contents.written.removeAll(keepingCapacity: true) }
            return Array(contents.written)
        }
    }
}

extension TaskStore.Registered: CarriesTaskEvents {
    public var estimatedBytes: Int { task.json.utf8.count + events.estimatedBytes }
}

extension TaskStore.Changed: CarriesTaskEvents {
    public var estimatedBytes: Int { events.estimatedBytes }
}

extension TaskStore.Swept: CarriesTaskEvents {
    public var estimatedBytes: Int { events.estimatedBytes }
}

extension SubtreeChange: CarriesTaskEvents {}

/// The items of a batch of progress updates: the events of those applied, in order.
extension [Result<TaskStore.Changed, any Error>]: CarriesTaskEvents {
    public var events: [TaskEvent] { flatMap { (try? $0.get())?.events ?? [] } }
}

extension [Result<TaskStore.Changed, any Error>]: BatchSized {
    public var estimatedBytes: Int {
        reduce(0) { total, result in
            if case .success(let changed) = result { total + changed.estimatedBytes } else { total + 96 }
        }
    }
}

extension [TaskEvent] {
    /// About how many bytes these events hold (their data, ids and bookkeeping).
    var estimatedBytes: Int { reduce(0) { $0 + $1.data.utf8.count + $1.taskID.utf8.count + 96 } }
}

/// The task operations, each run by the writer inside one savepoint: read the task, apply
/// the pure rules (`TaskRules`, `StallRule`), write the result with its change number,
/// carry the change up to the task's ancestors, and return the events to publish once
/// committed. A rule violation throws a `TaskError` before anything is written, and the
/// numbers it took are given back.
///
/// No change costs more than the tree's limits allow: a registration is refused past
/// `limits` (depth, unfinished children per parent, tasks stored); a roll-up stops being a
/// change at the first ancestor whose progress, counts of children and `attention` do not
/// move (above it, only signal times are written, and published at most once a second,
/// see `TaskRules.rollUpStep`); a cancel or delete of a subtree reads and writes
/// each of its tasks once, in steps of at most `stepTasks` tasks (`SubtreeWalk`).
public struct TaskStore: Sendable {
    /// The stall timeout given to tasks registered without one.
    public var defaultStallTimeoutSeconds: Double
    /// Hands out change numbers (used on the writer thread only).
    public let changeCounter: ChangeCounter
    /// When the daemon started: no stall deadline falls earlier than a full timeout after it.
    public var graceStart: EpochMilliseconds

    /// The tasks read and written lately (used on the writer thread only).
    public let cache: TaskCache
    /// How deep, wide and many the tasks may be.
    public var limits: TreeLimits
    /// At most this many tasks are cancelled or deleted in one step of a subtree's walk.
    public var stepTasks: Int
    /// A step of a subtree's walk ends once its events hold about this many bytes.
    public var stepBytes: Int
    /// The webhooks told about changes: each change writes its deliveries here, in its
    /// own transaction (used on the writer thread only).
    public let webhooks: WebhookOutbox

    public init(changeCounter: ChangeCounter, defaultStallTimeoutSeconds: Double = 30, graceStart: EpochMilliseconds = 0,
                cache: TaskCache = TaskCache(), limits: TreeLimits = TreeLimits(), stepTasks: Int = 1_000,
                stepBytes: Int = 4 << 20, webhooks: WebhookOutbox = WebhookOutbox()) {
        self.webhooks = webhooks
        self.changeCounter = changeCounter
        self.stepTasks = stepTasks
        self.stepBytes = stepBytes
        self.cache = cache
        self.limits = limits
        self.defaultStallTimeoutSeconds = defaultStallTimeoutSeconds
        self.graceStart = graceStart
    }

    /// What a registration did.
    public struct Registered: Sendable, Equatable {
        public var task: TaskRecord
        /// True when the task was created, false when the same registration was repeated.
        public var created: Bool
        public var events: [TaskEvent]
    }

    /// What an update did, and the events to publish (the task's own first).
    public struct Changed: Sendable, Equatable {
        public var outcome: TaskRules.Outcome
        public var events: [TaskEvent]
    }

    /// What a sweep of stall deadlines did: the events of the flags raised or changed (and
    /// of the ancestors they rolled up into), and how many due tasks it looked at.
    public struct Swept: Sendable, Equatable {
        public var events: [TaskEvent]
        public var examined: Int
    }

    /// Registers a task, or answers a repeated identical registration with the task as it is
    /// (even past the limits, which only new tasks must respect).
    public func register(_ registration: Registration, now: EpochMilliseconds,
                         in database: Database) throws -> Registered {
        try numbered(now: now, in: database) {
            let id = registration.id ?? UUID().uuidString.lowercased()
            if let existing = try load(id, in: database) {
                return Registered(task: try TaskRules.reregister(registration, existing: existing), created: false, events: [])
            }
            var depth = 1
            var parentCancelRequested = false
            if let parentID = registration.parentID, parentID != id {
                guard let parent = try load(parentID, in: database) else { throw TaskError.parentNotFound(parentID) }
                try TaskRules.checkNewChild(of: parent, limits: limits)
                depth = parent.depth + 1
                parentCancelRequested = parent.cancelRequested
            }
            if try TaskRepository.storedCount(in: database) >= limits.maximumTasks {
                throw TaskError.storageFull(maximumTasks: limits.maximumTasks)
            }
            var task = try TaskRules.register(registration, id: id, now: now,
                                              defaultStallTimeoutSeconds: defaultStallTimeoutSeconds)
            task.depth = depth
            // A cancel cascades to children: one registered under a parent whose cancellation
            // was requested is part of work already being stopped, so it is told at once.
            task.cancelRequested = parentCancelRequested
            task.stallDeadline = StallRule.nextDeadline(task, graceStart: graceStart)
            try History.record(&task, at: now, in: database)
            stamp(&task, .created)
            try TaskRepository.insert(task, in: database)
            cache.inserted(task, in: database)
            var events = [TaskEvent(.created, task)]
            events += try rollUp(from: task.parentID, ChildrenChange(from: nil, to: task), childDelta: 1,
                                 now: now, in: database)
            return Registered(task: task, created: true, events: events)
        }
    }

    /// Applies a progress report.
    public func progress(_ id: String, _ update: ProgressUpdate, now: EpochMilliseconds,
                         in database: Database) throws -> Changed {
        try numbered(now: now, in: database) {
            try modify(id, .updated, output: update.output, now: now, in: database) { task throws(TaskError) in
                try TaskRules.progress(update, to: task, now: now)
            }
        }
    }

    /// Applies progress reports in order, in the one job of a batch request: each item's
    /// result is its change, or the error that refused it with nothing of it stored, and
    /// a refused item does not stop the others. Throws (nothing of the request is then
    /// stored) only when the writer's transaction itself is gone.
    ///
    /// An item is refused by a `TaskError` thrown before anything is written (`progress`);
    /// but a database error may still come after a write (in the roll-up to its
    /// ancestors, say), so each item must be undone alone. The writer's rule
    /// (`GroupCommitWriter.runBatch`) is applied to the items: they run inside one
    /// savepoint for the request, each without one; only if an item throws after changing
    /// rows, or after a statement failed, is that savepoint rolled back (with the change
    /// numbers taken) and every item run again in a savepoint of its own. A savepoint per
    /// item always would cost, on PostgreSQL, two round trips an item and a transaction
    /// with more than 64 subtransactions that wrote (which slows every session's
    /// snapshots); on SQLite, each item's savepoint copies every page the item touches into
    /// the sub-journal again, which passes SQLite's 64 KiB in memory after a few items and
    /// is then written to a temporary file: a quarter of the daemon's time under batches
    /// of 50 (docs/benchmarks.md, "Batch updates").
    public func progress(each items: [ProgressItem], now: EpochMilliseconds,
                         in database: Database) throws -> [Result<Changed, any Error>] {
        do {
            return try database.inSavepoint {
                try numbered { try progress(each: items, savepoints: false, now: now, in: database) }
            }
        } catch BatchItemFailure.afterWriting {
            guard database.isInsideTransaction else { throw WriterError.transactionLost }
            return try progress(each: items, savepoints: true, now: now, in: database)
        }
    }

    /// Why a request's items run again, each in a savepoint: one of them threw after writing.
    private enum BatchItemFailure: Error { case afterWriting }

    /// Applies each item, in a savepoint of its own when `savepoints`; without them, an
    /// item that throws after changing rows (or after a failed statement) throws
    /// `BatchItemFailure.afterWriting`.
    ///
    /// Without savepoints the items' changes are carried up to their ancestors once for the
    /// request, not once per item: the items are applied first, each parent's share of them
    /// summed, and each parent rolled up once with the sum (the same arithmetic, so the
    /// same fractions). So 200 shards reported at once under one parent rewrite the parent,
    /// and each ancestor above it, once, with one event each (its latest state), not 200
    /// times; the ancestors' events come after the items' and are returned with the last
    /// item applied. A roll-up that throws counts as an item that threw after writing: the
    /// items run again, each in its savepoint with its own roll-up, so the failure stays
    /// with the items it belongs to.
    private func progress(each items: [ProgressItem], savepoints: Bool, now: EpochMilliseconds,
                          in database: Database) throws -> [Result<Changed, any Error>] {
        var results: [Result<Changed, any Error>] = []
        results.reserveCapacity(items.count)
        var parentShares = ParentShares()
        for item in items {
            let changesBefore = database.totalChanges
            do {
                if savepoints {
                    results.append(.success(try database.inSavepoint { try progress(item.id, item.update, now: now, in: database) }))
                } else {
                    let (changed, share) = try progressAlone(item.id, item.update, now: now, in: database)
                    if let share { parentShares.add(share.change, to: share.parentID) }
                    results.append(.success(changed))
                }
            } catch {
                // SQLite ended the transaction itself (a full disk, say): the whole request is lost.
                guard database.isInsideTransaction else { throw error }
                if !savepoints && (database.totalChanges != changesBefore || database.transactionFailed) {
                    throw BatchItemFailure.afterWriting
                }
                results.append(.failure(error))
            }
        }
        guard !parentShares.ordered.isEmpty else { return results }
        let ancestorEvents: [TaskEvent]
        do {
            ancestorEvents = try numbered {
                let events = try parentShares.ordered.flatMap { parentID, change in
                    try rollUp(from: parentID, change, now: now, in: database)
                }
                try recordDeliveries(events, now: now, in: database)
                return events
            }
        } catch {
            guard database.isInsideTransaction else { throw error }
            throw BatchItemFailure.afterWriting
        }
        if !ancestorEvents.isEmpty, let last = results.lastIndex(where: { (try? $0.get()) != nil }),
           case .success(var changed) = results[last] {
            changed.events += ancestorEvents
            results[last] = .success(changed)
        }
        return results
    }

    /// The parents of a batch's items, in the order first met, with the sum of their
    /// children's changes (weighted shares, counts by state, failures and stalls), to roll
    /// up once each.
    private struct ParentShares {
        private(set) var ordered: [(parentID: String, change: ChildrenChange)] = []
        private var index: [String: Int] = [:]

        mutating func add(_ change: ChildrenChange, to parentID: String) {
            if let position = index[parentID] {
                ordered[position].change += change
            } else {
                index[parentID] = ordered.count
                ordered.append((parentID, change))
            }
        }
    }

    /// Applies a progress report to its task alone; returns the change and, when the task
    /// has a parent and the change was applied, what the parent's roll-up needs.
    private func progressAlone(_ id: String, _ update: ProgressUpdate, now: EpochMilliseconds,
                               in database: Database) throws -> (Changed, (parentID: String, change: ChildrenChange)?) {
        try numbered {
            let (changed, share) = try modifyAlone(id, .updated, output: update.output, now: now, in: database) { task throws(TaskError) in
                try TaskRules.progress(update, to: task, now: now)
            }
            try recordDeliveries(changed.events, now: now, in: database)
            return (changed, share)
        }
    }

    /// Applies a heartbeat.
    public func heartbeat(_ id: String, _ heartbeat: Heartbeat, now: EpochMilliseconds,
                          in database: Database) throws -> Changed {
        try numbered(now: now, in: database) {
            try modify(id, .updated, output: heartbeat.output, now: now, in: database) { task throws(TaskError) in
                try TaskRules.heartbeat(heartbeat, to: task, now: now)
            }
        }
    }

    /// Finishes a task. Its events, in order: its `task.overdue` when it ran past its due
    /// moment and the sweep had not flagged it yet (`flagIfOverdue`), its `task.finished`,
    /// its `task.too_quick` when it succeeded sooner than its `min_seconds` (a change of its
    /// own, after the finish it judges), then its ancestors' roll-ups.
    public func finish(_ id: String, _ finish: Finish, now: EpochMilliseconds,
                       in database: Database) throws -> Changed {
        try numbered(now: now, in: database) {
            let overdue = try flagIfOverdue(id, now: now, in: database)
            let (finished, share) = try modifyAlone(id, .finished, output: finish.output, now: now,
                                                    in: database) { task throws(TaskError) in
                try TaskRules.finish(finish, task: task, now: now)
            }
            var changed = finished
            if case .applied(var task) = changed.outcome, task.tooQuick {
                let previous = task
                stamp(&task, .tooQuick)
                try save(&task, previous: previous, in: database)
                changed = Changed(outcome: .applied(task), events: changed.events + [TaskEvent(.tooQuick, task)])
            }
            changed.events = overdue + changed.events
            if let share { changed.events += try rollUp(from: share.parentID, share.change, now: now, in: database) }
            return changed
        }
    }

    /// Raises the overdue flag of the task with `id` when it is unfinished and due at `now`
    /// (`RunTimeRule`), as a change of its own, and returns its `task.overdue` (nothing
    /// otherwise). The sweep calls it for the tasks its index finds due; a finish calls it
    /// first, so that a task finishing past its due moment before the sweep came by (at most
    /// the sweep interval) still gets its `task.overdue`, just as if the sweep had. The flag
    /// is the task's own: it does not roll up to the ancestors.
    private func flagIfOverdue(_ id: String, now: EpochMilliseconds, in database: Database) throws -> [TaskEvent] {
        guard let task = try load(id, in: database), task.overdueAt != nil || RunTimeRule.sweepAt(task) != nil else {
            return []
        }
        var next = task
        let kind = RunTimeRule.apply(to: &next, now: now)
        if let kind { stamp(&next, kind) }
        // Without a flag, an `overdue_at` found out of step is put right, or the sweep would
        // find the task due again at once.
        if next != task { try save(&next, previous: task, in: database) }
        return kind.map { [TaskEvent($0, next)] } ?? []
    }

    /// The message of a task ended by `terminate`.
    public static let terminatedMessage = "terminated"

    /// Ends a task whose runner died or ignores its cancel: finishes it `canceled` with the
    /// message "terminated", and every unfinished task below it first, each after its own
    /// descendants (`TerminationWalk`), in bounded steps: this is the first, which refuses a
    /// task that finished otherwise (`task_finished`, 409) with nothing changed; run the
    /// rest with `continueTermination` (`terminateInSteps`), each a writer job of its own,
    /// so that other writes commit between them. The task itself ends in the last step,
    /// whose `outcome` is the reply's: `unchanged` for a task already `canceled` (its
    /// unfinished descendants are still ended); a task that a runner finished otherwise
    /// meanwhile is refused then (the descendants ended before stay ended).
    ///
    /// With `taskPrefix` (the token's, which covers `id`) the walk passes over another
    /// prefix's tasks and does not go below them, as a cancel's does.
    public func terminate(_ id: String, taskPrefix: String? = nil, now: EpochMilliseconds,
                          in database: Database) throws -> TerminationStep {
        try numbered(now: now, in: database) {
            guard let root = try load(id, in: database) else { throw TaskError.notFound(id) }
            if root.state.isFinished && root.state != .canceled { throw TaskError.taskFinished(id: id, state: root.state) }
            return try terminationStep(TerminationWalk(below: id, now: now, taskPrefix: taskPrefix), in: database)
        }
    }

    /// The next step of a terminate (see `terminate`).
    public func continueTermination(_ walk: TerminationWalk, in database: Database) throws -> TerminationStep {
        try numbered(now: walk.now, in: database) { try terminationStep(walk, in: database) }
    }

    /// The most tasks one step of a terminate ends: ending a task writes it, its history
    /// and each ancestor's roll-up, about ten times what a cancel request costs, so its
    /// steps are smaller than `stepTasks` (a 4,081-task subtree in a release build: about
    /// 30 ms a step of 128; the whole of it in one job, 1.4 s).
    public static let terminationStepTasks = 128

    /// One step of `walk`: at most `terminationStepTasks` (or `stepTasks`, if fewer) tasks
    /// ended and `stepTasks` rows read (rows of finished tasks, or of another prefix's, are
    /// read and passed over), or fewer once the events hold `stepBytes`.
    private func terminationStep(_ walk: TerminationWalk, in database: Database) throws -> TerminationStep {
        // The walk reads tasks' rows.
        try cache.writeHeld(in: database)
        var walk = walk
        var step = TerminationStep()
        var bytes = 0
        let ending = Finish(outcome: .canceled, message: Self.terminatedMessage)
        /// Ends `taskID` if it is unfinished (read as the cache holds it: its row may be older).
        func end(_ taskID: String) throws -> TaskStore.Changed {
            let overdue = try flagIfOverdue(taskID, now: walk.now, in: database)
            var changed = try modify(taskID, .finished, isSignal: false, now: walk.now, in: database) { task throws(TaskError) in
                try TaskRules.finish(ending, task: task, now: walk.now)
            }
            changed.events = overdue + changed.events
            step.count += changed.events.isEmpty ? 0 : 1
            bytes += changed.events.estimatedBytes
            step.events += changed.events
            return changed
        }
        let endsPerStep = min(stepTasks, Self.terminationStepTasks)
        while step.count < endsPerStep, step.rowsRead < stepTasks, bytes < stepBytes, let frame = walk.path.last {
            let wanted = min(64, stepTasks - step.rowsRead)
            let page = try TaskRepository.children(of: frame.id, afterKey: frame.afterKey, limit: wanted, in: database)
            step.rowsRead += page.count
            var descended = false
            for (child, key) in page {
                walk.path[walk.path.count - 1].afterKey = key
                guard walk.reaches(child.id) else { continue }
                if child.childCount > 0 {
                    // Its descendants first; the child itself once its frame is done.
                    walk.path.append(TerminationWalk.Frame(id: child.id))
                    descended = true
                    break
                }
                if !child.state.isFinished { _ = try end(child.id) }
            }
            guard !descended, page.count < wanted else { continue }
            // Every child of `frame` has been read: it ends now, after all of them.
            walk.path.removeLast()
            if frame.id == walk.rootID {
                guard let root = try load(frame.id, in: database) else { throw TaskError.notFound(frame.id) }
                step.outcome = try root.state == .canceled ? .unchanged(root) : end(frame.id).outcome
            } else if let task = try load(frame.id, in: database), !task.state.isFinished {
                _ = try end(frame.id)
            }
        }
        step.remaining = walk.isFinished ? nil : walk
        return step
    }

    /// Requests cancellation of a task, and the first step of its unfinished descendants'
    /// (see `continueWalk`). Only the task's own request is carried up to its ancestors;
    /// its descendants' requests are not carried up (every task between them and the task
    /// takes the request itself, at the same moment).
    ///
    /// With `taskPrefix` (the task prefix of the token asking, which covers `id`) only the
    /// descendants whose id starts with it are reached, and none below a task outside it
    /// (`SubtreeWalk`).
    public func cancel(_ id: String, taskPrefix: String? = nil, now: EpochMilliseconds,
                       in database: Database) throws -> SubtreeChange {
        try numbered(now: now, in: database) {
            // A cancel request is no signal of the runner: it is not carried up.
            let changed = try modify(id, .cancelRequested, isSignal: false, now: now, in: database) { task throws(TaskError) in
                try TaskRules.requestCancel(task, now: now)
            }
            var step = try walk(SubtreeWalk(.cancel, below: id, now: now, taskPrefix: taskPrefix), in: database)
            step.outcome = changed.outcome
            step.count += changed.events.isEmpty ? 0 : 1
            step.events = changed.events + step.events
            return step
        }
    }

    /// Deletes a task, leaving its tombstone (its parent's roll-up and count of children
    /// lose it), and the first step of its descendants (see `continueWalk`).
    ///
    /// With `taskPrefix` (the task prefix of the token asking, which covers `id`) the
    /// delete is refused (`AccessRefusal.subtreeOutsidePrefix`, nothing changed) when the
    /// subtree holds a task outside the prefix; checked here, in the first step's
    /// transaction, before anything is deleted. A task registered under the subtree by
    /// another token while later steps run is deleted with it, as without a prefix.
    public func delete(_ id: String, taskPrefix: String? = nil, now: EpochMilliseconds,
                       in database: Database) throws -> SubtreeChange {
        try numbered(now: now, in: database) {
            guard let root = try load(id, in: database) else { throw TaskError.notFound(id) }
            // Reads only ids and parents, which no held write changes: a refusal writes nothing.
            if let taskPrefix, root.childCount > 0,
               try TaskRepository.descendantOutside(prefix: taskPrefix, below: id, in: database) != nil {
                throw AccessRefusal.subtreeOutsidePrefix(prefix: taskPrefix, taskID: id)
            }
            try cache.writeHeld(in: database)
            var events = [try remove(root, now: now, in: database)]
            events += try rollUp(from: root.parentID, ChildrenChange(from: root, to: nil), childDelta: -1,
                                 now: now, in: database)
            var step = try walk(SubtreeWalk(.delete, below: id, now: now), in: database)
            step.count += 1
            step.events = events + step.events
            return step
        }
    }

    /// The next step of a cancel or delete of a subtree: at most `stepTasks` tasks, or
    /// fewer once their events hold `stepBytes`, each written once (a cancel request) or
    /// deleted with its tombstone. Run each step as a writer job of its own
    /// (`GroupCommitWriter.submitSteps`), so that other writes commit between them.
    public func continueWalk(_ walk: SubtreeWalk, in database: Database) throws -> SubtreeChange {
        try numbered(now: walk.now, in: database) { try self.walk(walk, in: database) }
    }

    /// One step of `walk`.
    private func walk(_ walk: SubtreeWalk, in database: Database) throws -> SubtreeChange {
        // The walk reads tasks' rows.
        try cache.writeHeld(in: database)
        var walk = walk
        var step = SubtreeChange(count: 0, events: [])
        var bytes = 0
        // Rows read and passed over (outside the walk's task prefix): bounded per step too.
        var passedOver = 0
        while step.count < stepTasks, passedOver < stepTasks, bytes < stepBytes, !walk.isFinished {
            // Pages small enough that a step ends close to its byte budget.
            let page = try walk.nextTasks(limit: min(64, stepTasks - step.count), in: database)
            passedOver += page.read - page.tasks.count
            for task in page.tasks {
                let event: TaskEvent
                switch walk.operation {
                case .cancel:
                    guard !task.state.isFinished, case .applied(var next) = try TaskRules.requestCancel(task, now: walk.now)
                    else { continue }
                    try write(&next, previous: task, .cancelRequested, now: walk.now, in: database)
                    event = TaskEvent(.cancelRequested, next)
                case .delete:
                    event = try remove(task, now: walk.now, in: database)
                }
                step.count += 1
                bytes += [event].estimatedBytes
                step.events.append(event)
            }
        }
        step.remaining = walk.isFinished ? nil : walk
        return step
    }

    /// Deletes one task with its history, leaves its tombstone, and returns its event.
    private func remove(_ task: TaskRecord, now: EpochMilliseconds, in database: Database) throws -> TaskEvent {
        // The tombstone's number is written by a statement: it must be final.
        try database.passOrderGate()
        let number = changeCounter.next()
        try TaskRepository.delete(task.id, in: database)
        cache.forget(task.id)
        try History.delete(task.id, in: database)
        if task.lastOutput != nil { try TaskOutput.delete(task.id, in: database) }
        try ChangeFeed.recordDeletion(task, changeNumber: number, at: now, in: database)
        return .deleted(changeNumber: number, taskID: task.id, parentID: task.parentID, createdAt: task.createdAt)
    }

    /// Raises (or changes) the stall flag of every task whose deadline has passed, at most
    /// `limit` of them, in deadline order, then the overdue flag of every unfinished task
    /// whose due moment has passed (`RunTimeRule`), at most `limit` of them, in that order;
    /// returns the events and how many were looked at (the larger of the two lists, so a
    /// full one is followed by another sweep). A stall flag raised is carried up to the
    /// task's ancestors (their counts of children and `attention`), not as a signal.
    public func sweep(now: EpochMilliseconds, limit: Int, in database: Database) throws -> Swept {
        try cache.writeHeld(in: database)
        return try numbered {
            let due = try TaskRepository.dueForStallCheck(at: now, limit: limit, in: database)
            var events: [TaskEvent] = []
            for row in due {
                // An earlier task of this sweep may have rolled up into this one: its
                // latest version is the cache's (held), not the row read above.
                guard let task = try load(row.id, in: database) else { continue }
                var next = task
                if let kind = StallRule.apply(to: &next, now: now, graceStart: graceStart, raising: true) {
                    stamp(&next, kind)
                    events.append(TaskEvent(kind, next))
                }
                // A deadline found early is moved to the exact one, or the sweeper would
                // find the task due again at once.
                try save(&next, previous: task, exactDeadline: true, in: database)
                let change = ChildrenChange(from: task, to: next)
                if let parentID = task.parentID, !change.isEmpty {
                    events += try rollUp(from: parentID, change, isSignal: false, now: now, in: database)
                }
            }
            let overdue = try TaskRepository.dueForOverdueCheck(at: now, limit: limit, in: database)
            for row in overdue { events += try flagIfOverdue(row.id, now: now, in: database) }
            try recordDeliveries(events, now: now, in: database)
            return Swept(events: events, examined: max(due.count, overdue.count))
        }
    }

    /// Forgets, quietly, at most `limit` finished tasks (with their history) that finished
    /// before `cutoff` and have no stored children, leaves first, and tombstones older than
    /// `cutoff`. A parent keeps what a forgotten child contributed: its share of the
    /// fraction, its count by state, its failure (only `child_count`, the children stored,
    /// goes down), so a parent that never finishes does not fill up with finished children;
    /// resuming from an id below the last change forgotten then gets a snapshot. Also
    /// forgets each webhook's finished deliveries beyond its latest 100.
    public func prune(finishedBefore cutoff: EpochMilliseconds, limit: Int, in database: Database) throws -> Int {
        try cache.writeHeld(in: database)
        let tasks = try TaskRepository.prunable(finishedBefore: cutoff, limit: limit, in: database)
        var forgottenThrough: Int64 = 0
        for task in tasks {
            try TaskRepository.delete(task.id, in: database)
            cache.forget(task.id)
            try History.delete(task.id, in: database)
            if task.lastOutput != nil { try TaskOutput.delete(task.id, in: database) }
            if let parentID = task.parentID {
                try TaskRepository.adjustChildCount(of: parentID, by: -1, in: database)
                cache.forget(parentID)
            }
            forgottenThrough = max(forgottenThrough, task.changeNumber)
        }
        let tombstones = try ChangeFeed.pruneTombstones(deletedBefore: cutoff, limit: limit, in: database)
        forgottenThrough = max(forgottenThrough, tombstones.through)
        if forgottenThrough > 0 { try ChangeFeed.forget(through: forgottenThrough, in: database) }
        let deliveries = try WebhookRepository.pruneFinished(in: database)
        return tasks.count + tombstones.count + deliveries
    }

    /// Runs one change at `now` and writes the deliveries of its events to the webhooks
    /// that want them, in the same transaction (`WebhookOutbox`); if it throws, the numbers
    /// it took are given back (its savepoint is rolled back by the writer, so they were
    /// never stored).
    private func numbered<Value: CarriesTaskEvents>(now: EpochMilliseconds, in database: Database,
                                                    _ operation: () throws -> Value) throws -> Value {
        try numbered {
            let value = try operation()
            try recordDeliveries(value.events, now: now, in: database)
            return value
        }
    }

    /// Writes the deliveries of `events` to the webhooks that want them (`WebhookOutbox.record`),
    /// an alert's ancestors read as this batch left them (the cache holds writes not yet made).
    private func recordDeliveries(_ events: [TaskEvent], now: EpochMilliseconds, in database: Database) throws {
        guard !events.isEmpty, webhooks.hasWebhooks else { return }
        // The deliveries store the events' numbers: they must be final.
        try database.passOrderGate()
        try webhooks.record(changeCounter.final(events), now: now, in: database) { id in try load(id, in: database) }
    }

    /// Runs one operation; if it throws, the numbers it took are given back (its savepoint
    /// is rolled back by the writer, so they were never stored).
    private func numbered<Value>(_ operation: () throws -> Value) throws -> Value {
        let mark = changeCounter.last
        do {
            return try operation()
        } catch {
            changeCounter.rewind(to: mark)
            throw error
        }
    }

    /// The task with `id` as stored: from the cache, else from the database (a read that
    /// need not wait for the writers' order: the cache notes the tasks asked for).
    private func load(_ id: String, in database: Database) throws -> TaskRecord? {
        if let task = cache.task(id, in: database) { return task }
        let task = try database.withoutOrder { () throws(DatabaseError) in try TaskRepository.find(id, in: database) }
        if let task { cache.remember(task, in: database) }
        return task
    }

    /// Writes a changed task over `previous` (as stored) and remembers it as stored: its
    /// stall deadline is kept when the new one is only a little later
    /// (`StallRule.deadlineToStore`), unless `exactDeadline`. `task` becomes the task as
    /// stored (changed in place: a copy of its fields to change would cost more).
    private func save(_ task: inout TaskRecord, previous: TaskRecord, exactDeadline: Bool = false,
                      sample: History.Sample? = nil, in database: Database) throws {
        if !exactDeadline { task.stallDeadline = StallRule.deadlineToStore(task, stored: previous.stallDeadline) }
        try cache.write(task, previous: previous, sample: sample, in: database)
    }

    /// The history sample of `task` at `now` (`History.sample`), to be written with its
    /// change (`save`). When the task then holds too many samples, what is held is written,
    /// the sample stored at once and the task's samples thinned, and nil is returned.
    private func historySample(_ task: inout TaskRecord, at now: EpochMilliseconds,
                               in database: Database) throws -> History.Sample? {
        guard let (sample, needsThinning) = History.sample(&task, at: now) else { return nil }
        guard needsThinning else { return sample }
        try cache.writeHeld(in: database)
        try History.insert([sample], in: database)
        task.historyPoints = try History.thin(task.id, in: database)
        return nil
    }

    /// Gives a change its number.
    private func stamp(_ task: inout TaskRecord, _ kind: TaskEventKind) {
        task.changeNumber = changeCounter.next()
        task.changeKind = kind
    }

    /// Applies `rule` to the task with `id`, writes the change and carries it up to the
    /// task's ancestors (`isSignal`: as a signal, the runner's activity).
    private func modify(_ id: String, _ kind: TaskEventKind, output: [String] = [], isSignal: Bool = true,
                        now: EpochMilliseconds, in database: Database,
                        _ rule: (TaskRecord) throws(TaskError) -> TaskRules.Outcome) throws -> Changed {
        var (changed, share) = try modifyAlone(id, kind, output: output, now: now, in: database, rule)
        if let share, isSignal || !share.change.isEmpty {
            changed.events += try rollUp(from: share.parentID, share.change, isSignal: isSignal, now: now, in: database)
        }
        return changed
    }

    /// Applies `rule` to the task with `id` and writes the change, without carrying it up;
    /// returns the change and, when it was applied to a task with a parent, the parent's
    /// id and what the change does to the parent (`ChildrenChange`), for `rollUp`. `output`
    /// (lines the runner sent, which the rule made the task's `lastOutput`) is appended to
    /// the task's tail when the change is applied: a repeated `seq` appends nothing again.
    private func modifyAlone(_ id: String, _ kind: TaskEventKind, output: [String] = [], now: EpochMilliseconds,
                             in database: Database, _ rule: (TaskRecord) throws(TaskError) -> TaskRules.Outcome)
        throws -> (Changed, (parentID: String, change: ChildrenChange)?) {
        guard let task = try load(id, in: database) else { throw TaskError.notFound(id) }
        guard case .applied(var written) = try rule(task) else { return (Changed(outcome: .unchanged(task), events: []), nil) }
        if !output.isEmpty {
            try TaskOutput.append(output, from: task.outputLines, to: id, at: now, in: database)
            written.outputLines = task.outputLines + Int64(output.count)
        }
        try write(&written, previous: task, kind, now: now, in: database)
        let changed = Changed(outcome: .applied(written), events: [TaskEvent(written.changeKind, written)])
        return (changed, task.parentID.map { ($0, ChildrenChange(from: task, to: written)) })
    }

    /// Writes a task's change of `kind` (a recovery when an update clears its stall flag),
    /// with its history sample and change number; `next` becomes the task as written
    /// (changed in place: a copy of its fields to change would cost more).
    private func write(_ next: inout TaskRecord, previous: TaskRecord, _ kind: TaskEventKind, now: EpochMilliseconds,
                       in database: Database) throws {
        let stallChange = StallRule.apply(to: &next, now: now, graceStart: graceStart, raising: false)
        var sample: History.Sample?
        if next.completed != previous.completed || next.total != previous.total || next.state != previous.state {
            sample = try historySample(&next, at: now, in: database)
        }
        stamp(&next, stallChange == .recovered && kind == .updated ? .recovered : kind)
        try save(&next, previous: previous, sample: sample, in: database)
    }

    /// Carries `change` of a child up through its ancestors, from its parent `parentID`
    /// (`isSignal`: the change is the child's activity, a signal for each ancestor). The
    /// parent's count of stored children moves by `childDelta`. An ancestor that changes as
    /// clients see it (its roll-up, counts of children, `attention`, or a signal due to be
    /// published: `TaskRules.rollUpStep`) gets a history sample when its fraction moved, a
    /// change number and a `task.updated` (`task.recovered` if the activity clears its
    /// stall flag). Otherwise its signal time and stall deadline (and its counts of
    /// failing or stalling children) are written without a change number or an event (it
    /// keeps the one of its last visible change), unless the signal clears its stall flag.
    /// Each ancestor passes on what its own change does to its parent; the walk stops where
    /// that is nothing and no signal goes further (at a finished ancestor, or one that had
    /// this signal already, and so had every ancestor above it).
    private func rollUp(from parentID: String?, _ change: ChildrenChange, isSignal: Bool = true, childDelta: Int = 0,
                        now: EpochMilliseconds, in database: Database) throws -> [TaskEvent] {
        var events: [TaskEvent] = []
        var currentID = parentID
        var (change, isSignal, childDelta) = (change, isSignal, childDelta)
        while let id = currentID, let stored = try load(id, in: database) {
            var parent = stored
            parent.childCount += childDelta
            var next: TaskRecord
            var isVisible: Bool
            switch TaskRules.rollUpStep(parent, change, isSignal: isSignal, now: now) {
            case .unchanged:
                // A finished parent still counts its stored children.
                if parent != stored { try save(&parent, previous: stored, in: database) }
                return events
            case .quiet(let quiet): (next, isVisible) = (quiet, false)
            case .changed(let changed): (next, isVisible) = (changed, true)
            }
            let stallChange = StallRule.apply(to: &next, now: now, graceStart: graceStart, raising: false)
            if isVisible || stallChange != nil {
                if !isVisible { next.updatedAt = now }
                let sample = next.fraction != stored.fraction ? try historySample(&next, at: now, in: database) : nil
                stamp(&next, stallChange == .recovered ? .recovered : .updated)
                try save(&next, previous: stored, sample: sample, in: database)
                events.append(TaskEvent(next.changeKind, next))
            } else {
                try save(&next, previous: stored, in: database)
            }
            isSignal = isSignal && !stored.state.isFinished && stored.lastSignalAt < now
            change = ChildrenChange(from: stored, to: next)
            guard isSignal || !change.isEmpty else { return events }
            childDelta = 0
            currentID = stored.parentID
        }
        return events
    }
}
