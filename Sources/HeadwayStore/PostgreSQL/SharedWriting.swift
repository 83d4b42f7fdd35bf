import HeadwayCore
import Lifecycle
import Synchronization

/// What a writer does around each batch besides running its jobs: nothing on SQLite,
/// where it is the database's only writer; `SharedWriting` on PostgreSQL, where other
/// daemons write the same database. Called on the writer thread, inside the batch's
/// transaction (a throw loses the batch, as a failed job's transaction would).
public protocol BatchCoordinator: Sendable {
    /// First in each batch's transaction, before its jobs; other writers' committed
    /// changes go to `events`.
    func batchBegins(in database: Database, publishing events: (any TaskEventSink)?) throws
    /// Last before `COMMIT`; `changedRows` tells whether the batch's jobs changed rows.
    func batchEnds(in database: Database, changedRows: Bool) throws
    /// After the batch, committed or not (before its jobs' completions are called).
    func batchEnded(committed: Bool)
    /// Instead of a batch, when the writer has only catch-up requests to run
    /// (`GroupCommitWriter.submitCatchUp`): outside any transaction; other writers'
    /// committed changes go to `events`.
    func catchUp(in database: Database, publishing events: (any TaskEventSink)?) throws
}

/// How one of several daemons writes to a shared PostgreSQL database so that changes keep
/// one global order, with no number skipped by a reader, and its cache of tasks stays exact.
///
/// Every batch first locks the one row of `stream_state` (`SELECT … FOR UPDATE`), which
/// holds the latest change number committed and a generation that moves with every batch
/// that wrote. The lock is held until the batch commits, so batches of all daemons commit
/// one at a time, each numbering its changes after the last one committed: numbers are
/// handed out in commit order, and no change numbered below another can commit after it.
/// Holding the lock, the batch reads committed data only (`READ COMMITTED`, every
/// statement sees the previous holder's commit), and:
/// - if the generation moved since this daemon's last batch, another daemon wrote: the
///   task cache is forgotten (its rows may be stale);
/// - the change counter continues from the row's latest number;
/// - the changes numbered between what this daemon has delivered and that number (other
///   daemons' changes, committed) are read from the change feed, a bounded page at a
///   time, and handed to the writer's `TaskEventSink` before any of this batch's own
///   events, so the event broker gets every change in order.
///
/// A batch that wrote sets the row's latest number and generation before it commits, and
/// sends `NOTIFY headway_changes` with its latest number: the other daemons' listeners
/// (`ChangeListener`) then ask their writers to catch up (`catchUp`: a read without the
/// lock, between batches). The notification is only a
/// wake-up: a lost one costs latency (the listener also looks every second), never a change.
public final class SharedWriting: BatchCoordinator {
    /// The notification channel.
    public static let channel = "headway_changes"
    /// Rows read per table and page when reading other daemons' changes.
    static let pageRows = 1_000

    private struct State {
        /// The generation this daemon's cache of tasks is exact for (-1: none).
        var generationSeen: Int64 = -1
        /// The generation the row will hold if the open batch commits.
        var generationAfterBatch: Int64 = -1
        /// The row's latest change number when the open batch locked it.
        var lastAtBatchStart: Int64 = 0
    }

    private let changeCounter: ChangeCounter
    private let cache: TaskCache
    /// Used by the writer's thread only (its batches begin and end here).
    private let state = Locked(State())
    /// Every change numbered up to this is committed and delivered (or being delivered,
    /// on the writer thread, in order) by this daemon.
    private let delivered: Atomic<Int64>

    /// For the writer of a store with `changeCounter` and `cache`.
    public init(changeCounter: ChangeCounter, cache: TaskCache) {
        self.changeCounter = changeCounter
        self.cache = cache
        delivered = Atomic(changeCounter.last)
    }

    /// Every change up to this number has been delivered.
    public var deliveredThrough: Int64 { delivered.load(ordering: .acquiring) }

    public func batchBegins(in database: Database, publishing events: (any TaskEventSink)?) throws {
        // What is committed already is read before the lock, so that a daemon that was idle
        // while others wrote much does not hold them up while it reads; under the lock only
        // what committed meanwhile remains. (Read outside the lock, a task whose row changed
        // again after `committed` was read is left out: its newer change is read later,
        // coalesced, as the stream allows.)
        if let committed = try database.scalar("SELECT last_change FROM stream_state WHERE singleton = 1") {
            try deliverChanges(through: committed, to: events, in: database)
        }
        let row = try database.rows("SELECT generation, last_change FROM stream_state WHERE singleton = 1 FOR UPDATE") {
            ($0.int(0), $0.int(1))
        }
        guard let (generation, last) = row.first else { throw DatabaseError(code: 1, message: "stream_state has no row", sql: nil) }
        let cacheIsStale = state.withLock { state in
            state.generationAfterBatch = generation
            state.lastAtBatchStart = last
            return state.generationSeen != generation
        }
        if cacheIsStale { cache.forgetAll() }
        changeCounter.continueFrom(last)
        try deliverChanges(through: last, to: events, in: database)
    }

    /// Delivers the committed changes numbered above those delivered and up to `last` to
    /// `events`, a page at a time (the writer thread is the only caller).
    private func deliverChanges(through last: Int64, to events: (any TaskEventSink)?, in database: Database) throws {
        var from = delivered.load(ordering: .acquiring)
        guard last > from else { return }
        while from < last {
            let page = try ChangeFeed.changes(after: from, through: last, limit: Self.pageRows, in: database)
            if !page.events.isEmpty { events?.publish(page.events) }
            from = page.complete
            // Delivered, whatever happens to this batch: these changes are committed.
            delivered.store(from, ordering: .releasing)
        }
    }

    /// Delivers what other daemons committed, without the lock: numbers up to the row's
    /// latest are all committed, and a row only moves to higher numbers, so reading the
    /// range page by page misses nothing that is not read later at its newer number.
    public func catchUp(in database: Database, publishing events: (any TaskEventSink)?) throws {
        guard let committed = try database.scalar("SELECT last_change FROM stream_state WHERE singleton = 1") else { return }
        try deliverChanges(through: committed, to: events, in: database)
    }

    public func batchEnds(in database: Database, changedRows: Bool) throws {
        let last = changeCounter.last
        guard changedRows || last != state.withLock({ $0.lastAtBatchStart }) else { return }
        // One round trip: the row moved, and the notification sent at commit.
        try database.run("""
            WITH moved AS (UPDATE stream_state SET last_change = ?1, generation = generation + 1 WHERE singleton = 1
                           RETURNING last_change)
            SELECT pg_notify('\(Self.channel)', last_change::text) FROM moved
            """, [.integer(last)])
        state.withLock { $0.generationAfterBatch += 1 }
    }

    public func batchEnded(committed: Bool) {
        state.withLock { state in
            // After a rollback the row is as it was, but this daemon's cache was forgotten
            // (the connection's rollback count moved) and its counter is reset next batch.
            state.generationSeen = committed ? state.generationAfterBatch : -1
        }
        if committed { delivered.store(max(delivered.load(ordering: .acquiring), changeCounter.last), ordering: .releasing) }
    }
}
