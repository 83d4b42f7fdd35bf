import Foundation

/// How hard a commit tries to reach the disk.
public enum Durability: String, Sendable, CaseIterable {
    /// `synchronous=FULL`: a committed change survives power loss.
    case full
    /// `synchronous=NORMAL`: a committed change survives a crash of the process.
    case normal
}

// @unchecked Sendable: the queue, the flag and the counters are guarded by `condition`.
/// The one writer of the database: a thread that drains a queue of jobs into
/// `BEGIN IMMEDIATE … COMMIT` batches (group commit). Each job runs inside its own
/// savepoint, so a job that throws changes nothing while the rest of its batch commits.
/// A job's completion is called only after its batch has committed; if the commit fails,
/// the batch is rolled back and every job of it gets the error. The connection is confined
/// to the writer thread.
public final class GroupCommitWriter: @unchecked Sendable {
    /// Counts of what the writer has done, for metrics and benchmarks.
    public struct Statistics: Sendable, Equatable {
        public var batches = 0
        public var jobs = 0
    }

    private struct Job {
        /// Runs the work in its own savepoint and keeps its result for `commit`; returns the
        /// error that rolled the savepoint back, if any.
        let run: (Database) -> (any Error)?
        let commit: () -> Void
        let abort: (any Error) -> Void
    }

    private let database: Database
    private let condition = NSCondition()
    private var queue: [Job] = []
    private var stopping = false
    private var stats = Statistics()
    private let finished = DispatchSemaphore(value: 0)
    private let maximumBatch: Int

    /// Opens the writer connection (WAL, the given durability) and starts its thread.
    public init(path: String, durability: Durability, maximumBatch: Int = 2048) throws(SQLiteError) {
        database = try Database(path: path)
        try database.execute("PRAGMA journal_mode = WAL")
        try database.execute("PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
        self.maximumBatch = maximumBatch
        let thread = Thread { [self] in
            nameCurrentThread("headway-writer")
            loop()
        }
        thread.name = "headway.writer"
        thread.start()
    }

    /// The work done so far.
    public var statistics: Statistics { condition.withLock { stats } }

    /// Queues `work` to run in the next batch and calls `completion` with its result once
    /// the batch has committed (or with the error that stopped it).
    public func submit<Value: Sendable>(_ work: @escaping @Sendable (Database) throws -> Value,
                                        completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        // The result lives in a box written by `run` and read by `commit`, both on the writer thread.
        let box = ResultBox<Value>()
        let job = Job(
            run: { database in
                do {
                    box.result = .success(try database.inSavepoint { try work(database) })
                    return nil
                } catch {
                    box.result = .failure(error)
                    return error
                }
            },
            commit: { completion(box.result ?? .failure(WriterError.stopped)) },
            abort: { error in completion(.failure(error)) })
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else {
            completion(.failure(WriterError.stopped))
            return
        }
        queue.append(job)
        condition.signal()
    }

    /// Commits what is queued, stops the thread and closes the connection. Later
    /// submissions fail.
    public func stop() {
        condition.lock()
        let wasStopping = stopping
        stopping = true
        condition.signal()
        condition.unlock()
        guard !wasStopping else { return }
        finished.wait()
        database.close()
    }

    private func loop() {
        database.confine(to: .currentThread)
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            if queue.isEmpty && stopping {
                condition.unlock()
                break
            }
            condition.unlock()
            // Woken by the first job of a burst, the writer would preempt the threads still
            // queueing the rest and commit them one by one: let them run first.
            sched_yield()
            condition.lock()
            let batch = Array(queue.prefix(maximumBatch))
            queue.removeFirst(batch.count)
            condition.unlock()
            runBatch(batch)
        }
        finished.signal()
    }

    private func runBatch(_ batch: [Job]) {
        do {
            try database.inTransaction(.immediate) {
                for job in batch {
                    // A job that throws is rolled back alone and learns its error after the
                    // commit, unless SQLite rolled back the whole transaction (after a full
                    // disk, say): then the batch is lost.
                    if let error = job.run(database), !database.isInsideTransaction { throw error }
                }
            }
        } catch {
            batch.forEach { $0.abort(error) }
            return
        }
        condition.withLock {
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

/// Names the calling thread for the operating system (`top -H`, /proc/…/comm; at most 15
/// bytes) where the system offers it; elsewhere does nothing.
public func nameCurrentThread(_ name: String) {
    try? String(name.utf8.prefix(15))!.write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
}
