import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// Two writers on one PostgreSQL database, as two daemons have: each with its store, its
/// cache and `SharedWriting`; every event its writer publishes (its own, after each commit,
/// and the other's, delivered) is recorded in the order its writer thread handled them.
final class SharedWriter: @unchecked Sendable {
    let store: TaskStore
    let writer: GroupCommitWriter
    private let group: ServiceGroup
    /// Every event this writer's broker would have been given, in order.
    var stream: Locked<[TaskEvent]> { sink.events }
    private let sink = RecordingSink()

    init(uri: String) throws {
        let counter = try DatabaseSetup.open(path: uri).changeCounter
        let cache = TaskCache()
        let shared = SharedWriting(changeCounter: counter, cache: cache)
        store = TaskStore(changeCounter: counter, cache: cache)
        writer = try GroupCommitWriter(path: uri, durability: .normal, coordinator: shared, events: sink)
        group = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try group.start()
    }

    deinit { group.stop() }

    /// Runs `work` in a batch and waits for it; its events join the stream once committed
    /// (the writer publishes them); returns them.
    @discardableResult
    func write<Value: CarriesTaskEvents & Sendable>(_ work: @escaping @Sendable (TaskStore, Database) throws -> Value) throws
        -> [TaskEvent] {
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<Value, any Error>?>(nil)
        writer.submit({ [store] database in try work(store, database) }) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get().events
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

    /// Concurrent writers on both: every increment counted once, change numbers never
    /// given twice, and each writer's stream strictly increasing and ending at every task's
    /// final value: no change skipped, whichever writer committed it.
    @Test func concurrentWritersNumberChangesInCommitOrderWithoutGaps() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let writers = [try SharedWriter(uri: database.uri), try SharedWriter(uri: database.uri)]
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
}
