import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// A migrated database file in a temporary folder, with a running writer and a reader on it.
final class StoreFixture: @unchecked Sendable {
    let directory = TemporaryDirectory()
    let path: String
    private(set) var writer: GroupCommitWriter
    private var writerThread: ServiceGroup
    let store: TaskStore

    init(durability: Durability = .full, limits: TreeLimits = TreeLimits(), maximumBatchBytes: Int = 16 << 20,
         stepTasks: Int = 1_000, walSizeLimit: Int = GroupCommitWriter.defaultWALSizeLimit,
         walCheckInterval: Double = 1, observeCheckpoint: (@Sendable (Double) -> Void)? = nil,
         events: (any TaskEventSink)? = nil) throws {
        path = directory.file("headway.db")
        store = TaskStore(changeCounter: try DatabaseSetup.open(path: path).changeCounter, limits: limits,
                          stepTasks: stepTasks)
        // As the daemon's: the store's cache holds the batches' changes of tasks until they commit.
        writer = try GroupCommitWriter(path: path, durability: durability, maximumBatchBytes: maximumBatchBytes,
                                       walSizeLimit: walSizeLimit, walCheckInterval: walCheckInterval,
                                       heldWrites: store.cache, events: events, observeCheckpoint: observeCheckpoint)
        writerThread = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try writerThread.start()
    }

    deinit {
        writerThread.stop()
        directory.remove()
    }

    /// Stops the writer: what is queued commits, later submissions fail.
    func stopWriter() { writerThread.stop() }

    /// Starts a new writer on the same file (after `stopWriter()`).
    func restartWriter(durability: Durability = .full) throws {
        writer = try GroupCommitWriter(path: path, durability: durability, heldWrites: store.cache)
        writerThread = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try writerThread.start()
    }

    /// Runs `work` in the writer and waits for its committed result.
    func write<Value: Sendable>(_ work: @escaping @Sendable (Database) throws -> Value) throws -> Value {
        let done = DispatchSemaphore(value: 0)
        let box = Box<Result<Value, any Error>>()
        writer.submit(work) { result in
            box.value = result
            done.signal()
        }
        done.wait()
        return try box.value!.get()
    }

    /// Keeps the writer busy in a batch of its own until the returned function is called, so
    /// that the jobs submitted meanwhile wait in its queue and run together as one batch.
    func holdWriter() -> @Sendable () -> Void {
        let running = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        writer.submit({ _ in
            running.signal()
            release.wait()
        }) { _ in }
        running.wait()
        return { release.signal() }
    }

    /// Reads through a fresh connection, as another process would.
    func read<Value>(_ body: (Database) throws -> Value) throws -> Value {
        try body(try Database(path: path))
    }
}

final class Box<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value?
    var value: Value? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

@Suite struct GroupCommitWriterTests {
    @Test func concurrentWritersAreAllCommittedInFewerBatches() throws {
        let fixture = try StoreFixture()
        let writers = 8, perWriter = 250
        let group = DispatchGroup()
        let failures = Box<Int>()
        failures.value = 0
        let store = fixture.store
        for writerIndex in 0..<writers {
            DispatchQueue.global().async(group: group) {
                for index in 0..<perWriter {
                    group.enter()
                    let registration = Registration(id: "w\(writerIndex)-\(index)", name: "Task \(index)")
                    fixture.writer.submit({ database in try store.register(registration, now: 1, in: database) }) { result in
                        if case .failure = result { failures.value! += 1 }
                        group.leave()
                    }
                }
            }
        }
        group.wait()
        #expect(failures.value == 0)
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") } == Int64(writers * perWriter))
        let statistics = fixture.writer.statistics
        #expect(statistics.jobs == writers * perWriter)
        #expect(statistics.batches < statistics.jobs, "group commit should batch concurrent writes")
    }

    @Test func completionComesAfterCommit() throws {
        let fixture = try StoreFixture()
        let path = fixture.path
        let seenByOtherConnection = Box<Result<Int64?, any Error>>()
        let done = DispatchSemaphore(value: 0)
        fixture.writer.submit({ database in
            try database.execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'probe')")
        }) { _ in
            seenByOtherConnection.value = Result {
                try Database(path: path).scalar("SELECT count(*) FROM schema_migrations WHERE version = 999")
            }
            done.signal()
        }
        done.wait()
        #expect(try seenByOtherConnection.value?.get() == 1)
    }

    @Test func aFailingJobChangesNothingAndItsBatchStillCommits() throws {
        let fixture = try StoreFixture()
        let group = DispatchGroup()
        let outcomes = Box<[String: Bool]>()
        outcomes.value = [:]
        let release = fixture.holdWriter()
        let batchesBefore = fixture.writer.statistics.batches
        for (version, name) in [(1001, "a"), (1002, "bad"), (1003, "c")] {
            group.enter()
            fixture.writer.submit({ database in
                try database.run("INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                                 [.integer(Int64(version)), .text(name)])
                if name == "bad" { throw TaskError.notFound(name) }
            }) { result in
                if case .success = result { outcomes.value![name] = true } else { outcomes.value![name] = false }
                group.leave()
            }
        }
        release()
        group.wait()
        #expect(fixture.writer.statistics.batches == batchesBefore + 2, "the held batch, then the three jobs as one")
        #expect(outcomes.value == ["a": true, "bad": false, "c": true])
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM schema_migrations WHERE name = 'bad'") } == 0)
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM schema_migrations WHERE name IN ('a', 'c')") } == 2)
    }

    /// When a batch's COMMIT fails, every job of the batch gets the commit's error, nothing
    /// of the batch is stored, and the next change starts from the task as stored, not from
    /// what the failed batch had left in the writer's cache.
    @Test func aFailedCommitFailsEveryJobAndTheCacheForgetsTheBatch() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "kept", name: "Kept", total: 10), now: 1, in: $0) }
        _ = try fixture.write { try store.progress("kept", ProgressUpdate(completed: 2), now: 2, in: $0) }

        let release = fixture.holdWriter()
        let group = DispatchGroup()
        let results = Box<[String: Result<Int64, any Error>]>()
        results.value = [:]
        let jobs: [(String, @Sendable (Database) throws -> Int64)] = [
            ("progress", { try store.progress("kept", ProgressUpdate(completed: 7), now: 3, in: $0).outcome.task.completed }),
            ("register", { try store.register(Registration(id: "lost", name: "Lost"), now: 3, in: $0).task.completed }),
            ("refuse commit", { database in
                database.refuseCommits(true)
                return 0
            }),
        ]
        for (name, work) in jobs {
            group.enter()
            fixture.writer.submit(work) { result in
                results.value![name] = result
                group.leave()
            }
        }
        release()
        group.wait()

        let commitRefused: Int32 = 531 // SQLITE_CONSTRAINT_COMMITHOOK
        #expect(results.value?.count == 3)
        for (name, result) in results.value ?? [:] {
            let error = #expect(throws: DatabaseError.self, "\(name)") { try result.get() }
            #expect(error?.code == commitRefused, "\(name)")
            #expect(error?.sql == "COMMIT", "\(name)")
        }
        #expect(try fixture.read { try TaskRepository.find("kept", in: $0)?.completed } == 2)
        #expect(try fixture.read { try TaskRepository.find("lost", in: $0) } == nil)

        let next = try fixture.write { database in
            database.refuseCommits(false)
            return try store.progress("kept", ProgressUpdate(increment: 1), now: 4, in: database)
        }
        #expect(next.outcome.task.completed == 3, "2 stored + 1, not 7 + 1")
        #expect(try fixture.read { try TaskRepository.find("kept", in: $0)?.completed } == 3)
    }

    @Test func stopCommitsWhatIsQueuedAndRefusesMore() throws {
        let fixture = try StoreFixture(durability: .normal)
        let store = fixture.store
        for index in 0..<100 {
            fixture.writer.submit({ database in
                try store.register(Registration(id: "q\(index)", name: "Queued"), now: 1, in: database)
            }) { _ in }
        }
        fixture.stopWriter()
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") } == 100)
        let refused = Box<Bool>()
        fixture.writer.submit({ _ in 1 }) { result in
            if case .failure(let error) = result { refused.value = (error as? WriterError) == .stopped }
        }
        #expect(refused.value == true)
    }

    /// A reader that keeps an old snapshot (another connection in a transaction, as a
    /// `sqlite3` shell would) fails no write but keeps the WAL from being reset, so it grows;
    /// once the reader lets go, the writer empties it by itself, with no write after.
    @Test func theWALComesBackUnderItsLimitOnceAnOldSnapshotIsReleased() throws {
        let limit = 256 << 10
        let fixture = try StoreFixture(durability: .normal, walSizeLimit: limit, walCheckInterval: 0.05)
        let store = fixture.store
        let walPath = fixture.path + "-wal"
        func walBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: walPath))?[.size] as? Int ?? 0 }
        let reader = try Database(path: fixture.path)
        try reader.execute("BEGIN")
        let tasksSeen = try reader.scalar("SELECT count(*) FROM tasks")
        for batch in 0..<40 {
            try fixture.write { database in
                for index in 0..<50 {
                    _ = try store.register(Registration(id: "w\(batch)-\(index)", name: String(repeating: "n", count: 150)),
                                           now: 1, in: database)
                }
            }
        }
        #expect(walBytes() > limit, "the snapshot held keeps the WAL from being reset")
        #expect(try reader.scalar("SELECT count(*) FROM tasks") == tasksSeen, "the reader still sees its snapshot")
        try reader.execute("COMMIT")
        var bytes = walBytes()
        for _ in 0..<500 where bytes > limit {
            Thread.sleep(forTimeInterval: 0.02)
            bytes = walBytes()
        }
        #expect(bytes <= limit, "the WAL is back under its limit after the reader let go")
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") } == 2_000)
    }

    /// The checkpoint a commit makes due (1,000 pages in the WAL) runs after that batch's
    /// completions, not inside its commit: a completion finds the pages only in the WAL,
    /// and the database file takes them once the writer has checkpointed.
    @Test func theCheckpointACommitMakesDueRunsAfterItsCompletions() throws {
        let checkpointTimes = Box<[Double]>()
        checkpointTimes.value = []
        let checkpointed = DispatchSemaphore(value: 0)
        let fixture = try StoreFixture(durability: .normal, observeCheckpoint: { seconds in
            checkpointTimes.value!.append(seconds)
            checkpointed.signal()
        })
        let path = fixture.path
        @Sendable func databaseBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int ?? 0 }
        let pages = 1_100, pageBytes = 4_000
        let before = databaseBytes()
        let bytesAtCompletion = Box<Int>()
        let done = DispatchSemaphore(value: 0)
        fixture.writer.submit({ database in
            try database.execute("CREATE TABLE filler(bytes BLOB)")
            for _ in 0..<pages { try database.execute("INSERT INTO filler VALUES (zeroblob(\(pageBytes)))") }
        }) { _ in
            bytesAtCompletion.value = databaseBytes()
            done.signal()
        }
        done.wait()
        #expect(bytesAtCompletion.value == before, "the completion came before any checkpoint")
        #expect(checkpointed.wait(timeout: .now() + 10) == .success, "a checkpoint ran after it")
        #expect(databaseBytes() >= before + pages * pageBytes, "and copied the pages into the database file")
        #expect(checkpointTimes.value?.count == 1, "the checkpoint was observed, once")
        #expect(checkpointTimes.value?.allSatisfy { $0 > 0 } == true)
    }
}

@Suite struct TaskStoreTests {
    /// A query that stops after its first row must not leave its read transaction open:
    /// that would pin the reader to an old snapshot (and stop WAL checkpoints).
    @Test func readerSeesEveryNewCommitAfterEarlierQueries() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let reader = try DatabaseReader(path: fixture.path)
        _ = try fixture.write { try store.register(Registration(id: "r", name: "Read", total: 10), now: 1, in: $0) }
        for completed: Int64 in [1, 2, 3] {
            _ = try fixture.write { try store.progress("r", ProgressUpdate(completed: completed), now: 2, in: $0) }
            #expect(try reader.read { try TaskRepository.find("r", in: $0)?.completed } == completed)
            #expect(try reader.read { try $0.scalar("SELECT completed FROM tasks WHERE id = 'r'") } == completed)
            #expect(try reader.read { try $0.scalar("SELECT count(*) FROM schema_migrations") } != nil)
        }
    }

    /// The store remembers the tasks it wrote; what a rolled-back job wrote must not be
    /// remembered (the next change starts from what is stored).
    @Test func aRolledBackChangeIsNotRemembered() throws {
        struct Later: Error {}
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "c", name: "Cached", total: 10), now: 1, in: $0) }
        _ = try fixture.write { try store.progress("c", ProgressUpdate(completed: 2), now: 2, in: $0) }
        #expect(throws: Later.self) {
            _ = try fixture.write { database in
                _ = try store.progress("c", ProgressUpdate(completed: 7), now: 3, in: database)
                throw Later()
            }
        }
        let next = try fixture.write { try store.progress("c", ProgressUpdate(increment: 1), now: 4, in: $0) }
        #expect(next.outcome.task.completed == 3, "2 stored + 1, not 7 + 1")
        #expect(try fixture.read { try TaskRepository.find("c", in: $0)?.completed } == 3)
        // A refused change (a rule, before anything is written) leaves the task as it was.
        #expect(throws: TaskError.self) {
            _ = try fixture.write { try store.progress("c", ProgressUpdate(completed: 11), now: 5, in: $0) }
        }
        #expect(try fixture.write { try store.progress("c", ProgressUpdate(increment: 1), now: 6, in: $0) }
            .outcome.task.completed == 4)
    }

    @Test func dataSurvivesReopening() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "keep", name: "Kept", total: 10), now: 5, in: $0) }
        _ = try fixture.write { try store.progress("keep", ProgressUpdate(completed: 4, runnerSeq: 1), now: 6, in: $0) }
        fixture.stopWriter()
        try fixture.restartWriter()
        let task = try fixture.read { try TaskRepository.find("keep", in: $0) }
        #expect(task?.completed == 4)
        #expect(task?.lastRunnerSeq == 1)
        #expect(task?.total == 10)
    }

    @Test func registrationIsIdempotentAndConflictsAreRefused() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let registration = Registration(id: "same", name: "Same", total: 3)
        #expect(try fixture.write { try store.register(registration, now: 1, in: $0) }.created)
        let again = try fixture.write { try store.register(registration, now: 2, in: $0) }
        #expect(!again.created)
        #expect(again.task.createdAt == 1)
        #expect(throws: TaskError.registrationConflict("same")) {
            _ = try fixture.write { try store.register(Registration(id: "same", name: "Other"), now: 3, in: $0) }
        }
    }

    @Test func parentMustExistAndBeUnfinished() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        #expect(throws: TaskError.parentNotFound("ghost")) {
            _ = try fixture.write { try store.register(Registration(id: "c", name: "Child", parentID: "ghost"), now: 1, in: $0) }
        }
        _ = try fixture.write { try store.register(Registration(id: "p", name: "Parent"), now: 1, in: $0) }
        _ = try fixture.write { try store.finish("p", Finish(outcome: .succeeded), now: 2, in: $0) }
        #expect(throws: TaskError.parentFinished("p")) {
            _ = try fixture.write { try store.register(Registration(id: "c", name: "Child", parentID: "p"), now: 3, in: $0) }
        }
    }

    @Test func cancelAndDeleteReachEveryDescendant() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for (id, parent) in [("root", nil), ("a", "root"), ("b", "root"), ("a1", "a"), ("other", nil)] as [(String, String?)] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id, parentID: parent), now: 1, in: $0) }
        }
        _ = try fixture.write { try store.finish("b", Finish(outcome: .succeeded), now: 2, in: $0) }
        _ = try fixture.write { try store.cancel("root", now: 3, in: $0) }
        let flags = try fixture.read { database in
            try ["root", "a", "b", "a1", "other"].map { try TaskRepository.find($0, in: database)!.cancelRequested }
        }
        #expect(flags == [true, true, false, true, false])
        #expect(try fixture.write { try store.delete("root", now: 4, in: $0) }.count == 4)
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") } == 1)
        #expect(throws: TaskError.notFound("root")) { _ = try fixture.write { try store.delete("root", now: 4, in: $0) } }
    }

    /// A cancel cascades to children, also to one registered after it: the runner learns it
    /// from the registration's reply, as from every reply after a cancel.
    @Test func aChildRegisteredUnderACancelledParentIsBornCancelRequested() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "Parent"), now: 1, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "before", name: "Before", parentID: "p"), now: 1, in: $0) }
        _ = try fixture.write { try store.cancel("p", now: 2, in: $0) }
        let late = try fixture.write { try store.register(Registration(id: "late", name: "Late", parentID: "p"), now: 3, in: $0) }
        #expect(late.created && late.task.cancelRequested)
        #expect(late.events.first?.kind == .created && late.events.first?.data.contains(#""cancel_requested":true"#) == true)
        let grandchild = try fixture.write {
            try store.register(Registration(id: "grandchild", name: "Grandchild", parentID: "late"), now: 4, in: $0)
        }
        #expect(grandchild.task.cancelRequested)
        let other = try fixture.write { try store.register(Registration(id: "other", name: "Other"), now: 4, in: $0) }
        #expect(!other.task.cancelRequested)
        #expect(try fixture.read { try TaskRepository.find("late", in: $0)?.cancelRequested } == true)
    }

    /// A batch request's items are carried up once per parent: 20 shards reported at once
    /// under one parent, itself under a root, rewrite each ancestor once with one event
    /// each, after the items' events, and leave the fractions the items one by one leave.
    @Test func aBatchRollsEachAncestorUpOnce() throws {
        func tree(_ fixture: StoreFixture) throws {
            let store = fixture.store
            _ = try fixture.write { try store.register(Registration(id: "root", name: "Root"), now: 1, in: $0) }
            _ = try fixture.write { try store.register(Registration(id: "build", name: "Build", parentID: "root"), now: 1, in: $0) }
            _ = try fixture.write { try store.register(Registration(id: "lint", name: "Lint", parentID: "root"), now: 1, in: $0) }
            for shard in 0..<20 {
                _ = try fixture.write {
                    try store.register(Registration(id: "shard-\(shard)", name: "Shard", parentID: "build", total: 7), now: 1, in: $0)
                }
            }
        }
        let items = (0..<20).map { ProgressItem(id: "shard-\($0)", update: ProgressUpdate(completed: Int64($0 % 7 + 1))) }
            + [ProgressItem(id: "shard-3", update: ProgressUpdate(increment: 2)), ProgressItem(id: "nowhere", update: ProgressUpdate(increment: 1))]

        let batched = try StoreFixture()
        try tree(batched)
        let results = try batched.write { try batched.store.progress(each: items, now: 5, in: $0) }
        #expect(results.count == 22)
        #expect(throws: TaskError.notFound("nowhere")) { try results[21].get() }
        let events = results.flatMap { (try? $0.get())?.events ?? [] }
        #expect(events.map(\.taskID) == items.prefix(21).map(\.id) + ["build", "root"])
        #expect(events.map(\.changeNumber) == events.map(\.changeNumber).sorted())
        #expect(try results[20].get().events.map(\.taskID) == ["shard-3", "build", "root"])

        let oneByOne = try StoreFixture()
        try tree(oneByOne)
        for item in items.prefix(21) {
            _ = try oneByOne.write { try oneByOne.store.progress(item.id, item.update, now: 5, in: $0) }
        }
        for id in ["build", "root", "lint", "shard-3"] {
            let (batch, single) = (try batched.read { try TaskRepository.find(id, in: $0)! },
                                   try oneByOne.read { try TaskRepository.find(id, in: $0)! })
            #expect(batch.fraction == single.fraction
                    || abs((batch.fraction ?? -1) - (single.fraction ?? -2)) < 1e-12, "\(id)")
            #expect(batch.completed == single.completed && batch.state == single.state, "\(id)")
        }
    }

    /// An update writes only the columns that changed: after each kind of change, the row
    /// as another connection reads it is the task the writer returned, field for field.
    @Test func everyChangeIsStoredAsTheWriterReturnedIt() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "job", name: "Job"), now: 1_000, in: $0) }
        _ = try fixture.write {
            try store.register(Registration(id: "step", name: "Step", parentID: "job", weight: 2, total: 10), now: 1_000, in: $0)
        }
        let changes: [(Int64, @Sendable (Database) throws -> TaskStore.Changed)] = [
            (2_000, { try store.progress("step", ProgressUpdate(completed: 3, unit: "files", label: "Copying"), now: 2_000, in: $0) }),
            (3_000, { try store.progress("step", ProgressUpdate(increment: 2, total: 12, runnerSeq: 7), now: 3_000, in: $0) }),
            (4_000, { try store.heartbeat("step", Heartbeat(label: "Still copying"), now: 4_000, in: $0) }),
            (5_000, { try store.progress("step", ProgressUpdate(increment: 1, label: "Copying the last files"), now: 5_000, in: $0) }),
            (6_000, { try store.finish("step", Finish(outcome: .failed, message: "Disk full"), now: 6_000, in: $0) }),
        ]
        for (now, change) in changes {
            let changed = try fixture.write(change)
            for id in ["step", "job"] {
                let written = changed.events.first { $0.taskID == id }
                let stored = try #require(try fixture.read { try TaskRepository.find(id, in: $0) })
                if id == "step" { #expect(stored == changed.outcome.task, "at \(now)") }
                if let written { #expect(stored.json == written.data, "\(id) at \(now)") }
            }
        }
        let cancelled = try fixture.write { try store.cancel("job", now: 7_000, in: $0) }
        for event in cancelled.events {
            #expect(try fixture.read { try TaskRepository.find(event.taskID, in: $0)?.json } == event.data)
        }
    }

    @Test func pagesWalkNewestFirstWithoutGapsOrRepeats() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for index in 0..<25 {
            _ = try fixture.write {
                try store.register(Registration(id: "t\(index)", name: "T", state: index % 2 == 0 ? .pending : .running),
                                   now: Int64(index), in: $0)
            }
        }
        var seen: [String] = []
        var key: Int64?
        repeat {
            let page = try fixture.read { try TaskRepository.page(TaskFilter(states: [.pending]), size: 5, beforeKey: key, in: $0) }
            #expect(page.totalSize == 13)
            seen += page.tasks.map(\.id)
            key = page.nextKey
        } while key != nil
        #expect(seen == stride(from: 24, through: 0, by: -2).map { "t\($0)" })
    }

    /// The counts kept by triggers agree with counting rows, for every filter, through
    /// registrations, state changes and cascading deletes.
    @Test func keptCountsMatchCountedRows() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        var generator = SeededGenerator(seed: 9)
        var ids: [String] = []
        var parents: [String: String] = [:]
        for index in 0..<120 {
            let id = "c\(index)"
            let parent = index > 10 && Bool.random(using: &generator) ? ids.randomElement(using: &generator) : nil
            let registration = Registration(id: id, name: "T", parentID: parent,
                                            state: Bool.random(using: &generator) ? .pending : .running)
            _ = try fixture.write { try store.register(registration, now: 1, in: $0) }
            ids.append(id)
            parents[id] = parent
        }
        var finished: Set<String> = []
        for id in ids.shuffled(using: &generator).prefix(60) {
            let outcome = [TaskState.succeeded, .failed, .canceled].randomElement(using: &generator)!
            _ = try fixture.write { try store.finish(id, Finish(outcome: outcome), now: 2, in: $0) }
            finished.insert(id)
        }
        // Whether `id` is `root` or one of its descendants.
        func isInTree(_ id: String, of root: String) -> Bool {
            var current: String? = id
            while let ancestor = current, ancestor != root { current = parents[ancestor] }
            return current == root
        }
        var deleted: Set<String> = []
        var refusedAsGone = 0, refusedAsFinished = 0
        for id in ids.shuffled(using: &generator).prefix(30) {
            if deleted.contains(id) {
                // Gone with an ancestor deleted earlier.
                refusedAsGone += 1
                #expect(throws: TaskError.notFound(id)) { _ = try fixture.write { try store.heartbeat(id, Heartbeat(), now: 3, in: $0) } }
                #expect(throws: TaskError.notFound(id)) { _ = try fixture.write { try store.delete(id, now: 4, in: $0) } }
                continue
            }
            if finished.contains(id) {
                refusedAsFinished += 1
                let refusal = #expect(throws: TaskError.self) {
                    _ = try fixture.write { try store.heartbeat(id, Heartbeat(), now: 3, in: $0) }
                }
                #expect(refusal?.code == "task_finished")
            } else {
                _ = try fixture.write { try store.heartbeat(id, Heartbeat(), now: 3, in: $0) }
            }
            let removed = ids.filter { !deleted.contains($0) && isInTree($0, of: id) }
            #expect(try fixture.write { try store.delete(id, now: 4, in: $0) }.count == removed.count)
            deleted.formUnion(removed)
        }
        #expect(refusedAsGone > 0 && refusedAsFinished > 0, "the seed makes both kinds of refusal")
        try fixture.read { database in
            for states in [[], [TaskState.pending], [.running, .pending], [.succeeded, .failed, .canceled]] {
                for stalled in [nil, false, true] as [Bool?] {
                    for rootOnly in [false, true] {
                        let filter = TaskFilter(states: states, stalled: stalled, rootOnly: rootOnly)
                        var conditions = ["1"]
                        if !states.isEmpty { conditions.append("state IN (\(states.map { "'\($0.rawValue)'" }.joined(separator: ",")))") }
                        if let stalled { conditions.append("stalled = \(stalled ? 1 : 0)") }
                        if rootOnly { conditions.append("parent_id IS NULL") }
                        let counted = try database.scalar("SELECT count(*) FROM tasks WHERE " + conditions.joined(separator: " AND "))
                        #expect(try TaskRepository.count(filter, in: database) == counted, "\(filter)")
                    }
                }
            }
        }
    }
}
