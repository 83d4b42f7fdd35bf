import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// Two writers on one PostgreSQL database, as two daemons have: each with its store, its
/// cache (holding the batches' writes, as the daemon's does) and `SharedWriting`; every
/// event its writer publishes (its own, after each commit, and the other's, delivered) is
/// recorded in the order its writer thread handled them.
final class SharedWriter: @unchecked Sendable {
    let store: TaskStore
    let writer: GroupCommitWriter
    let shared: SharedWriting
    private let group: ServiceGroup
    /// Every event this writer's broker would have been given, in order.
    var stream: Locked<[TaskEvent]> { sink.events }
    private let sink = RecordingSink()

    /// `quietSeconds`: `SharedWriting`'s (0: every batch takes the order in its pipeline);
    /// `lockWaitWhenTakenLast`: `SharedWriting`'s.
    init(uri: String, quietSeconds: Double = 1, lockWaitWhenTakenLast: Double = 0.1) throws {
        let counter = try DatabaseSetup.open(path: uri).changeCounter
        let cache = TaskCache()
        shared = SharedWriting(changeCounter: counter, cache: cache, quietSeconds: quietSeconds,
                               lockWaitWhenTakenLast: lockWaitWhenTakenLast)
        store = TaskStore(changeCounter: counter, cache: cache)
        writer = try GroupCommitWriter(path: uri, durability: .normal, coordinator: shared, heldWrites: cache, events: sink)
        group = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try group.start()
    }

    deinit { group.stop() }

    /// Runs `work` in a batch and waits for it; its events join the stream once committed
    /// (the writer publishes them); returns them.
    @discardableResult
    func write<Value: CarriesTaskEvents & Sendable>(_ work: @escaping @Sendable (TaskStore, Database) throws -> Value) throws
        -> [TaskEvent] {
        try run(work).events
    }

    /// Runs `work` in a batch and waits for it; returns its result.
    func run<Value: Sendable>(_ work: @escaping @Sendable (TaskStore, Database) throws -> Value) throws -> Value {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<Value, any Error>?>(nil)
        writer.submit({ [store] database in try work(store, database) }) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Every stored task, by id, its change number left out (two databases number alike
    /// changes differently).
    func storedTasks() throws -> [String: TaskRecord] {
        try run { _, database in
            let tasks = try database.rows("SELECT \(TaskRepository.columns) FROM tasks", map: TaskRepository.record)
            return Dictionary(uniqueKeysWithValues: tasks.map { task in
                var task = task
                task.changeNumber = 0
                return (task.id, task)
            })
        }
    }

    /// The stored change number of every task, by id.
    func storedChangeNumbers() throws -> [String: Int64] {
        try run { _, database in
            Dictionary(uniqueKeysWithValues: try database.rows("SELECT id, change_seq FROM tasks") { ($0.text(0), $0.int(1)) })
        }
    }

    /// Runs `work` in a batch and waits at most `seconds` for it to commit; returns whether
    /// it did (it may still commit later).
    func runWithin<Value: Sendable>(seconds: Int, _ work: @escaping @Sendable (TaskStore, Database) throws -> Value) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let committed = Locked(false)
        writer.submit({ [store] database in try work(store, database) }) { outcome in
            if case .success = outcome { committed.withLock { $0 = true } }
            done.signal()
        }
        return done.wait(timeout: .now() + .seconds(seconds)) == .success && committed.withLock { $0 }
    }

    /// Applies `update` to task `id` in a batch of this writer, from inside a job of
    /// another's batch (which runs ahead of the order, so this one need not wait for it):
    /// whether it committed within 10 s.
    func commits(_ id: String, _ update: ProgressUpdate, now: EpochMilliseconds) -> Bool {
        runWithin(seconds: 10) { store, db in try store.progress(id, update, now: now, in: db) }
    }

    /// Asks the writer to deliver what the other committed (as `ChangeListener` does) and
    /// waits until it has.
    func catchUp() -> Bool {
        let done = DispatchSemaphore(value: 0)
        let delivered = Locked(false)
        writer.submitCatchUp { outcome in
            delivered.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return delivered.withLock { $0 }
    }

    /// The stored `completed` of each of `ids`, read in a batch (its events not recorded).
    func storedCompleted(_ ids: [String]) throws -> [String: Int64] {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<[String: Int64], any Error>?>(nil)
        writer.submit({ database in
            var completed: [String: Int64] = [:]
            for id in ids { completed[id] = try TaskRepository.find(id, in: database)?.completed }
            return completed
        }) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// Adds `increment` to task `id` (with the runner's `seq`, if given).
    @discardableResult
    func increment(_ id: String, by increment: Int64 = 1, seq: Int64? = nil) throws -> [TaskEvent] {
        try write { store, database in
            try store.progress(id, ProgressUpdate(increment: increment, runnerSeq: seq), now: 1_000, in: database)
        }
    }
}

@Suite(.serialized, .enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
struct SharedWritingTests {
    /// The latest `completed` of each task in `events`.
    static func latestCompleted(_ events: [TaskEvent]) -> [String: Int64] {
        var latest: [String: Int64] = [:]
        for event in events where event.kind != .deleted {
            if case .object(let task) = JSONValue.parse(Array(event.data.utf8)), case .integer(let completed) = task["completed"] {
                latest[event.taskID] = completed
            }
        }
        return latest
    }

    /// Writers taking turns on one task: each reads the other's change (its cache is
    /// forgotten when the other wrote), a retry with the same `seq` on the other writer is
    /// not applied again, and each writer's stream holds the other's changes in order.
    @Test func writersTakingTurnsSeeEachOthersChanges() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        try a.write { store, db in try store.register(Registration(id: "t", name: "T", total: 100), now: 1_000, in: db) }
        try a.increment("t", by: 5, seq: 1)
        try b.increment("t", by: 7, seq: 2)
        try a.increment("t", by: 11, seq: 3)
        #expect(try b.increment("t", by: 11, seq: 3).isEmpty, "a retry on the other writer is acknowledged, not applied")
        try b.increment("t", by: 1, seq: 4)
        #expect(a.catchUp())
        #expect(Self.latestCompleted(a.stream.withLock { $0 })["t"] == 24,
                "a catch-up outside any batch delivers what the other committed")
        #expect(try a.storedCompleted(["t"]) == ["t": 24])
        for writer in [a, b] {
            let stream = writer.stream.withLock { $0 }
            let numbers = stream.map(\.changeNumber)
            #expect(numbers == numbers.sorted() && Set(numbers).count == numbers.count, "\(stream.map { "\($0.changeNumber) \($0.kind) \($0.taskID)" })")
            #expect(Self.latestCompleted(stream)["t"] == 24)
        }
    }

    /// A daemon's listener leaves the notifications of its own commits alone (its writer's
    /// session sent them, and its writer delivers those changes itself): only another
    /// session's notification of a change not yet delivered asks the writer to catch up.
    @Test func aListenerLeavesItsOwnWritersNotificationsAlone() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        try a.write { store, db in try store.register(Registration(id: "t", name: "T"), now: 1_000, in: db) }
        // No look at `stream_state` after the first: only notifications wake it.
        let listener = ChangeListener(location: database.uri, writer: a.writer, sharedWriting: a.shared, pollInterval: 3_600)
        let group = ServiceGroup([ServiceGroup.Member("test-listen", listener)])
        try group.start()
        defer { group.stop() }
        for seq in 1...50 { try a.increment("t", seq: Int64(seq)) }
        // Another session's notification, committed after theirs, reaches the listener after them.
        let other = try Database(path: database.uri)
        defer { other.close() }
        try other.execute("SELECT pg_notify('\(SharedWriting.channel)', '\(Int64.max)')")
        for _ in 0..<1_000 where listener.catchUpsAsked.load(ordering: .relaxed) == 0 { usleep(10_000) }
        #expect(listener.catchUpsAsked.load(ordering: .relaxed) == 1)
    }

    /// Concurrent writers on both: every increment counted once, change numbers never
    /// given twice, and each writer's stream strictly increasing and ending at every task's
    /// final value: no change skipped, whichever writer committed it. Each writer's
    /// `quietSeconds` as given (0: its batches take the order last, whenever they can).
    @Test(arguments: [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    func concurrentWritersNumberChangesInCommitOrderWithoutGaps(quietSeconds: [Double]) throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let writers = try quietSeconds.map { try SharedWriter(uri: database.uri, quietSeconds: $0) }
        let ids = ["shared", "a-only", "b-only"]
        for id in ids {
            try writers[0].write { store, db in try store.register(Registration(id: id, name: id), now: 1_000, in: db) }
        }
        let rounds = 150
        let failures = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            let writer = writers[thread % 2]
            for round in 0..<rounds {
                let id = round % 3 == 0 ? "shared" : (thread % 2 == 0 ? "a-only" : "b-only")
                do { try writer.increment(id) } catch { failures.withLock { $0 += 1 } }
            }
        }
        #expect(failures.withLock { $0 } == 0)
        for writer in writers { #expect(writer.catchUp()) }
        let streams = writers.map { writer in writer.stream.withLock { $0 } }
        let expected = try writers[0].storedCompleted(ids)
        #expect(expected["shared"] == Int64(8 * 50))
        #expect(expected["a-only"] == Int64(4 * 100))
        #expect(expected["b-only"] == Int64(4 * 100))
        var own: [[Int64]] = []
        for stream in streams {
            let numbers = stream.map(\.changeNumber)
            #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $0 < $1 }, "strictly increasing")
            #expect(Self.latestCompleted(stream) == expected)
            own.append(numbers)
        }
        // Both streams end at the same latest change, and every number either writer gave
        // is in the other's stream unless a later change of the same task replaced it.
        #expect(own[0].last == own[1].last)
    }

    /// Jobs run without savepoints on PostgreSQL: a job refused by the rules changes
    /// nothing and its batch goes on; a job that throws after writing, or whose statement
    /// fails (which aborts a PostgreSQL transaction), has its batch run again with a
    /// savepoint per job: the others commit, it alone is undone.
    @Test func aJobThatFailsAfterWritingIsUndoneAloneInItsBatch() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let member = try SharedWriter(uri: database.uri)
        try member.write { store, db in try store.register(Registration(id: "dup", name: "D"), now: 1_000, in: db) }
        struct AfterWriting: Error {}
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        member.writer.submit({ _ in
            started.signal()
            release.wait()
        }) { _ in }
        started.wait()
        let outcomes = Locked<[String: Bool]>([:])
        let done = DispatchGroup()
        func submit(_ name: String, _ work: @escaping @Sendable (TaskStore, Database) throws -> Void) {
            done.enter()
            member.writer.submit({ [store = member.store] db in try work(store, db) }) { result in
                outcomes.withLock { $0[name] = (try? result.get()) != nil }
                done.leave()
            }
        }
        submit("a") { store, db in _ = try store.register(Registration(id: "a", name: "A"), now: 1_000, in: db) }
        submit("refused") { store, db in _ = try store.progress("missing", ProgressUpdate(increment: 1), now: 1_000, in: db) }
        submit("b") { store, db in
            _ = try store.register(Registration(id: "b", name: "B"), now: 1_000, in: db)
            throw AfterWriting()
        }
        submit("c") { store, db in _ = try store.register(Registration(id: "c", name: "C"), now: 1_000, in: db) }
        submit("failed statement") { _, db in
            try db.run("INSERT INTO tokens (id, name, scopes, secret_hash, created_at) VALUES ('x', 'x', 'read', 'h', 1)")
            try db.run("INSERT INTO tokens (id, name, scopes, secret_hash, created_at) VALUES ('x', 'y', 'read', 'i', 1)")
        }
        submit("d") { store, db in _ = try store.register(Registration(id: "d", name: "D"), now: 1_000, in: db) }
        release.signal()
        done.wait()
        #expect(outcomes.withLock { $0 } == ["a": true, "refused": false, "b": false, "c": true,
                                              "failed statement": false, "d": true])
        let stored = try member.storedCompleted(["a", "b", "c", "d"])
        #expect(Set(stored.keys) == ["a", "c", "d"])
        #expect(try database.psql("SELECT count(*) FROM tokens", database: database.name) == "0\n")
    }

    /// Writers taking turns on one tree, each change rolled up into parents that both
    /// writers cache: the other writer's quiet writes (signal times, counts of failing
    /// children, retention's count of stored children, none of them numbered or in the
    /// change feed) reach this writer's cache, so every task ends as one writer applying
    /// the same operations in the same order leaves it.
    @Test func writersTakingTurnsOnATreeEndAsOneWriterWould() throws {
        let operations: [TreeOperation] = [
            .register("root", parent: nil), .register("p", parent: "root"), .register("c1", parent: "p"),
            .register("c2", parent: "p"), .register("p2", parent: "root"), .register("c3", parent: "p2"),
            .register("c4", parent: "p2"),
            .progress("c1", completed: 1), .heartbeat("c2"), .heartbeat("c1"), .finish("c3", .failed),
            .finish("c2", .failed), .heartbeat("c1"), .prune, .register("c5", parent: "p2"), .heartbeat("c4"),
            .progress("c1", completed: 5), .heartbeat("c5"), .finish("c4", .succeeded), .heartbeat("c1"),
        ]
        // The moments: signals within a second of the last one published are written quietly,
        // and the writers' clocks disagree (the second runs 350 ms ahead): a writer whose
        // cache kept an ancestor's signal time from before the other's quiet one would write
        // its own, earlier, over it.
        let moments = operations.indices.map { index in Int64(10_000 + 200 * index + (index % 2 == 1 ? 350 : 0)) }
        let shared = try TestPostgresDatabase()
        defer { shared.drop() }
        let alone = try TestPostgresDatabase()
        defer { alone.drop() }
        let writers = [try SharedWriter(uri: shared.uri), try SharedWriter(uri: shared.uri)]
        let serial = try SharedWriter(uri: alone.uri)
        for (index, operation) in operations.enumerated() {
            let applied = try writers[index % 2].run { store, database in try operation.apply(store, now: moments[index], in: database) }
            let appliedAlone = try serial.run { store, database in try operation.apply(store, now: moments[index], in: database) }
            #expect(applied.refused == appliedAlone.refused && applied.events.map(\.kind) == appliedAlone.events.map(\.kind),
                    "operation \(index): \(operation)")
        }
        let stored = try writers[0].storedTasks()
        let expected = try serial.storedTasks()
        #expect(Set(stored.keys) == Set(expected.keys))
        for (id, task) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(stored[id] == task, "\(id): \(stored[id]?.json ?? "missing") instead of \(task.json)")
        }
        #expect(stored["p"]?.failingChildren == 1 && stored["root"]?.failingChildren == 2)
        #expect(stored["p2"]?.childCount == 2, "c3 pruned, c5 registered")
    }

    /// Both writers at once on the children of shared parents, with moments that disagree
    /// as the clocks of two hosts do: every task (its roll-up's quiet columns included)
    /// ends as one writer applying the operations in the order they ran leaves it, jobs
    /// running one batch at a time under the writers' lock; each writer's stream is
    /// strictly increasing and its last event of every task is the task's stored change.
    /// Each writer's `quietSeconds` as given (0: its batches take the order last, whenever
    /// they can).
    @Test(arguments: [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    func concurrentWritersOnATreeEndAsOneWriterWould(quietSeconds: [Double]) throws {
        let shared = try TestPostgresDatabase()
        defer { shared.drop() }
        let writers = try quietSeconds.map { try SharedWriter(uri: shared.uri, quietSeconds: $0) }
        var setup: [TreeOperation] = [.register("root", parent: nil)]
        for parent in 0..<3 {
            setup.append(.register("p\(parent)", parent: "root"))
            for child in 0..<4 { setup.append(.register("p\(parent)-c\(child)", parent: "p\(parent)")) }
        }
        var random = SeededGenerator(seed: 50)
        let children = (0..<3).flatMap { parent in (0..<4).map { "p\(parent)-c\($0)" } }
        let threads = 6, perThread = 60
        let operations: [[TreeOperation]] = (0..<threads).map { _ in
            (0..<perThread).map { step in
                let child = children[Int(random.next() % UInt64(children.count))]
                switch random.next() % 10 {
                case 0: return .finish(child, random.next() % 2 == 0 ? .failed : .succeeded)
                case 1, 2, 3: return .progress(child, completed: Int64(step))
                default: return .heartbeat(child)
                }
            }
        }
        for (index, operation) in setup.enumerated() {
            _ = try writers[0].run { store, database in try operation.apply(store, now: Int64(1_000 + index), in: database) }
        }
        // The order in which the jobs ran, all writers together: one batch at a time holds
        // the lock, and its jobs run in order (a batch run again runs them again, in order).
        let ran = Locked<(next: Int, order: [Int: Int])>((0, [:]))
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            let writer = writers[thread % 2]
            for (step, operation) in operations[thread].enumerated() {
                let number = thread * perThread + step
                let now = Int64(20_000 + 37 * step + 311 * thread)
                do {
                    _ = try writer.run { store, database in
                        ran.withLock { ran in
                            ran.order[number] = ran.next
                            ran.next += 1
                        }
                        return try operation.apply(store, now: now, in: database)
                    }
                } catch {
                    failures.withLock { $0.append("\(operation): \(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        for writer in writers { #expect(writer.catchUp()) }

        let alone = try TestPostgresDatabase()
        defer { alone.drop() }
        let serial = try SharedWriter(uri: alone.uri)
        for (index, operation) in setup.enumerated() {
            _ = try serial.run { store, database in try operation.apply(store, now: Int64(1_000 + index), in: database) }
        }
        for (number, _) in ran.withLock({ $0.order }).sorted(by: { $0.value < $1.value }) {
            let (thread, step) = number.quotientAndRemainder(dividingBy: perThread)
            let operation = operations[thread][step]
            _ = try serial.run { store, database in
                try operation.apply(store, now: Int64(20_000 + 37 * step + 311 * thread), in: database)
            }
        }
        let stored = try writers[0].storedTasks()
        let expected = try serial.storedTasks()
        #expect(Set(stored.keys) == Set(expected.keys))
        for (id, task) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(stored[id] == task, "\(id): \(stored[id]?.json ?? "missing") instead of \(task.json)")
        }

        let numbers = try writers[0].storedChangeNumbers()
        for writer in writers {
            let stream = writer.stream.withLock { $0 }
            let streamNumbers = stream.map(\.changeNumber)
            #expect(zip(streamNumbers, streamNumbers.dropFirst()).allSatisfy { $0 < $1 }, "strictly increasing")
            var last: [String: Int64] = [:]
            for event in stream { last[event.taskID] = event.changeNumber }
            #expect(last == numbers, "each task's last event is its stored change")
        }
    }

    /// A writer whose cache holds tasks reads none of them again after the other writer
    /// wrote other tasks (and their parent): only what the other wrote is forgotten, and
    /// what the change feed brought is remembered as committed.
    @Test func aWriterKeepsTheTasksTheOtherDidNotWrite() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        for operation: TreeOperation in [.register("p", parent: nil), .register("mine-1", parent: "p"),
                                         .register("mine-2", parent: "p"), .register("theirs", parent: "p")] {
            _ = try a.run { store, db in try operation.apply(store, now: 1_000, in: db) }
        }
        try a.increment("mine-1")
        try a.increment("mine-2")
        // The other writes a change of `theirs`, rolled up into `p`, which this writer's
        // catch-up reads from the change feed; then a signal of `theirs`, numbered, carried
        // up to `p` quietly (within a second of its last change published).
        try b.increment("theirs")
        #expect(a.catchUp())
        _ = try b.run { store, db in try TreeOperation.heartbeat("theirs").apply(store, now: 1_300, in: db) }
        let rowsRead = try a.run { store, db in
            let before = db.rowsRead
            for id in ["mine-1", "mine-2"] {
                _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000, in: db)
            }
            return db.rowsRead - before
        }
        // Each progress rolls up into `p`, whose row the catch-up read before the other's
        // quiet write: read again, once.
        #expect(rowsRead == 1, "only the task the other wrote without a number since it was read is read again")
        let theirsRead = try a.run { store, db in
            let before = db.rowsRead
            _ = try store.progress("theirs", ProgressUpdate(increment: 1), now: 2_100, in: db)
            return db.rowsRead - before
        }
        #expect(theirsRead == 0, "a task the other changed with a number is taken from the change feed")
        #expect(try a.storedCompleted(["mine-1", "mine-2", "theirs"]) == ["mine-1": 2, "mine-2": 2, "theirs": 2])
    }

    /// A generation whose batch named no tasks (a daemon of a build that names none, or a
    /// name pruned) leaves the others unable to tell what it wrote: they forget their
    /// whole cache.
    @Test func aGenerationWithoutNamesForgetsTheWholeCache() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        for id in ["x", "y", "z"] {
            try a.write { store, db in try store.register(Registration(id: id, name: id, total: 100), now: 1_000, in: db) }
        }
        try b.increment("z")
        _ = try database.psql("DELETE FROM written_tasks WHERE generation = (SELECT generation FROM stream_state)",
                              database: database.name)
        let rowsRead = try a.run { store, db in
            let before = db.rowsRead
            for id in ["x", "y"] { _ = try store.progress(id, ProgressUpdate(increment: 1), now: 2_000, in: db) }
            return db.rowsRead - before
        }
        #expect(rowsRead == 2)
    }

    /// Every `writtenPruneInterval`-th generation deletes the names older than the
    /// `writtenGenerationsKept` latest, in the statement that moves the generation.
    @Test func theOldestNamesArePruned() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        try a.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        let next = 5 * SharedWriting.writtenPruneInterval
        _ = try database.psql("""
            DELETE FROM written_tasks;
            INSERT INTO written_tasks SELECT g, '{}' FROM generate_series(1, \(next - 1)) AS g;
            UPDATE stream_state SET generation = \(next - 1);
            """, database: database.name)
        try a.increment("x")
        let kept = next - SharedWriting.writtenGenerationsKept
        #expect(try database.psql("SELECT min(generation), max(generation), count(*) FROM written_tasks",
                                  database: database.name) == "\(kept + 1)|\(next)|\(next - kept)\n")
        #expect(try database.psql("SELECT ids FROM written_tasks WHERE generation = \(next)", database: database.name)
            == "{x}\n")
    }

    /// The names travel as an array's text: any text comes back as it was (task ids hold
    /// none of the characters it quotes, but nothing relies on it).
    @Test func theNamesTravelAsAnArrayThatKeepsEveryText() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let ids = ["plain", "a\"b", "c\\d", "e,f", "{g}", " h ", "NULL", ""]
        let literal = SharedWriting.arrayLiteral(ids)
        #expect(try database.psql("SELECT array_to_json($$\(literal)$$::text[])", database: database.name)
            == #"["plain","a\"b","c\\d","e,f","{g}"," h ","NULL",""]"# + "\n")
        #expect(SharedWriting.arrayLiteral([]) == "{}")
    }

    /// A batch runs ahead of the writers' order until it writes: another writer commits
    /// changes of other tasks while its jobs run (they do not wait for it), and its own
    /// changes are numbered after those, the rows as their events; the stream delivers
    /// the other's first, with no number missing.
    @Test func aBatchRunsAheadOfTheOrderAndNumbersItsChangesAfterThoseCommittedMeanwhile() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        for id in ["x", "y"] {
            try a.write { store, db in try store.register(Registration(id: id, name: id, total: 100), now: 1_000, in: db) }
        }
        // The other writes between this one's batches: this one takes the order in two
        // steps (a round trip to lock, then its writes), which can move its numbers. (So
        // it would anyway, within a second of the other's commit.)
        try b.write { store, db in try store.progress("y", ProgressUpdate(completed: 4), now: 1_500, in: db) }
        let runs = Locked(0)
        let otherCommitted = Locked(false)
        try a.write { store, db in
            runs.withLock { $0 += 1 }
            var events = try store.progress("x", ProgressUpdate(completed: 1), now: 2_000, in: db).events
            let committed = b.commits("y", ProgressUpdate(completed: 5), now: 2_001)
            otherCommitted.withLock { $0 = committed }
            events += try store.progress("x", ProgressUpdate(completed: 2), now: 2_002, in: db).events
            return TreeOperation.Applied(events: events)
        }
        #expect(otherCommitted.withLock { $0 }, "the other writer waited for this one's batch")
        #expect(runs.withLock { $0 } == 1)
        let numbers = try a.storedChangeNumbers()
        #expect(numbers["x"] == numbers["y"]! + 2)
        let stream = a.stream.withLock { $0 }.map { "\($0.changeNumber) \($0.taskID)" }
        let first = numbers["y"]! - 4
        #expect(stream == ["\(first + 1) x", "\(first + 2) y", "\(first + 3) y", "\(first + 4) y", "\(first + 5) x",
                           "\(first + 6) x"], "registrations, the other's changes, then this batch's")
        #expect(try a.storedCompleted(["x", "y"]) == ["x": 2, "y": 5])
    }

    /// When no other writer committed lately, a batch takes the order in the pipeline of
    /// its writes, the lock with no round trip of its own; if another writer did commit
    /// during it after all, the pipeline fails and the batch runs again, holding the order
    /// from its start: its changes come after the other's, no number lost.
    @Test func aBatchTakingTheOrderInItsPipelineRunsAgainIfAnotherCommittedMeanwhile() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri, quietSeconds: 0)
        let b = try SharedWriter(uri: database.uri)
        for id in ["x", "y"] {
            try a.write { store, db in try store.register(Registration(id: id, name: id, total: 100), now: 1_000, in: db) }
        }
        let runs = Locked(0)
        let otherCommitted = Locked(false)
        try a.write { store, db in
            let run = runs.withLock { runs in
                runs += 1
                return runs
            }
            var events = try store.progress("x", ProgressUpdate(completed: run == 1 ? 1 : 2), now: 2_000, in: db).events
            if run == 1 {
                let committed = b.commits("y", ProgressUpdate(completed: 5), now: 2_001)
                otherCommitted.withLock { $0 = committed }
            }
            events += try store.progress("x", ProgressUpdate(completed: 3), now: 2_002, in: db).events
            return TreeOperation.Applied(events: events)
        }
        #expect(otherCommitted.withLock { $0 })
        #expect(runs.withLock { $0 } == 2)
        #expect(a.writer.orderingReruns == 1)
        let stream = a.stream.withLock { $0 }.map { "\($0.changeNumber) \($0.taskID)" }
        let first = try #require(a.stream.withLock { $0 }.first?.changeNumber) - 1
        #expect(stream == ["\(first + 1) x", "\(first + 2) y", "\(first + 3) y", "\(first + 4) x", "\(first + 5) x"])
        #expect(try a.storedCompleted(["x", "y"]) == ["x": 3, "y": 5])
        #expect(try a.storedChangeNumbers() == ["x": first + 5, "y": first + 3])
    }

    /// A webhook's delivery stores its event's number: a change numbered ahead of the
    /// order takes the order before its deliveries are written, and they carry the number
    /// the change is stored and streamed with.
    @Test func deliveriesOfAChangeNumberedAheadOfTheOrderCarryItsFinalNumber() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        let hook = WebhookRecord(id: "w", url: "https://example.com/w", filter: WebhookFilter(events: [.updated]),
                                 format: .json, secret: "whsec_x", createdAt: 1)
        _ = try a.run { _, db in try WebhookRepository.insert(hook, in: db) }
        for id in ["x", "y"] {
            try a.write { store, db in try store.register(Registration(id: id, name: id, total: 100), now: 1_000, in: db) }
        }
        let otherCommitted = Locked(false)
        try a.write { store, db in
            var events = try store.progress("x", ProgressUpdate(completed: 1), now: 2_000, in: db).events
            let committed = b.commits("y", ProgressUpdate(completed: 5), now: 2_001)
            otherCommitted.withLock { $0 = committed }
            store.webhooks.load([hook])
            events += try store.progress("x", ProgressUpdate(completed: 2), now: 2_002, in: db).events
            return TreeOperation.Applied(events: events)
        }
        #expect(otherCommitted.withLock { $0 })
        let stored = try a.storedChangeNumbers()["x"]
        #expect(a.stream.withLock { $0 }.last.map { "\($0.changeNumber) \($0.taskID)" } == "\(stored ?? 0) x")
        let deliveries = try a.run { _, db in
            try db.rows("SELECT event_id, body FROM webhook_deliveries WHERE webhook_id = 'w'") { ($0.int(0), $0.text(1)) }
        }
        #expect(deliveries.map(\.0) == [stored ?? 0])
        #expect(deliveries.first?.1.contains("\"event_id\":\(stored ?? 0)") == true)
    }

    /// A batch ahead of the order whose task another writer changed meanwhile ran on what
    /// it read before: it is rolled back and runs again, holding the order from its start,
    /// so that it applies its changes over the other's, as one writer would in commit order.
    @Test func aBatchWhoseTaskAnotherWriterChangedMeanwhileRunsAgainHoldingTheOrder() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        try a.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        try a.write { store, db in try store.progress("x", ProgressUpdate(completed: 1), now: 1_500, in: db) }
        let runs = Locked(0)
        let otherCommitted = Locked(false)
        try a.write { store, db in
            let run = runs.withLock { runs in
                runs += 1
                return runs
            }
            var events = try store.heartbeat("x", Heartbeat(), now: 2_000, in: db).events
            if run == 1 {
                let committed = b.commits("x", ProgressUpdate(increment: 10), now: 2_001)
                otherCommitted.withLock { $0 = committed }
            }
            events += try store.progress("x", ProgressUpdate(increment: 5), now: 2_002, in: db).events
            return TreeOperation.Applied(events: events)
        }
        #expect(otherCommitted.withLock { $0 }, "the other writer waited for this one's batch")
        #expect(runs.withLock { $0 } == 2)
        #expect(try a.storedCompleted(["x"]) == ["x": 16])
        let numbers = a.stream.withLock { $0 }.map(\.changeNumber)
        #expect(numbers == Array((numbers.first ?? 0)...(numbers.first ?? 0) + Int64(numbers.count - 1)),
                "every number once, in order")
        #expect(try a.storedChangeNumbers()["x"] == numbers.last)
    }
}

/// One operation of the tree tests, applied the same way by any writer.
enum TreeOperation: Sendable, CustomStringConvertible {
    case register(String, parent: String?)
    case progress(String, completed: Int64)
    case heartbeat(String)
    case finish(String, TaskState)
    /// Retention of every finished task without children.
    case prune

    var description: String {
        switch self {
        case .register(let id, let parent): "register \(id) under \(parent ?? "-")"
        case .progress(let id, let completed): "progress \(id) \(completed)"
        case .heartbeat(let id): "heartbeat \(id)"
        case .finish(let id, let state): "finish \(id) \(state)"
        case .prune: "prune"
        }
    }

    /// What applying one did: its events (which the writer publishes once committed), or
    /// a refusal by the rules (nothing written).
    struct Applied: CarriesTaskEvents, Equatable {
        var events: [TaskEvent]
        var refused = false
        var estimatedBytes: Int { 0 }
    }

    /// Applies it at `now`.
    func apply(_ store: TaskStore, now: EpochMilliseconds, in database: Database) throws -> Applied {
        do {
            switch self {
            case .register(let id, let parent):
                return Applied(events: try store.register(
                    Registration(id: id, name: id, parentID: parent, total: 100, stallTimeoutSeconds: 60),
                    now: now, in: database).events)
            case .progress(let id, let completed):
                return Applied(events: try store.progress(id, ProgressUpdate(completed: completed), now: now, in: database).events)
            case .heartbeat(let id):
                return Applied(events: try store.heartbeat(id, Heartbeat(), now: now, in: database).events)
            case .finish(let id, let state):
                return Applied(events: try store.finish(id, Finish(outcome: state), now: now, in: database).events)
            case .prune:
                _ = try store.prune(finishedBefore: now + 1, limit: 100, in: database)
                return Applied(events: [])
            }
        } catch is TaskError {
            return Applied(events: [], refused: true)
        }
    }
}
