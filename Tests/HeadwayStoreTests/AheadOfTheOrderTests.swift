import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

@Suite(.serialized, .enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
struct AheadOfTheOrderTests {
    /// An operation that took numbers ahead of the order, moved them when it took the order
    /// (`shiftAhead`), then failed and gave them back (`rewind` to a mark before the move):
    /// the numbers handed out again are not moved a second time (`final`): every number
    /// once, in order, and each task's last event carries its stored number.
    @Test func numbersHandedOutAgainAfterARewindPastTheShiftAreNotMovedTwice() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri)
        let b = try SharedWriter(uri: database.uri)
        for id in ["x", "w", "y", "z"] {
            try a.write { store, db in try store.register(Registration(id: id, name: id, total: 100), now: 1_000, in: db) }
        }
        // A statement that fails after the order was taken: z's output line "boom".
        _ = try b.run { _, db in
            try db.execute("""
                CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN IF NEW.line = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
                CREATE TRIGGER refuse_boom BEFORE INSERT ON task_output FOR EACH ROW EXECUTE FUNCTION refuse_boom();
                """)
        }
        let otherCommitted = Locked(false)
        try a.write { store, db in
            var events = try store.progress("x", ProgressUpdate(completed: 1), now: 2_000, in: db).events
            let committed = b.commits("y", ProgressUpdate(completed: 5), now: 2_001)
            otherCommitted.withLock { $0 = committed }
            // x and w numbered ahead; z's output takes the order (the numbers move up by
            // one), then fails: the request's items run again, each in a savepoint.
            let results = try store.progress(each: [
                ProgressItem(id: "x", update: ProgressUpdate(completed: 2)),
                ProgressItem(id: "w", update: ProgressUpdate(completed: 2)),
                ProgressItem(id: "z", update: ProgressUpdate(completed: 2, output: ["boom"])),
            ], now: 2_002, in: db)
            events += results.events
            return TreeOperation.Applied(events: events)
        }
        #expect(otherCommitted.withLock { $0 })
        let stream = a.stream.withLock { $0 }
        let numbers = stream.map(\.changeNumber)
        #expect(numbers == Array((numbers.first ?? 0)...(numbers.first ?? 0) + Int64(numbers.count - 1)),
                "every number once, in order")
        let stored = try a.storedChangeNumbers()
        #expect(stream.last { $0.taskID == "x" }?.changeNumber == stored["x"])
        #expect(stream.last { $0.taskID == "w" }?.changeNumber == stored["w"])
    }

    /// A batch that takes the order in its pipeline (`movesTheRow`: no other daemon committed
    /// for `quietSeconds`) tells the connection its transaction's id there, as one that
    /// takes it in two steps does (`lockedPosition`): a `COMMIT` whose answer is lost is
    /// asked about, and reported committed.
    @Test(arguments: [0.0, 60.0]) func aPipelinedOrderCheckBatchWhoseCommitAnswerIsLostIsAskedAbout(quiet: Double) throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let proxy = try CommitCuttingProxy(for: server)
        defer { proxy.close() }
        let counter = try DatabaseSetup.open(path: server.uri).changeCounter
        let cache = TaskCache()
        let store = TaskStore(changeCounter: counter, cache: cache)
        let shared = SharedWriting(changeCounter: counter, cache: cache, quietSeconds: quiet)
        let writer = try GroupCommitWriter(path: proxy.uri, durability: .normal, coordinator: shared, heldWrites: cache)
        let group = ServiceGroup([ServiceGroup.Member("test-writer", writer)])
        try group.start()
        defer { group.stop() }
        func write<Value: Sendable>(_ work: @escaping @Sendable (TaskStore, Database) throws -> Value) -> Result<Value, any Error> {
            let done = DispatchSemaphore(value: 0)
            let box = Locked<Result<Value, any Error>?>(nil)
            writer.submit({ database in try work(store, database) }) { result in
                box.withLock { $0 = result }
                done.signal()
            }
            done.wait()
            return box.withLock { $0! }
        }
        _ = try write { store, db in try store.register(Registration(id: "a", name: "a", total: 100), now: 1_000, in: db) }.get()
        _ = try write { store, db in try store.progress("a", ProgressUpdate(completed: 1), now: 1_500, in: db) }.get()
        let result = write { store, db in
            proxy.cut(.beforeCommitAnswer)
            return try store.progress("a", ProgressUpdate(completed: 2), now: 2_000, in: db).outcome.task.completed
        }
        #expect(proxy.cuts == 1)
        let stored = try { () throws -> Int64? in
            let database = try Database(path: server.uri)
            defer { database.close() }
            return try TaskRepository.find("a", in: database)?.completed
        }()
        #expect(stored == 2, "the batch committed")
        #expect((try? result.get()) == 2, "committed, yet reported: \(result)")
    }

    /// A batch that took the order in its pipeline and lost it leaves the cache exact for
    /// the generation it began at (not the one `batchEnds` moved on to), so the next batch
    /// reads the names of what the other daemon wrote since and forgets those tasks. Here
    /// the batch's only held write was given back by a savepoint, so no rollback of written
    /// rows clears the cache, and the other's quiet write (a count of children) must win.
    @Test func aBatchThatLostTheOrderInItsPipelineForgetsWhatTheOtherWrote() throws {
        let database = try TestPostgresDatabase()
        defer { database.drop() }
        let a = try SharedWriter(uri: database.uri, quietSeconds: 0)
        let b = try SharedWriter(uri: database.uri)
        try a.write { store, db in try store.register(Registration(id: "x", name: "x", total: 100), now: 1_000, in: db) }
        try a.write { store, db in try store.register(Registration(id: "p", name: "p", total: 100), now: 1_000, in: db) }
        try a.write { store, db in
            try store.register(Registration(id: "c", name: "c", parentID: "p", total: 100), now: 1_000, in: db)
        }
        try a.write { store, db in try store.finish("c", Finish(outcome: .succeeded), now: 1_100, in: db) }
        struct Refused: Error {}
        let runs = Locked(0)
        try a.write { store, db in
            let run = runs.withLock { runs in
                runs += 1
                return runs
            }
            if run == 1 {
                // A change held, then given back with its savepoint (no statement run).
                _ = try? db.inSavepoint { () throws -> Void in
                    _ = try store.progress("x", ProgressUpdate(completed: 7), now: 2_000, in: db)
                    throw Refused()
                }
                // The other forgets c: p's count of stored children goes down, quietly.
                _ = b.runWithin(seconds: 10) { store, db in
                    TreeOperation.Applied(events: [], refused: try store.prune(finishedBefore: 5_000, limit: 100, in: db) == 0)
                }
            }
            return TreeOperation.Applied(events: [])
        }
        #expect(runs.withLock { $0 } == 2, "lost its order in the pipeline")
        try a.write { store, db in
            try store.register(Registration(id: "d", name: "d", parentID: "p", total: 100), now: 3_000, in: db)
        }
        let stored = try a.run { _, db in
            try db.rows("SELECT child_count, (SELECT count(*) FROM tasks WHERE parent_id = 'p') FROM tasks WHERE id = 'p'") {
                [$0.int(0), $0.int(1)]
            }
        }
        #expect(stored == [[1, 1]], "p's child_count is its stored children's")
    }
}
