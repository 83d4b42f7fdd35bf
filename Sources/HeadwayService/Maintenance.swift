import Foundation
import HeadwayCore
import HeadwayStore

/// The daemon's own writes, on a timer: the stall sweeper (every `sweepInterval`, it
/// raises the flags whose deadlines have passed, read in deadline order from an index) and
/// retention (it forgets old finished tasks and tombstones in small batches). Both run as
/// ordinary jobs of the group-commit writer, so they never hold it for long.
final class Maintenance: @unchecked Sendable {
    struct Settings: Sendable {
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
    private let broker: EventBroker
    private let clock: any WallClock
    private let logger: Logger
    private let condition = NSCondition()
    private var stopping = false
    private var nextPrune = Date()
    private let stopped = DispatchSemaphore(value: 0)

    init(settings: Settings, writer: GroupCommitWriter, store: TaskStore, broker: EventBroker,
         clock: any WallClock, logger: Logger) {
        self.settings = settings
        self.writer = writer
        self.store = store
        self.broker = broker
        self.clock = clock
        self.logger = logger
        let thread = Thread { [self] in
            nameCurrentThread("headway-sweeper")
            run()
        }
        thread.name = "headway.maintenance"
        thread.start()
    }

    /// Stops the timer (jobs already queued still commit).
    func stop() {
        let alreadyStopping = condition.withLock {
            defer { stopping = true; condition.signal() }
            return stopping
        }
        if !alreadyStopping { stopped.wait() }
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
        let result = LockedCount()
        submit(0) { count in
            result.add(count)
            done.signal()
        }
        done.wait()
        return result.value
    }

    private func run() {
        while true {
            let isStopping = condition.withLock { () -> Bool in
                if !stopping { _ = condition.wait(until: Date(timeIntervalSinceNow: settings.sweepInterval)) }
                return stopping
            }
            if isStopping { break }
            waitFor(submitSweep)
            if Date() >= nextPrune {
                nextPrune = Date(timeIntervalSinceNow: settings.pruneInterval)
                waitFor(submitPrune)
            }
        }
        stopped.signal()
    }

    /// Sweeps until a batch comes back short; calls `completion` with the number of events.
    private func submitSweep(events total: Int, completion: @escaping @Sendable (Int) -> Void) {
        let now = clock.now()
        writer.submit({ [store, settings] database in
            try store.sweep(now: now, limit: settings.sweepBatch, in: database)
        }) { [self] result in
            switch result {
            case .success(let swept):
                broker.publish(swept.events)
                if swept.examined == settings.sweepBatch {
                    submitSweep(events: total + swept.events.count, completion: completion)
                } else {
                    completion(total + swept.events.count)
                }
            case .failure(let error):
                if (error as? WriterError) != .stopped { logger.log(.error, "stall_sweep.failed", ["error": "\(error)"]) }
                completion(total)
            }
        }
    }

    /// Prunes in small batches until one comes back short.
    private func submitPrune(forgotten total: Int, completion: @escaping @Sendable (Int) -> Void) {
        let cutoff = clock.now() - settings.retentionMilliseconds
        writer.submit({ [store, settings] database in
            try store.prune(finishedBefore: cutoff, limit: settings.pruneBatch, in: database)
        }) { [self] result in
            switch result {
            case .success(let count):
                if count > 0 { logger.log(.info, "retention.pruned", ["rows": "\(count)"]) }
                if count >= settings.pruneBatch {
                    submitPrune(forgotten: total + count, completion: completion)
                } else {
                    completion(total + count)
                }
            case .failure(let error):
                if (error as? WriterError) != .stopped { logger.log(.error, "retention.failed", ["error": "\(error)"]) }
                completion(total)
            }
        }
    }
}

/// A counter shared between threads.
private final class LockedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func add(_ amount: Int) { lock.withLock { count += amount } }
}
