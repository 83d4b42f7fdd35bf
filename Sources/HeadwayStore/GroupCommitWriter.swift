import Foundation
import HeadwayCore
import Synchronization
import Lifecycle

/// How hard a commit tries to reach the disk.
public enum Durability: String, Sendable, CaseIterable {
    /// `synchronous=FULL`: a committed change survives power loss. On PostgreSQL,
    /// `synchronous_commit = on`: a commit returns once the server's WAL is on disk.
    case full
    /// `synchronous=NORMAL`: a committed change survives a crash of the process. On
    /// PostgreSQL, `synchronous_commit = off`: it survives a crash of `headwayd`, and of
    /// the server's processes, but not of its machine (the last fraction of a second).
    case normal
}

/// What a writer job's result holds in memory until its batch commits (its events, mostly),
/// so that a batch's memory is bounded in bytes, not only in jobs.
public protocol BatchSized {
    /// About how many bytes the result holds.
    var estimatedBytes: Int { get }
}

/// The one writer of the database: a service whose thread drains a queue of jobs into
/// `BEGIN IMMEDIATE … COMMIT` batches (group commit). A job that throws changes nothing
/// while the rest of its batch commits (`runBatch`: one that throws after writing has its
/// batch run again, a savepoint per job).
/// A batch ends after `maximumBatch` jobs or once its results hold `maximumBatchBytes`
/// (the jobs not run yet wait for the next batch). A job's completion is called only after
/// its batch has committed; if the commit fails, or SQLite ends the transaction in the
/// middle of the batch, no further job of the batch runs, nothing of it is stored and every
/// job of it gets the error. A job whose result carries events (`CarriesTaskEvents`: every
/// change of tasks) has them handed to the writer's `TaskEventSink` after the commit, just
/// before its completion: the one place events are published. Work too big for one job is
/// submitted in steps (`submitSteps`), each a job of its own. The connection is confined
/// to the writer thread. A requested stop commits what is queued (with every remaining
/// step of work done in steps), then `run()` closes the connection and returns; later
/// submissions fail with `.stopped`. On SQLite, the checkpoint a commit makes due (the WAL
/// at 1,000 pages) runs after that batch's completions, not inside its commit
/// (`SQLiteConnection.deferCheckpoints`); and between batches, about once per `walCheckInterval`,
/// the writer keeps the `-wal` file's size bounded (`limitWAL()`).
public final class GroupCommitWriter: Service {
    /// Counts of what the writer has done, for metrics and benchmarks.
    public struct Statistics: Sendable, Equatable {
        public var batches = 0
        public var jobs = 0
        /// Statements the writer's connection has run (or sent, in a pipeline), as of its
        /// latest batch committed.
        public var statements = 0
    }

    /// One batch, as the observer set at `init` sees it once the batch is over.
    public struct BatchReport: Sendable {
        /// The jobs the batch ran (committed, or all lost with it).
        public var jobs: Int
        /// From `BEGIN IMMEDIATE` to the end of `COMMIT` (or of the failure), in seconds.
        public var seconds: Double
        /// Whether it committed.
        public var committed: Bool
        /// Whether its jobs changed rows (if it committed, its pages then reached the
        /// storage; a batch of reads and refusals commits even on a full disk).
        public var changedRows = false
        /// SQLite's error that ended it, if it did not commit because of one (its
        /// `storageFailure` says whether the storage refused the batch: a full disk, say).
        public var error: DatabaseError? = nil

        public init(jobs: Int, seconds: Double, committed: Bool, changedRows: Bool = false, error: DatabaseError? = nil) {
            self.jobs = jobs
            self.seconds = seconds
            self.committed = committed
            self.changedRows = changedRows
            self.error = error
        }
    }

    private struct Job: Sendable {
        /// Runs the work (on the writer thread), in its own savepoint when asked; returns
        /// the error that rolled the savepoint back, if any, what to call once the batch has
        /// committed, and about how many bytes its result holds until then. Without a
        /// savepoint, work that throws after it changed rows (or after a statement failed)
        /// returns `WriterError.needsSavepoints`: the batch must be run again with them;
        /// unless it threw because the database is unavailable, which fails the batch.
        let run: @Sendable (Database, _ inSavepoint: Bool) -> (error: (any Error)?, afterCommit: @Sendable () -> Void, bytes: Int)
        /// Called instead when the batch could not commit.
        let abort: @Sendable (any Error) -> Void
        /// A job that writes nothing and only asks for other daemons' changes to be
        /// delivered (`submitCatchUp`): a batch of these alone takes no transaction.
        var isCatchUp = false
    }

    /// What submitters share with the writer thread.
    private struct Queue {
        var jobs: [Job] = []
        var stopping = false
    }

    private let database: Database
    /// Shared by the submitters (any thread) and the writer's thread.
    private let queue = Locked(Queue())
    private let workArrived = Doorbell()
    /// Written by the writer's thread after each batch; read by the threads that read `/metrics`.
    private let stats = Locked(Statistics())
    private let maximumBatch: Int
    private let maximumBatchBytes: Int
    private let walSizeLimit: Int
    private let walCheckInterval: Double
    /// Set when a batch failed for want of space and cleared by the next checkpoint that
    /// empties the WAL (touched by the writer thread only; see `limitWAL()`).
    private let diskFullSinceCheckpoint = Atomic(false)
    private let observeBatch: (@Sendable (BatchReport) -> Void)?
    private let observeCheckpoint: (@Sendable (_ seconds: Double) -> Void)?
    /// What each batch does besides its jobs when other daemons write too (PostgreSQL).
    private let coordinator: (any BatchCoordinator)?
    /// What holds a batch's changes of rows back until it commits, if anything.
    private let heldWrites: (any HeldWrites)?
    /// Where the events of committed changes go (the event broker), if anywhere.
    private let events: (any TaskEventSink)?
    /// Whether the writer waits now for a lock another process holds (SQLite), and a word
    /// when such a wait begins: the readiness probe need not wait with it.
    public let lockWaits = LockWaits()
    /// Whether the writer reaches the database now (PostgreSQL down or restarting: it does
    /// not), and how long in all it has not.
    public let availability: DatabaseAvailability

    /// The size the `-wal` file is brought back under once nothing holds it (32 MiB): well
    /// above what it reaches under steady load, when the checkpoint after a batch resets it
    /// after each 1,000 pages (about 4 MiB) plus the batch that crossed them.
    public static let defaultWALSizeLimit = 32 << 20

    /// Opens the writer connection (WAL, the given durability); `run()` then writes.
    /// `observeBatch`, if given, is called on the writer thread after each batch (before
    /// its jobs' completions): keep it cheap. `observeCheckpoint`, likewise, after each
    /// checkpoint a batch made due (SQLite), with its duration. `walSizeLimit` and `walCheckInterval` (in
    /// seconds): see `limitWAL()`. `coordinator`: what each batch does first and last when
    /// other daemons write the same database (`SharedWriting`). `heldWrites`: what holds
    /// the batches' changes of rows back until they commit (the store's `TaskCache`).
    /// `events`: where the events of committed changes go, in commit order (the broker).
    /// `availability`: told whether each batch reached the database.
    public init(path: String, durability: Durability, maximumBatch: Int = 2048,
                maximumBatchBytes: Int = 16 << 20, walSizeLimit: Int = defaultWALSizeLimit,
                walCheckInterval: Double = 1, coordinator: (any BatchCoordinator)? = nil,
                heldWrites: (any HeldWrites)? = nil, events: (any TaskEventSink)? = nil,
                availability: DatabaseAvailability = DatabaseAvailability(),
                observeBatch: (@Sendable (BatchReport) -> Void)? = nil,
                observeCheckpoint: (@Sendable (_ seconds: Double) -> Void)? = nil) throws(DatabaseError) {
        database = try Database(path: path)
        self.heldWrites = heldWrites
        self.events = events
        self.availability = availability
        try database.prepareForWriting(durability: durability, walSizeLimit: walSizeLimit, lockWaits: lockWaits)
        self.coordinator = coordinator
        self.maximumBatch = maximumBatch
        self.maximumBatchBytes = maximumBatchBytes
        self.walSizeLimit = walSizeLimit
        self.walCheckInterval = walCheckInterval
        self.observeBatch = observeBatch
        self.observeCheckpoint = observeCheckpoint
    }

    /// The work done so far.
    public var statistics: Statistics { stats.withLock { $0 } }

    /// Jobs waiting for a batch now.
    public var queueDepth: Int { queue.withLock { $0.jobs.count } }

    /// Seconds, summed over batches, from taking the lock that orders all writers' batches
    /// to the end of `COMMIT` (PostgreSQL: `SharedWriting`); nil where there is none.
    public var orderingLockSeconds: Double? { coordinator?.orderingLockSeconds }

    /// Batches run again because another daemon wrote a task they read before they took
    /// their place in the order (PostgreSQL: `SharedWriting`); nil where there is none.
    public var orderingReruns: Int? { coordinator?.lostOrders }

    /// Queues `work` to run in the next batch and calls `completion` with its result once
    /// the batch has committed (or with the error that stopped it).
    public func submit<Value: Sendable>(_ work: @escaping @Sendable (Database) throws -> Value,
                                        completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        enqueue(work, size: { _ in 0 }, completion: completion)
    }

    /// Queues `work` whose result counts towards its batch's bytes.
    public func submit<Value: Sendable & BatchSized>(_ work: @escaping @Sendable (Database) throws -> Value,
                                                     completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        enqueue(work, size: { $0.estimatedBytes }, completion: completion)
    }

    /// Asks for the changes other daemons committed to be delivered (`BatchCoordinator.catchUp`),
    /// in order with this writer's own; `completion` is called on the writer thread once
    /// they were (true), or when the writer stopped or the read failed (false). A batch of
    /// such requests alone opens no transaction and takes no lock; one with other jobs
    /// delivers them first anyway.
    public func submitCatchUp(completion: @escaping @Sendable (Bool) -> Void) {
        let job = Job(run: { _, _ in (nil, { completion(true) }, 0) }, abort: { _ in completion(false) }, isCatchUp: true)
        let accepted = queue.withLock { queue in
            guard !queue.stopping else { return false }
            queue.jobs.append(job)
            return true
        }
        guard accepted else { return completion(false) }
        workArrived.ring()
    }

    /// Queues work done in bounded steps, each a job of its own: `first` runs in the next
    /// batch; after each step has committed (and its events, if it carries any, are
    /// published), `afterEachCommit` gets its result and, while `nextStep` gives more work,
    /// that work is queued behind the jobs submitted meanwhile, so they commit between the
    /// steps. `completion` gets the first step's result after the last step has committed,
    /// or the error that ended a step (the steps committed before it stay). A stop
    /// requested between the steps still runs the rest: the next step is queued on the
    /// writer thread before it looks at its queue again.
    public func submitSteps<Value: Sendable & BatchSized>(
        _ first: @escaping @Sendable (Database) throws -> Value,
        nextStep: @escaping @Sendable (Value) -> (@Sendable (Database) throws -> Value)?,
        afterEachCommit: @escaping @Sendable (Value) -> Void = { _ in },
        completion: @escaping @Sendable (Result<Value, any Error>) -> Void
    ) {
        enqueue(first, size: { $0.estimatedBytes }) { [self] result in
            if case .success(let value) = result {
                continueSteps(after: value, first: value, nextStep: nextStep, afterEachCommit: afterEachCommit,
                              completion: completion)
            } else {
                completion(result)
            }
        }
    }

    /// Hands a committed step on and queues the next one, if any (on the writer thread).
    private func continueSteps<Value: Sendable & BatchSized>(
        after step: Value, first: Value,
        nextStep: @escaping @Sendable (Value) -> (@Sendable (Database) throws -> Value)?,
        afterEachCommit: @escaping @Sendable (Value) -> Void,
        completion: @escaping @Sendable (Result<Value, any Error>) -> Void
    ) {
        afterEachCommit(step)
        guard let work = nextStep(step) else { return completion(.success(first)) }
        enqueue(work, size: { $0.estimatedBytes }, evenWhenStopping: true) { [self] result in
            switch result {
            case .success(let value):
                continueSteps(after: value, first: first, nextStep: nextStep, afterEachCommit: afterEachCommit,
                              completion: completion)
            case .failure(let error):
                completion(.failure(error))
            }
        }
    }

    /// Queues a job; `evenWhenStopping` only for the next step of accepted work, queued on
    /// the writer thread after a commit (so `run()` has not returned yet). Once the job's
    /// batch has committed, the events its result carries (`CarriesTaskEvents`, whatever
    /// the caller's type for it) are published, then `completion` is called.
    private func enqueue<Value: Sendable>(_ work: @escaping @Sendable (Database) throws -> Value,
                                          size: @escaping @Sendable (Value) -> Int, evenWhenStopping: Bool = false,
                                          completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        let sink = events
        let coordinator = coordinator
        let job = Job(
            run: { database, inSavepoint in
                let changesBefore = database.totalChanges
                do {
                    let value = inSavepoint ? try database.inSavepoint { try work(database) } : try work(database)
                    return (nil, {
                        if let sink, let events = (value as? any CarriesTaskEvents)?.events, !events.isEmpty {
                            sink.publish(coordinator?.final(events) ?? events)
                        }
                        completion(.success(value))
                    }, size(value))
                } catch {
                    // The batch runs again, holding the order first: not this job's error.
                    if database.orderLost { return (WriterError.orderMoved, {}, 0) }
                    // A lost connection fails the whole batch as unavailable (the transaction
                    // is gone): run again, it would only wait for the database once more.
                    if !inSavepoint && !Self.isUnavailable(error)
                        && (database.totalChanges != changesBefore || database.transactionFailed) {
                        return (WriterError.needsSavepoints, {}, 0)
                    }
                    return (error, { completion(.failure(error)) }, 0)
                }
            },
            abort: { error in completion(.failure(error)) })
        let accepted = queue.withLock { queue in
            guard !queue.stopping || evenWhenStopping else { return false }
            queue.jobs.append(job)
            return true
        }
        guard accepted else { return completion(.failure(WriterError.stopped)) }
        workArrived.ring()
    }

    /// Writes batches until a stop is requested and the queue is empty, then closes the
    /// connection.
    public func run() {
        database.confine(to: .currentThread)
        var nextWALCheck = DispatchTime.now() + walCheckInterval
        var batch: [Job] = []
        while true {
            if DispatchTime.now() >= nextWALCheck {
                limitWAL()
                if !queue.withLock({ $0.stopping }) { lookForTheDatabaseIfUnavailable() }
                nextWALCheck = DispatchTime.now() + walCheckInterval
            }
            let (hasWork, stopping) = queue.withLock { (!$0.jobs.isEmpty, $0.stopping) }
            if !hasWork {
                if stopping { break }
                _ = workArrived.wait(until: nextWALCheck)
                continue
            }
            if stopping && !availability.isAvailable {
                refuseQueuedJobs()
                continue
            }
            // Woken by the first job of a burst, the writer would preempt the threads still
            // queueing the rest and commit them one by one: let them run first.
            sched_yield()
            // The whole queue is taken by swapping it with the emptied array of the last
            // batch, so that neither side allocates again while batches keep their size.
            queue.withLock { queue in
                if queue.jobs.count <= maximumBatch {
                    swap(&queue.jobs, &batch)
                } else {
                    batch.append(contentsOf: queue.jobs.prefix(maximumBatch))
                    queue.jobs.removeFirst(maximumBatch)
                }
            }
            let notRun = Array(runBatch(batch))
            // The batch's completions have run (its replies and events are handed on): the
            // checkpoint its commit made due (the WAL at 1,000 pages) runs now, not inside
            // the commit. The next batch waits for it, so its time is observed too.
            let checkpointStart = DispatchTime.now().uptimeNanoseconds
            if database.checkpointIfDue() { observeCheckpoint?(Self.seconds(since: checkpointStart)) }
            batch.removeAll(keepingCapacity: true)
            if !notRun.isEmpty { queue.withLock { $0.jobs.insert(contentsOf: notRun, at: 0) } }
        }
        database.close()
    }

    /// At a stop while the database cannot be reached, refuses the jobs still queued at once
    /// (unavailable: their clients send them again, to another daemon) rather than letting
    /// each batch try to connect again, which on a host that does not answer (the network
    /// cut) takes a whole connect timeout, and the stop with it.
    private func refuseQueuedJobs() {
        let jobs = queue.withLock { queue in
            defer { queue.jobs.removeAll() }
            return queue.jobs
        }
        let error = DatabaseError.unavailable("the daemon is stopping, and the database cannot be reached")
        jobs.forEach { $0.abort(error) }
    }

    /// Brings the `-wal` file back under `walSizeLimit` when it is over it: a checkpoint
    /// that waits for no one (`Database.checkpointTruncatingWAL`), so a batch is never held
    /// up by another process. Under load the checkpoints after batches reset the WAL and
    /// `journal_size_limit` cuts the file back; but a reader that keeps an old snapshot (a
    /// `sqlite3` shell in a transaction, a backup) keeps the WAL from being reset, so it
    /// grows while the reader holds, and this check empties it once the reader has let go,
    /// even if no write comes after. (`journal_size_limit` cuts the file back to exactly the
    /// limit, so a file at the limit is emptied too.) After a batch failed for want of
    /// space it checkpoints whatever the size: the checkpoint after a batch runs only after
    /// a commit, and on a full disk no commit succeeds, so the committed frames in the WAL
    /// would otherwise hold the space that the next commit needs, for good. A check that
    /// fails or finds a reader in the way changes nothing and the next one tries again.
    private func limitWAL() {
        // 0 on PostgreSQL, whose WAL is the server's.
        let walBytes = database.writeAheadLogBytes
        let diskWasFull = diskFullSinceCheckpoint.load(ordering: .relaxed)
        guard walBytes >= walSizeLimit || (diskWasFull && walBytes > 0) else { return }
        if (try? database.checkpointTruncatingWAL()) == true { diskFullSinceCheckpoint.store(false, ordering: .relaxed) }
    }

    /// While the database is unavailable, tries to reach it (connecting again), so that its
    /// return is seen, and the connection made, without waiting for a write.
    private func lookForTheDatabaseIfUnavailable() {
        guard !availability.isAvailable else { return }
        do {
            _ = try database.scalar("SELECT 1")
            availability.reached()
        } catch {
            // Still unreachable: the next look, or the next batch, tries again.
        }
    }

    /// Tells `availability` whether a batch (or a catch-up) reached the database: it did
    /// when it succeeded, or when the database itself refused it (a lock timeout, say).
    private func noteReach(failedWith error: (any Error)?) {
        guard let error else { return availability.reached() }
        guard let error = error as? DatabaseError else { return }
        if error.isUnavailable { availability.unreachable(error) } else { availability.reached() }
    }

    /// Makes `run()` commit what is queued and return; later submissions fail.
    public func requestStop() {
        queue.withLock { $0.stopping = true }
        workArrived.ring()
    }

    /// Runs the jobs of `batch` in one transaction, in order, until their results hold
    /// `maximumBatchBytes`, and commits; returns the jobs not run (at least one job runs).
    ///
    /// Jobs run without a savepoint each: on PostgreSQL a savepoint costs two round trips
    /// per job, and a transaction with more than 64 subtransactions that wrote slows every
    /// session's snapshots; on SQLite it costs two statements per job and a sub-journal of
    /// the pages the job changes. A job that throws having changed nothing (a refusal by
    /// the rules, the common case) leaves the transaction as it was, and only when one
    /// throws after changing rows, or after a statement failed (which aborts a PostgreSQL
    /// transaction), is the batch rolled back and run again with a savepoint per job
    /// (`savepoints`).
    ///
    /// The batch's changes of rows are held back (`heldWrites`) and written before the
    /// commit; if writing them fails (a row refused by a trigger, say), the batch is run
    /// again with a savepoint per job and nothing held, so that the job whose row it was
    /// fails alone. The held writes, the coordinator's last statements and the `COMMIT`
    /// are sent without waiting for each other's answers (`Database.pipelineUntilCommit`:
    /// PostgreSQL's pipeline mode), so any of them that fails is reported by the `COMMIT`
    /// (`DatabaseError.pipelined`), and the batch is run again as when a held write fails
    /// (a failed `COMMIT` itself loses the batch, as always).
    private func runBatch(_ batch: [Job], savepoints: Bool = false, orderFirst: Bool = false) -> ArraySlice<Job> {
        database.heldWrites = savepoints ? nil : heldWrites
        if let coordinator, batch.allSatisfy(\.isCatchUp) {
            var delivered = true
            do {
                try coordinator.catchUp(in: database, publishing: events)
                noteReach(failedWith: nil)
            } catch {
                delivered = false
                noteReach(failedWith: error)
            }
            batch.forEach { job in delivered ? job.run(database, false).afterCommit() : job.abort(WriterError.transactionLost) }
            return []
        }
        var afterCommit: [@Sendable () -> Void] = []
        afterCommit.reserveCapacity(batch.count)
        var bytes = 0
        let start = DispatchTime.now().uptimeNanoseconds
        let changesAtStart = database.totalChanges
        do {
            try database.inTransaction(.immediate) {
                try coordinator?.batchBegins(in: database, publishing: events, orderFirst: savepoints || orderFirst)
                for job in batch {
                    if bytes >= maximumBatchBytes { break }
                    // A job that throws is rolled back alone and learns its error after the
                    // commit. But once the transaction is gone (SQLite rolls it back itself
                    // after a full disk, say), the batch is lost: no later job may run, or its
                    // savepoint would start and commit a transaction of its own.
                    let (error, completion, size) = job.run(database, savepoints)
                    if database.orderLost { throw WriterError.orderMoved }
                    if case WriterError.needsSavepoints? = error { throw WriterError.needsSavepoints }
                    guard database.isInsideTransaction else { throw error ?? WriterError.transactionLost }
                    afterCommit.append(completion)
                    bytes += size
                }
                try coordinator?.orderBeforeWriting(in: database, changedRows: database.totalChanges != changesAtStart)
                database.pipelineUntilCommit()
                do {
                    try database.heldWrites?.writeHeld(in: database)
                } catch {
                    guard database.isInsideTransaction && !Self.isUnavailable(error) else { throw error }
                    throw WriterError.needsSavepoints
                }
                try coordinator?.batchEnds(in: database, changedRows: database.totalChanges != changesAtStart)
            }
        } catch {
            let lostOrder = coordinator?.lostOrder(error) ?? false
            coordinator?.batchEnded(committed: false, in: database)
            if lostOrder { return runBatch(batch, savepoints: savepoints, orderFirst: true) }
            if !savepoints && Self.needsSavepoints(error) { return runBatch(batch, savepoints: true) }
            if (error as? DatabaseError)?.storageFailure == .full { diskFullSinceCheckpoint.store(true, ordering: .relaxed) }
            noteReach(failedWith: error)
            observeBatch?(BatchReport(jobs: batch.count, seconds: Self.seconds(since: start), committed: false,
                                      error: error as? DatabaseError))
            batch.forEach { $0.abort(error) }
            return []
        }
        coordinator?.batchEnded(committed: true, in: database)
        noteReach(failedWith: nil)
        observeBatch?(BatchReport(jobs: afterCommit.count, seconds: Self.seconds(since: start), committed: true,
                                  changedRows: database.totalChanges != changesAtStart))
        let statements = database.statementsRun
        stats.withLock { stats in
            stats.batches += 1
            stats.jobs += afterCommit.count
            stats.statements = statements
        }
        afterCommit.forEach { $0() }
        return batch[afterCommit.count...]
    }
}

extension GroupCommitWriter {
    /// Whether a batch that failed with `error` runs again with a savepoint per job: a job
    /// threw after writing, or a statement sent ahead of the `COMMIT` failed inside the
    /// open transaction (a held write, most likely), not the `COMMIT` nor the connection.
    /// (`WriterError.needsSavepoints` is never made of an unavailable database's error.)
    private static func needsSavepoints(_ error: any Error) -> Bool {
        if case WriterError.needsSavepoints = error { return true }
        guard let error = error as? DatabaseError else { return false }
        return error.pipelined && !error.isUnavailable
    }

    /// Whether `error` says the database cannot be reached (the connection lost, the server
    /// going down): the batch fails as unavailable, never run again with savepoints.
    private static func isUnavailable(_ error: any Error) -> Bool {
        (error as? DatabaseError)?.isUnavailable == true
    }

    private static func seconds(since start: UInt64) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds &- start) / 1e9
    }
}

/// Why the writer refused a job.
public enum WriterError: Error, Equatable {
    /// The writer has stopped (the daemon is shutting down).
    case stopped
    /// SQLite ended the batch's transaction in the middle of it: nothing of the batch was stored.
    case transactionLost
    /// A job run without a savepoint threw after changing rows, or a held change of a row
    /// could not be written: the batch is run again, a savepoint per job (never reaches a
    /// job's completion).
    case needsSavepoints
    /// The batch ran ahead of the writers' order and another writer wrote a task it read
    /// (`SharedWriting`): it is run again taking the order first (never reaches a job's
    /// completion).
    case orderMoved
}
