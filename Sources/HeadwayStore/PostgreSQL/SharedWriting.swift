import Dispatch
import Foundation
import HeadwayCore
import Lifecycle
import Synchronization

/// What a writer does around each batch besides running its jobs: nothing on SQLite,
/// where it is the database's only writer; `SharedWriting` on PostgreSQL, where other
/// daemons write the same database. Called on the writer thread, inside the batch's
/// transaction (a throw loses the batch, as a failed job's transaction would).
public protocol BatchCoordinator: Sendable {
    /// First in each batch's transaction, before its jobs; other writers' committed
    /// changes go to `events`. With `orderFirst` the batch takes its place in the writers'
    /// order now; else its jobs run ahead of it, until a statement needs it or the batch
    /// ends (`orderBeforeWriting`), and a batch that then finds its reads outrun by another
    /// writer fails with `DatabaseError.orderMoved`, to run again with `orderFirst`.
    func batchBegins(in database: Database, publishing events: (any TaskEventSink)?, orderFirst: Bool) throws
    /// After the jobs, before the held writes: the batch takes its place in the order if
    /// it ran ahead of it and `changedRows` (or handed out numbers). It may leave the
    /// pipeline begun (`Database.pipelineUntilCommit`).
    func orderBeforeWriting(in database: Database, changedRows: Bool) throws
    /// Whether the batch failed with `error` because it ran ahead of the order and lost it:
    /// it is run again, taking the order first. Asked before `batchEnded`.
    func lostOrder(_ error: any Error) -> Bool
    /// `events` numbered as committed: numbers handed out ahead of the order move up past
    /// the changes other writers committed meanwhile. For the batch just committed.
    func final(_ events: [TaskEvent]) -> [TaskEvent]
    /// Last before `COMMIT`; `changedRows` tells whether the batch's jobs changed rows.
    func batchEnds(in database: Database, changedRows: Bool) throws
    /// After the batch, committed or not (before its jobs' completions are called).
    func batchEnded(committed: Bool, in database: Database)
    /// Instead of a batch, when the writer has only catch-up requests to run
    /// (`GroupCommitWriter.submitCatchUp`): outside any transaction; other writers'
    /// committed changes go to `events`.
    func catchUp(in database: Database, publishing events: (any TaskEventSink)?) throws
    /// Seconds, summed over batches, from taking what orders all writers' batches to the
    /// end of the batch's `COMMIT` (or rollback).
    var orderingLockSeconds: Double { get }
    /// Batches run again because they ran ahead of the order and another writer wrote a
    /// task they read meanwhile.
    var lostOrders: Int { get }
}

/// How one of several daemons writes to a shared PostgreSQL database so that changes keep
/// one global order, with no number skipped by a reader, and its cache of tasks stays exact.
///
/// Every batch that writes locks the one row of `stream_state` (`SELECT … FOR UPDATE`),
/// which holds the latest change number committed and a generation that moves with every
/// batch that wrote. The lock is held until the batch commits, so batches of all daemons
/// commit one at a time, each numbering its changes after the last one committed: numbers
/// are handed out in commit order, and no change numbered below another can commit after it.
///
/// The lock is taken as late as the batch allows (`takeOrder`, through `Database.orderGate`):
/// its jobs run ahead of it against the cache, numbering from the latest number committed
/// when the batch began, and the cache notes the tasks they read and write; the first
/// statement other than a read of a task by id (the held writes at the batch's end, most
/// often) takes the lock first. If other daemons committed meanwhile and wrote one of the
/// batch's tasks (or one of their generations names none), the batch lost its order: it is
/// rolled back and runs again holding the lock from its start (`orderFirst`). Otherwise its
/// numbers move up past theirs (`ChangeCounter.shiftAhead`), and it goes on holding the lock.
/// Holding the lock, the batch reads committed data only (`READ COMMITTED`, every statement
/// sees the previous holder's commit), and:
/// - if the generation moved since this daemon's last batch, other daemons wrote: the
///   tasks they wrote are forgotten from the task cache, and only those. Each batch that
///   moves the generation names every task it wrote, with a number or quietly (an
///   ancestor's signal time, retention's count of children), in `written_tasks` under its
///   generation; a daemon reads the names of the generations since the one its cache is
///   exact for, or forgets its whole cache when one of them is missing (pruned, or a batch
///   of a build that names none) or there are more than `writtenGenerationsRead`;
/// - the rows the change feed brought are remembered as committed (`TaskCache.refresh`):
///   those read holding the lock at once, those read before it (or by a catch-up) when no
///   batch of a later generation than the one read just before them wrote their task;
/// - the change counter continues from the row's latest number (the batch's numbers moved
///   up past it, when its jobs ran ahead);
/// - the changes numbered between what this daemon has delivered and that number (other
///   daemons' changes, committed) are read from the change feed, a bounded page at a
///   time, and handed to the writer's `TaskEventSink` before any of this batch's own
///   events, so the event broker gets every change in order.
///
/// Most of that reading is done before the batch's jobs run, for what was committed by
/// then (the feed up to its latest number, the names up to its generation); under the
/// lock only what committed meanwhile remains.
///
/// A batch that wrote sets the row's latest number and generation before it commits, names
/// the tasks it wrote, and sends `NOTIFY headway_changes` with its latest number, in one
/// statement: the other daemons' listeners (`ChangeListener`) then ask their writers to
/// catch up (`catchUp`: a read without the lock, between batches). The notification is
/// only a wake-up: a lost one costs latency (the listener also looks every second), never
/// a change.
public final class SharedWriting: BatchCoordinator, OrderGate {
    /// The notification channel.
    public static let channel = "headway_changes"
    /// Rows read per table and page when reading other daemons' changes.
    static let pageRows = 1_000
    /// A cache more generations behind than this is forgotten whole: reading what so many
    /// batches wrote would cost more, under the lock, than reading again the tasks used.
    static let writtenGenerationsRead: Int64 = 256
    /// The generations whose tasks `written_tasks` keeps: every `writtenPruneInterval`-th
    /// batch deletes the rows older than this many generations.
    static let writtenGenerationsKept: Int64 = 4_096
    static let writtenPruneInterval: Int64 = 1_024

    private struct State {
        /// The generation this daemon's cache of tasks is exact for (-1: none).
        var generationSeen: Int64 = -1
        /// The generation the row will hold if the open batch commits.
        var generationAfterBatch: Int64 = -1
        /// The row's latest change number when the open batch locked it.
        var lastAtBatchStart: Int64 = 0
        /// Tasks read from the change feed without the lock since the last batch, each with
        /// the generation read just before it: its row is the committed one unless a batch
        /// of a later generation wrote it. Kept for the next batch, which knows.
        var readOutsideLock: [String: (generation: Int64, task: TaskRecord)] = [:]
        /// When the open batch took the lock (`DispatchTime` nanoseconds), if it did.
        var lockedAt: UInt64?
        /// The generation the cache is exact for after the open batch lost its order (-1:
        /// none, forget it all), which rolls the batch back.
        var generationAtLostOrder: Int64 = -1
        /// Where the open batch delivers other daemons' changes.
        var events: (any TaskEventSink)?
        /// How many of the next batches take the order first: after a batch lost its order,
        /// the next ones would most likely lose it too (two daemons updating the same few
        /// tasks), and each loss runs a batch twice.
        var orderFirstBatches = 0
        /// When this daemon last saw another's commit (`DispatchTime` nanoseconds; 0: never):
        /// at a batch's start, or taking the order. A batch that begins `quietNanoseconds`
        /// after it takes the order last, in the pipeline of its writes (`movesTheRow`), with no
        /// round trip of its own, since most likely no one commits during it either.
        var othersLastSeen: UInt64 = 0
        /// Whether the open batch takes the order last, in its pipeline (`othersLastSeen`).
        var orderInPipeline = false
        /// The generation the open batch's `movesTheRow` expects (the one it began at).
        var pipelineGeneration: Int64 = -1
        /// How many batches the next loss makes take the order first: doubled by each loss
        /// in a row (up to `maximumOrderFirstBatches`), back to 1 after a batch that ran ahead
        /// and kept its order.
        var orderFirstAfterLoss = 1
    }

    private let changeCounter: ChangeCounter
    private let cache: TaskCache
    /// Used by the writer's thread only (its batches begin and end here).
    private let state = Locked(State())
    /// Every change numbered up to this is committed and delivered (or being delivered,
    /// on the writer thread, in order) by this daemon.
    private let delivered: Atomic<Int64>
    /// `writerSession`.
    private let writerSessionID = Atomic<Int32>(0)
    /// Nanoseconds the lock was held, in all (`orderingLockSeconds`).
    private let lockNanoseconds = Atomic<UInt64>(0)
    /// Batches that lost their order (`lostOrders`).
    private let losses = Atomic<Int>(0)
    /// The most batches in a row that take the order first after losses in a row.
    static let maximumOrderFirstBatches = 64

    /// How long after another daemon's commit was last seen a batch takes the order in its
    /// pipeline (`State.othersLastSeen`): while several daemons write, the one round trip
    /// saved would seldom make up for the batches run again.
    private let quietNanoseconds: UInt64

    /// The longest wait for any lock of a batch that takes the order last: far below the
    /// server's `deadlock_timeout` (1 s by default), so that when a daemon holding the
    /// order waits for one of the batch's rows, this batch gives way first.
    private let lockWaitMillisecondsWhenTakenLast: Int

    /// For the writer of a store with `changeCounter` and `cache`; `quietSeconds`: see
    /// `quietNanoseconds`; `lockWaitWhenTakenLast`: see `lockWaitMillisecondsWhenTakenLast`.
    public init(changeCounter: ChangeCounter, cache: TaskCache, quietSeconds: Double = 1, lockWaitWhenTakenLast: Double = 0.1) {
        quietNanoseconds = UInt64(quietSeconds * 1e9)
        lockWaitMillisecondsWhenTakenLast = max(1, Int(lockWaitWhenTakenLast * 1_000))
        self.changeCounter = changeCounter
        self.cache = cache
        delivered = Atomic(changeCounter.last)
        cache.notesWrittenTasks()
    }

    /// Every change up to this number has been delivered.
    public var deliveredThrough: Int64 { delivered.load(ordering: .acquiring) }

    /// The process id of the writer's server session as of its latest batch (0: none yet):
    /// the sender of this daemon's own notifications, which `ChangeListener` leaves alone.
    public var writerSession: Int32 { writerSessionID.load(ordering: .relaxed) }

    public var orderingLockSeconds: Double { Double(lockNanoseconds.load(ordering: .relaxed)) / 1e9 }

    public var lostOrders: Int { losses.load(ordering: .relaxed) }

    public func batchBegins(in database: Database, publishing events: (any TaskEventSink)?, orderFirst: Bool) throws {
        // The session that sends this batch's notification, if it writes (`batchEnds`): a
        // lost connection is made again only by a batch's `BEGIN`, before this.
        writerSessionID.store(database.postgres.sessionProcessID, ordering: .relaxed)
        var exactAt = state.withLock { $0.generationSeen }
        // The latest generation each task was written at, for every write after `knownAfter`.
        var written: [String: Int64] = [:]
        var knownAfter = exactAt
        // What is committed already is read before the lock, so that a daemon that was idle
        // while others wrote much does not hold them up while it reads; under the lock only
        // what committed meanwhile remains. (Read outside the lock, a task whose row changed
        // again after `committed` was read is left out: its newer change is read later,
        // coalesced, as the stream allows.)
        guard let (generation, committed) = try Self.position(in: database) else {
            throw DatabaseError(code: 1, message: "stream_state has no row", sql: nil)
        }
        try deliverChanges(through: committed, to: events, readAt: generation, in: database)
        if try !forgetWritten(after: exactAt, through: generation, noting: &written, in: database) {
            knownAfter = generation
        }
        exactAt = generation
        // The rows the feed brought since the last batch are the committed ones unless a
        // batch of a later generation wrote them; a generation after this one is seen
        // when the order is taken, and forgets them then.
        let readOutsideLock = state.withLock { state in
            if generation != state.generationSeen { state.othersLastSeen = DispatchTime.now().uptimeNanoseconds }
            state.generationAfterBatch = generation
            state.lastAtBatchStart = committed
            state.generationAtLostOrder = -1
            defer { state.readOutsideLock.removeAll() }
            return state.readOutsideLock
        }
        for (id, read) in readOutsideLock where read.generation >= knownAfter && written[id, default: 0] <= read.generation {
            cache.refresh(read.task, in: database)
        }
        changeCounter.continueFrom(committed)
        let orderFirst = state.withLock { state in
            state.events = events
            guard !orderFirst, state.orderFirstBatches > 0 else { return orderFirst }
            state.orderFirstBatches -= 1
            return true
        }
        if orderFirst {
            try takeOrder(in: database, ahead: false)
        } else {
            cache.noteReads()
            database.orderGate = self
        }
    }

    /// Through `Database.orderGate`: the batch ran ahead of the order, and takes it now.
    func takeOrder(in database: Database) throws {
        try takeOrder(in: database, ahead: true)
    }

    public func orderBeforeWriting(in database: Database, changedRows: Bool) throws {
        guard database.orderGate != nil else { return }
        // A batch that changed nothing needs no place in the order.
        guard changedRows || changeCounter.last != state.withLock({ $0.lastAtBatchStart }) else {
            cache.stopNotingReads()
            return database.orderGate = nil
        }
        let generation: Int64? = state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            guard state.othersLastSeen > 0, now &- state.othersLastSeen >= quietNanoseconds else { return nil }
            state.orderInPipeline = true
            state.pipelineGeneration = state.generationAfterBatch
            return state.generationAfterBatch
        }
        guard generation != nil else { return try database.passOrderGate() }
        // Most likely nothing moved, as in the last batch: the batch writes its rows with
        // the numbers it took, and the order is taken last, by the statement that moves
        // `stream_state` (`batchEnds`), which fails if another daemon committed since the
        // batch began (`lostOrder`); so the lock is held only for that statement and the
        // `COMMIT`, with no write of the batch and no round trip to this daemon in it.
        // Waiting for a lock meanwhile, the batch holds its tasks' rows: a daemon holding
        // the order may wait for one of them, so the batch's waits are kept short (a wait
        // that ends the batch ends with the order lost, and it runs again taking it first).
        database.orderGate = nil
        cache.stopNotingReads()
        database.pipelineUntilCommit()
        try database.run(Self.shortLockWaits, [.text("\(lockWaitMillisecondsWhenTakenLast)ms")])
        // Its answer, the transaction's id, travels at once, ahead of the others (which the
        // server sends together at the pipeline's end): a cut that loses the `COMMIT`'s
        // answer leaves the id known, and the commit is asked about (`fateOfLostCommit`).
        database.postgres.sendAnswersSoFar()
    }

    /// The first statement of a batch that takes the order last: its waits for any lock
    /// bounded (`lockWaitMillisecondsWhenTakenLast`), and its transaction's id told.
    static let shortLockWaits = "SELECT txid_current() AS \(PostgresConnection.transactionIDColumn),"
        + " set_config('lock_timeout', ?1, true)"

    public func lostOrder(_ error: any Error) -> Bool {
        if case WriterError.orderMoved = error { return true }
        guard let error = error as? DatabaseError else { return false }
        if error.orderMoved { return true }
        return state.withLock { state in
            guard state.orderInPipeline else { return false }
            // The generation moved (`movesTheRow` divides by zero), a row the set update
            // waited for was written by the writer holding the order (its check divides by
            // zero, `PostgresSetWrites.updateSQL`), or a lock waited for too long: the order
            // taken last was lost (`orderBeforeWriting`). (A row changed by a hand instead
            // fails the set update again, holding the order: that run falls back.)
            let moved = error.sqlState == "22012"
                && (error.sql == Self.movesTheRow || PostgresSetWrites.isSetUpdate(error.sql))
            guard moved || error.sqlState == "55P03" || error.sqlState == "40P01" else { return false }
            losses.add(1, ordering: .relaxed)
            // The cache stays exact for the generation the batch began at (nothing of the
            // batch was kept); the next batch finds the other's commit, and takes the order
            // in two steps, which can move its numbers instead of running again.
            state.generationAtLostOrder = state.pipelineGeneration
            state.othersLastSeen = DispatchTime.now().uptimeNanoseconds
            return true
        }
    }

    public func final(_ events: [TaskEvent]) -> [TaskEvent] { changeCounter.final(events) }

    /// Takes the order all writers share: locks `stream_state` until the transaction ends
    /// and brings the batch to its latest position. A batch that ran `ahead` of the order
    /// (from `batchBegins`' position, through `Database.orderGate`) finds what other
    /// daemons committed since: if they wrote a task it read or wrote, it throws
    /// `DatabaseError.lostOrder()` (the batch runs again, taking the order first); else the
    /// numbers it handed out move up past theirs (`ChangeCounter.shiftAhead`; the held rows
    /// with them, `TaskCache.moveNumbers`, and the events as they are published, `final`),
    /// and its jobs go on holding the order. Either way, the changes they committed are
    /// delivered before any of this batch's.
    private func takeOrder(in database: Database, ahead: Bool) throws {
        let (generationSeen, lastSeen, events) = state.withLock { ($0.generationAfterBatch, $0.lastAtBatchStart, $0.events) }
        guard let (generation, last, transaction) = try Self.lockedPosition(in: database) else {
            throw DatabaseError(code: 1, message: "stream_state has no row", sql: nil)
        }
        database.postgres.noteTransactionID(transaction)
        state.withLock { $0.lockedAt = DispatchTime.now().uptimeNanoseconds }
        if generation != generationSeen {
            var written: [String: Int64] = [:]
            let named = try forgetWritten(after: generationSeen, through: generation, noting: &written, in: database)
            if ahead && (!named || cache.readOrWroteAny(of: written.keys)) {
                losses.add(1, ordering: .relaxed)
                state.withLock { state in
                    // The cache is exact for `generation` when the names were all read.
                    state.generationAtLostOrder = named ? generation : -1
                    state.orderFirstBatches = state.orderFirstAfterLoss
                    state.orderFirstAfterLoss = min(2 * state.orderFirstAfterLoss, Self.maximumOrderFirstBatches)
                }
                throw DatabaseError.lostOrder()
            }
            if ahead {
                cache.moveNumbers(changeCounter.shiftAhead(from: lastSeen, to: last))
            } else {
                changeCounter.continueFrom(last)
            }
        }
        cache.stopNotingReads()
        state.withLock { state in
            if generation != generationSeen { state.othersLastSeen = DispatchTime.now().uptimeNanoseconds }
            state.generationAfterBatch = generation
            state.lastAtBatchStart = last
            if ahead { state.orderFirstAfterLoss = 1 }
        }
        try deliverChanges(through: last, to: events, readAt: nil, in: database)
    }

    /// The generation and latest change number of `stream_state`.
    private static func position(in database: Database) throws -> (generation: Int64, last: Int64)? {
        try database.rows("SELECT generation, last_change FROM stream_state WHERE singleton = 1") { ($0.int(0), $0.int(1)) }
            .first
    }

    /// The same, the row locked until the transaction ends, and the transaction's id (which
    /// locking the row assigns it anyway): what the connection asks about if the answer
    /// to the batch's `COMMIT` is lost with it (`PostgresConnection.noteTransactionID`).
    private static func lockedPosition(in database: Database) throws -> (generation: Int64, last: Int64, transaction: Int64)? {
        try database.rows("SELECT generation, last_change, txid_current() FROM stream_state WHERE singleton = 1 FOR UPDATE") {
            ($0.int(0), $0.int(1), $0.int(2))
        }.first
    }

    /// Brings the cache, exact for generation `exactAt` (-1: not known), to `generation`:
    /// forgets the tasks that the batches of the generations between wrote, as
    /// `written_tasks` names them, noting in `written` the latest generation each was
    /// written at. Returns false, having forgotten every task, when they are not all named
    /// (`exactAt` not known, too far behind, or a row missing).
    private func forgetWritten(after exactAt: Int64, through generation: Int64, noting written: inout [String: Int64],
                               in database: Database) throws -> Bool {
        guard generation != exactAt else { return true }
        guard exactAt >= 0, generation > exactAt, generation - exactAt <= Self.writtenGenerationsRead else {
            cache.forgetAll()
            return false
        }
        // A row per task named, and one without for a batch that named none.
        let rows = try database.rows("""
            SELECT w.generation, named.id FROM written_tasks AS w LEFT JOIN LATERAL unnest(w.ids) AS named(id) ON true
            WHERE w.generation > ?1 AND w.generation <= ?2
            """, [.integer(exactAt), .integer(generation)]) { ($0.int(0), $0.optionalText(1)) }
        var generations = Set<Int64>()
        var ids: [String] = []
        for (writtenAt, id) in rows {
            generations.insert(writtenAt)
            guard let id else { continue }
            ids.append(id)
            written[id] = max(written[id, default: writtenAt], writtenAt)
        }
        guard generations.count == generation - exactAt else {
            cache.forgetAll()
            return false
        }
        cache.forget(writtenElsewhere: ids)
        return true
    }

    /// Delivers the committed changes numbered above those delivered and up to `last` to
    /// `events`, a page at a time (the writer thread is the only caller); the tasks read
    /// are remembered as committed when read holding the lock (`readAt` nil), else kept
    /// for the next batch with `readAt`, the generation read before them.
    private func deliverChanges(through last: Int64, to events: (any TaskEventSink)?, readAt generation: Int64?,
                                in database: Database) throws {
        var from = delivered.load(ordering: .acquiring)
        guard last > from else { return }
        while from < last {
            let page = try ChangeFeed.changes(after: from, through: last, limit: Self.pageRows, in: database)
            if !page.events.isEmpty { events?.publish(page.events) }
            from = page.complete
            // Delivered, whatever happens to this batch: these changes are committed.
            delivered.store(from, ordering: .releasing)
            guard let generation else {
                // No other writer commits while this batch holds the lock.
                for task in page.tasks { cache.refresh(task, in: database) }
                continue
            }
            state.withLock { state in
                for task in page.tasks { state.readOutsideLock[task.id] = (generation, task) }
                // Only a help: past the cache's size, the tasks are read again when needed.
                if state.readOutsideLock.count > cache.capacity { state.readOutsideLock.removeAll() }
            }
        }
    }

    /// Delivers what other daemons committed, without the lock: numbers up to the row's
    /// latest are all committed, and a row only moves to higher numbers, so reading the
    /// range page by page misses nothing that is not read later at its newer number.
    public func catchUp(in database: Database, publishing events: (any TaskEventSink)?) throws {
        guard let (generation, committed) = try Self.position(in: database) else { return }
        try deliverChanges(through: committed, to: events, readAt: generation, in: database)
    }

    public func batchEnds(in database: Database, changedRows: Bool) throws {
        let last = changeCounter.last
        let written = cache.takeWritten()
        guard changedRows || last != state.withLock({ $0.lastAtBatchStart }) else { return }
        let generation = state.withLock { $0.generationAfterBatch }
        try database.run(Self.movesTheRow, [.integer(last), .text(Self.arrayLiteral(written)), .integer(generation)])
        state.withLock { $0.generationAfterBatch += 1 }
    }

    /// One statement: the row moved to the batch's latest number and the next generation,
    /// the tasks written named under it (the oldest names deleted now and then), and the
    /// notification sent at commit. It takes the order when the batch did not before
    /// (`orderBeforeWriting`), and divides by zero when the generation is no longer the
    /// one the batch numbered after (`?3`): another daemon committed meanwhile. It tells
    /// the transaction's id, as `lockedPosition` does, and when the server took the lock
    /// (`PostgresConnection.lockedAtColumn`).
    static let movesTheRow = """
        WITH moved AS (UPDATE stream_state SET last_change = ?1, generation = generation + 1
                       WHERE singleton = 1 AND generation = ?3
                       RETURNING last_change, generation, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint AS locked_at),
             named AS (INSERT INTO written_tasks (generation, ids) SELECT generation, ?2::text[] FROM moved),
             pruned AS (DELETE FROM written_tasks
                        WHERE (SELECT generation % \(writtenPruneInterval) = 0 FROM moved)
                        AND generation <= (SELECT generation - \(writtenGenerationsKept) FROM moved))
        SELECT txid_current() / (count(*) = 1)::int AS \(PostgresConnection.transactionIDColumn),
               max(locked_at) AS \(PostgresConnection.lockedAtColumn)
        FROM moved, LATERAL pg_notify('\(channel)', moved.last_change::text)
        """

    public func batchEnded(committed: Bool, in database: Database) {
        let (lockedAt, orderTakenLast) = state.withLock { state in
            // After a rollback the row is as it was, but this daemon's cache was forgotten
            // (the connection's rollback count moved) and its counter is reset next batch.
            state.generationSeen = committed ? state.generationAfterBatch : state.generationAtLostOrder
            state.generationAtLostOrder = -1
            state.events = nil
            defer {
                state.lockedAt = nil
                state.orderInPipeline = false
            }
            return (state.lockedAt, state.orderInPipeline)
        }
        if let lockedAt {
            lockNanoseconds.add(DispatchTime.now().uptimeNanoseconds &- lockedAt, ordering: .relaxed)
        } else if orderTakenLast, let lockedAt = database.postgres.lockTakenAtMicroseconds {
            // Taken by the server in the pipeline (`movesTheRow`): from its clock, the same
            // wall clock as this daemon's on one machine; on two, an estimate.
            let now = Int64(Date().timeIntervalSince1970 * 1e6)
            lockNanoseconds.add(UInt64(max(0, now - lockedAt)) * 1_000, ordering: .relaxed)
        }
        if !committed { _ = cache.takeWritten() }
        if committed { delivered.store(max(delivered.load(ordering: .acquiring), changeCounter.last), ordering: .releasing) }
    }

    /// `ids` as a PostgreSQL array's text (`{"a","b \\"c\\""}`), each element quoted.
    static func arrayLiteral(_ ids: [String]) -> String {
        var literal = ArrayLiteral()
        for id in ids { literal.append(.text(id)) }
        return literal.finish()
    }
}
