import Foundation
import HeadwayCore
import HeadwayStore
import Lifecycle
import Synchronization
import Telemetry

/// The daemon's own writes, on a timer: the stall sweeper (every `sweepInterval`, it
/// raises the flags whose deadlines have passed, read in deadline order from an index) and
/// retention (it forgets old finished tasks and tombstones in small batches). Both run as
/// ordinary jobs of the group-commit writer, so they never hold it for long. At start it
/// first finishes what a crash may have interrupted: a subtree delete stopped between its
/// steps leaves tasks whose parent is gone, and those are deleted with their subtrees.
/// A service: its thread is the timer; a requested stop ends it (jobs already queued still
/// commit). On a PostgreSQL database several daemons share, only the leader (`Leadership`)
/// sweeps, prunes and repairs; the others keep only their tokens current.
final class Maintenance: Service {
    struct Settings: Sendable, Equatable {
        /// How often due stall deadlines are looked for (the flag's lateness is at most this
        /// plus the time to commit).
        var sweepInterval = 0.25
        /// Tasks looked at per sweep job; a full batch is followed by another at once.
        var sweepBatch = 512
        /// Finished tasks are forgotten this long after they finished.
        var retentionMilliseconds: Int64 = 7 * 86_400_000
        /// How often retention runs, and how many rows one job may forget.
        var pruneInterval = 30.0
        var pruneBatch = 256
    }

    private let settings: Settings
    private let writer: GroupCommitWriter
    private let store: TaskStore
    private let clock: any WallClock
    private let logger: Logger
    private let stopping = Atomic(false)
    private let stopRequested = Doorbell()
    /// Keeps the token registry current (about once a second), and writes token uses at stop.
    private let tokens: TokenKeeper?
    /// Counts the rows retention forgets.
    private let prunedRows: MetricCounter
    /// Counts the run-time flags the sweeps raise (`ServiceMetrics.countFlags`).
    private let countFlags: @Sendable ([TaskEvent]) -> Void
    /// On a database shared with other daemons: whether this one sweeps and prunes now.
    private let leadership: Leadership?

    init(settings: Settings, writer: GroupCommitWriter, store: TaskStore, clock: any WallClock, logger: Logger,
         tokens: TokenKeeper? = nil, prunedRows: MetricCounter = MetricCounter(), leadership: Leadership? = nil,
         countFlags: @escaping @Sendable ([TaskEvent]) -> Void = { _ in }) {
        self.countFlags = countFlags
        self.leadership = leadership
        self.tokens = tokens
        self.prunedRows = prunedRows
        self.settings = settings
        self.writer = writer
        self.store = store
        self.clock = clock
        self.logger = logger
    }

    /// Sweeps every `sweepInterval` and prunes every `pruneInterval` until a stop is requested.
    func run() {
        var nextPrune = DispatchTime.now()
        var nextTokenCheck = DispatchTime.now()
        // Whether this daemon led at its last look: a daemon that becomes the leader first
        // repairs what a crash may have interrupted (the old leader's, too).
        var leading = false
        while true {
            let leadsNow = leadership?.isLeader() ?? true
            if leadsNow && !leading {
                let orphansDeleted = waitFor(submitOrphanDeletes)
                if orphansDeleted > 0 { logger.log(.warn, "orphans.deleted", ["tasks": "\(orphansDeleted)"]) }
                nextPrune = .now()
            }
            leading = leadsNow
            stopRequested.wait(until: .now() + settings.sweepInterval)
            if stopping.load(ordering: .acquiring) { break }
            if leading { waitFor(submitSweep) }
            if let tokens {
                if DispatchTime.now() >= nextTokenCheck {
                    nextTokenCheck = .now() + Self.tokenCheckInterval
                    tokens.refresh()
                } else {
                    tokens.closeDeadStreams()
                }
            }
            if leading && DispatchTime.now() >= nextPrune {
                nextPrune = .now() + settings.pruneInterval
                waitFor(submitPrune)
            }
        }
        // The writer stops after maintenance: the last uses of tokens are written.
        tokens?.refresh(final: true)
        leadership?.resign()
    }

    /// How often the tokens table is looked at (expired tokens' streams are looked for on every tick).
    static let tokenCheckInterval = DispatchTimeInterval.milliseconds(900)

    /// Ends the timer (the sweep or pruning under way, if any, finishes first).
    func requestStop() {
        stopping.store(true, ordering: .releasing)
        stopRequested.ring()
    }

    /// Runs one sweep now and waits for it to commit (tests move a manual clock, then call
    /// this); returns the events it raised.
    @discardableResult
    func sweepNow() -> Int { waitFor(submitSweep) }

    /// Runs retention now and waits for it (for tests); returns the rows forgotten.
    @discardableResult
    func pruneNow() -> Int { waitFor(submitPrune) }

    /// Submits a job chain and waits for its count.
    @discardableResult
    private func waitFor(_ submit: (Int, @escaping @Sendable (Int) -> Void) -> Void) -> Int {
        let done = DispatchSemaphore(value: 0)
        // Set on the writer's thread, read here once `done` is signalled.
        let result = Locked(0)
        submit(0) { count in
            result.withLock { $0 += count }
            done.signal()
        }
        done.wait()
        return result.withLock { $0 }
    }

    /// Deletes, each with its subtree and in steps like any delete, the tasks whose parent
    /// is gone, until none is left; calls `completion` with the number of tasks deleted.
    private func submitOrphanDeletes(deleted total: Int, completion: @escaping @Sendable (Int) -> Void) {
        writer.submit({ database in try TaskRepository.orphans(limit: 64, in: database) }) { [self] result in
            guard case .success(let orphans) = result, !orphans.isEmpty else {
                if case .failure(let error) = result { logFailure("orphans.failed", error) }
                return completion(total)
            }
            let now = clock.now()
            let deletes = DispatchGroup()
            // Counted on the writer's thread, read here once `deletes` is done.
            let deleted = Locked(0)
            for id in orphans {
                deletes.enter()
                store.inSteps(on: writer, { [store] database in try store.delete(id, now: now, in: database) },
                              afterEachCommit: { step in deleted.withLock { $0 += step.count } },
                              completion: { _ in deletes.leave() })
            }
            deletes.notify(queue: .global()) { [self] in
                let round = deleted.withLock { $0 }
                // A round that deleted nothing (its deletes failed, or the writer stopped)
                // ends the repair rather than trying the same tasks for ever.
                guard round > 0 else { return completion(total) }
                submitOrphanDeletes(deleted: total + round, completion: completion)
            }
        }
    }

    /// Sweeps until a batch comes back short; calls `completion` with the number of events.
    private func submitSweep(events total: Int, completion: @escaping @Sendable (Int) -> Void) {
        let now = clock.now()
        writer.submit({ [store, settings] database in
            try store.sweep(now: now, limit: settings.sweepBatch, in: database)
        }) { [self] result in
            switch result {
            case .success(let swept):
                countFlags(swept.events)
                if swept.examined == settings.sweepBatch {
                    submitSweep(events: total + swept.events.count, completion: completion)
                } else {
                    completion(total + swept.events.count)
                }
            case .failure(let error):
                logFailure("stall_sweep.failed", error)
                completion(total)
            }
        }
    }

    /// Logs a job that failed, unless the writer has stopped or the storage refused it (a
    /// full disk, logged once per episode by `StorageAlarm`: the sweep would log it four
    /// times a second).
    private func logFailure(_ event: String, _ error: any Error) {
        guard (error as? WriterError) != .stopped, !StorageAlarm.isStorageRefusal(error) else { return }
        logger.log(Self.isPassing(error) ? .warn : .error, event, ["error": "\(error)"])
    }

    /// Whether `error` passes by itself and the job is simply retried at the next tick: a
    /// database server out of reach (restarting, the network cut), or a write lock held
    /// past the busy timeout by another process (on PostgreSQL: another daemon, whose
    /// session the server ends when that daemon is cut off).
    static func isPassing(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        return error.isUnavailable || error.isBusy
    }

    /// Prunes in small batches until one comes back short.
    private func submitPrune(forgotten total: Int, completion: @escaping @Sendable (Int) -> Void) {
        let cutoff = clock.now() - settings.retentionMilliseconds
        writer.submit({ [store, settings] database in
            try store.prune(finishedBefore: cutoff, limit: settings.pruneBatch, in: database)
        }) { [self] result in
            switch result {
            case .success(let count):
                if count > 0 {
                    prunedRows.add(UInt64(count))
                    logger.log(.info, "retention.pruned", ["rows": "\(count)"])
                }
                if count >= settings.pruneBatch {
                    submitPrune(forgotten: total + count, completion: completion)
                } else {
                    completion(total + count)
                }
            case .failure(let error):
                logFailure("retention.failed", error)
                completion(total)
            }
        }
    }
}
