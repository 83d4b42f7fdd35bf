import Foundation
import Lifecycle
import Synchronization

/// How hard a commit tries to reach the disk.
public enum Durability: String, Sendable, CaseIterable {
    /// `synchronous=FULL`: a committed change survives power loss.
    case full
    /// `synchronous=NORMAL`: a committed change survives a crash of the process.
    case normal
}

/// The one writer of the database: a service whose thread drains a queue of jobs into
/// `BEGIN IMMEDIATE … COMMIT` batches (group commit). Each job runs inside its own
/// savepoint, so a job that throws changes nothing while the rest of its batch commits.
/// A job's completion is called only after its batch has committed; if the commit fails,
/// every job of the batch gets the error. A requested stop commits what is queued, then
/// `run()` closes the connection and returns; later submissions fail with `.stopped`.
public final class GroupCommitWriter: Service {
    /// Counts of what the writer has done, for metrics and benchmarks.
    public struct Statistics: Sendable, Equatable {
        public var batches = 0
        public var jobs = 0
    }

    private struct Job: Sendable {
        /// Runs the work; false when it threw, so its savepoint must be rolled back.
        let run: @Sendable (Database) -> Bool
        let commit: @Sendable () -> Void
        let abort: @Sendable (any Error) -> Void
    }

    /// What submitters share with the writer thread.
    private struct Queue {
        var jobs: [Job] = []
        var stopping = false
    }

    private let database: Database
    private let queue = Mutex(Queue())
    private let workArrived = Doorbell()
    private let stats = Mutex(Statistics())
    private let maximumBatch: Int

    /// Opens the writer connection (WAL, the given durability); `run()` then writes.
    public init(path: String, durability: Durability, maximumBatch: Int = 2048) throws(SQLiteError) {
        database = try Database(path: path)
        try database.execute("PRAGMA journal_mode = WAL")
        try database.execute("PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
        self.maximumBatch = maximumBatch
    }

    /// The work done so far.
    public var statistics: Statistics { stats.withLock { $0 } }

    /// Queues `work` to run in the next batch and calls `completion` with its result once
    /// the batch has committed (or with the error that stopped it).
    public func submit<Value: Sendable>(_ work: @escaping @Sendable (Database) throws -> Value,
                                        completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        // The result lives in a box written by `run` and read by `commit`, both on the writer thread.
        let box = ResultBox<Value>()
        let job = Job(
            run: { database in
                let result = Result { try work(database) }
                box.result = result
                if case .failure = result { return false }
                return true
            },
            commit: { completion(box.result ?? .failure(WriterError.stopped)) },
            abort: { error in completion(.failure(error)) })
        let accepted = queue.withLock { queue in
            guard !queue.stopping else { return false }
            queue.jobs.append(job)
            return true
        }
        guard accepted else { return completion(.failure(WriterError.stopped)) }
        workArrived.ring()
    }

    /// Writes batches until a stop is requested and the queue is empty, then closes the
    /// connection.
    public func run() {
        while true {
            let (hasWork, stopping) = queue.withLock { (!$0.jobs.isEmpty, $0.stopping) }
            if !hasWork {
                if stopping { break }
                workArrived.wait()
                continue
            }
            // Woken by the first job of a burst, the writer would preempt the threads still
            // queueing the rest and commit them one by one: let them run first.
            sched_yield()
            let batch = queue.withLock { queue in
                let batch = Array(queue.jobs.prefix(maximumBatch))
                queue.jobs.removeFirst(batch.count)
                return batch
            }
            runBatch(batch)
        }
        database.close()
    }

    /// Makes `run()` commit what is queued and return; later submissions fail.
    public func requestStop() {
        queue.withLock { $0.stopping = true }
        workArrived.ring()
    }

    private func runBatch(_ batch: [Job]) {
        // Prepared once and reused (`run`), not parsed again for every job.
        do {
            try database.run("BEGIN IMMEDIATE")
        } catch {
            batch.forEach { $0.abort(error) }
            return
        }
        for job in batch {
            do {
                try database.run("SAVEPOINT job")
                if !job.run(database) {
                    try database.run("ROLLBACK TO job")
                    database.noteRollback()
                }
                try database.run("RELEASE job")
            } catch {
                // The savepoint itself failed: nothing of this job can be trusted.
                try? database.execute("ROLLBACK TO job; RELEASE job")
                database.noteRollback()
            }
        }
        do {
            try database.run("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            database.noteRollback()
            batch.forEach { $0.abort(error) }
            return
        }
        stats.withLock { stats in
            stats.batches += 1
            stats.jobs += batch.count
        }
        batch.forEach { $0.commit() }
    }
}

/// Why the writer refused a job.
public enum WriterError: Error, Equatable {
    /// The writer has stopped (the daemon is shutting down).
    case stopped
}

/// A value written and read on the writer thread only.
private final class ResultBox<Value>: @unchecked Sendable {
    var result: Result<Value, any Error>?
}
