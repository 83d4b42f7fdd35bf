import Foundation
import HeadwayCore
import Testing
@testable import HeadwayStore

/// The writer holds a batch's changes of tasks back until it commits (`TaskCache` as
/// `HeldWrites`): one row write per task changed, the latest values stored, savepoints and
/// rollbacks honoured, and statements that read tasks' rows seeing every change before them.
@Suite struct HeldWritesTests {
    /// Adds `by` to the task's progress; its completed count after.
    private static func increment(_ id: String, by: Int64, store: TaskStore, in database: Database) throws -> Int64 {
        try store.progress(id, ProgressUpdate(increment: by), now: 2, in: database).outcome.task.completed
    }

    /// Counts the row writes of `tasks` from now on (a trigger of the test's own).
    private func countRowWrites(_ fixture: StoreFixture) throws {
        try fixture.read { database in
            try database.execute("CREATE TABLE row_writes (id TEXT NOT NULL)")
            try database.execute("CREATE TRIGGER count_row_writes AFTER UPDATE ON tasks BEGIN INSERT INTO row_writes VALUES (new.id); END")
        }
    }

    private func rowWrites(_ fixture: StoreFixture) throws -> [String: Int64] {
        try fixture.read { database in
            Dictionary(uniqueKeysWithValues: try database.rows("SELECT id, count(*) FROM row_writes GROUP BY id") {
                ($0.text(0), $0.int(1))
            })
        }
    }

    /// Twenty updates of one task and one of another, queued while the writer is busy, run as
    /// one batch: each gets its own change and number, and each task's row is written once,
    /// with the latest values.
    @Test func aTaskChangedManyTimesInABatchIsWrittenOnce() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for id in ["many", "once"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id, total: 100), now: 1, in: $0) }
        }
        try countRowWrites(fixture)
        let release = fixture.holdWriter()
        let group = DispatchGroup()
        let changes = Box<[TaskStore.Changed]>()
        changes.value = []
        for index in 0..<21 {
            group.enter()
            let id = index == 10 ? "once" : "many"
            fixture.writer.submit({ try store.progress(id, ProgressUpdate(increment: 1), now: 2 + Int64(index), in: $0) }) { result in
                if case .success(let changed) = result { changes.value!.append(changed) }
                group.leave()
            }
        }
        let batchesBefore = fixture.writer.statistics.batches
        release()
        group.wait()
        #expect(fixture.writer.statistics.batches == batchesBefore + 2, "the held batch, then the 21 updates as one")

        let many = (changes.value ?? []).filter { $0.outcome.task.id == "many" }
        #expect(many.map(\.outcome.task.completed).sorted() == Array(1...20))
        #expect(Set(many.map(\.outcome.task.changeNumber)).count == 20, "every change has a number of its own")
        #expect(try rowWrites(fixture) == ["many": 1, "once": 1])
        var stored = try #require(try fixture.read { try TaskRepository.find("many", in: $0) })
        let latest = try #require(many.max { $0.outcome.task.changeNumber < $1.outcome.task.changeNumber }).outcome.task
        // The stored stall deadline stays put while the exact one moves only a little later
        // (`StallRule.deadlineToStore`), as without held writes.
        #expect(try #require(stored.stallDeadline) <= latest.stallDeadline!)
        stored.stallDeadline = latest.stallDeadline
        #expect(stored == latest, "the row holds the batch's last change, every column")
    }

    /// A savepoint rolled back forgets what it held and gives back what was held before it;
    /// the batch then commits the rest.
    @Test func aRolledBackSavepointGivesBackWhatWasHeldBeforeIt() throws {
        struct Undo: Error {}
        let fixture = try StoreFixture()
        let store = fixture.store
        for id in ["kept", "untouched"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id, total: 100_000), now: 1, in: $0) }
        }
        let (inside, completed) = try fixture.write { database -> ([Int64], Int64) in
            var inside: [Int64] = []
            let increment = { (id: String, by: Int64) throws -> Int64 in
                try Self.increment(id, by: by, store: store, in: database)
            }
            _ = try increment("kept", 1)
            do {
                try database.inSavepoint {
                    _ = try increment("kept", 5)
                    _ = try increment("untouched", 1)
                    try database.inSavepoint { _ = try increment("kept", 10) }
                    _ = try increment("kept", 100)
                    do {
                        try database.inSavepoint {
                            _ = try increment("kept", 1000)
                            throw Undo()
                        }
                    } catch is Undo {}
                    inside.append(try increment("kept", 20_000))
                    throw Undo()
                }
            } catch is Undo {
                inside.append(try increment("kept", 0))
            }
            try database.inSavepoint { _ = try increment("untouched", 2) }
            return (inside, try increment("kept", 1))
        }
        #expect(inside == [20_116, 1], "the inner rollback undid 1,000; the outer one everything in it")
        #expect(completed == 2, "1 + 1: what the rolled-back savepoints held was given back")
        let stored = try fixture.read { database in
            try ["kept", "untouched"].map { try TaskRepository.find($0, in: database)?.completed }
        }
        #expect(stored == [2, 2])
    }

    /// A cancel's walk reads the children's rows, and the stall sweep the deadlines: both
    /// come after the changes held before them in the batch, which they must not undo.
    @Test func statementsThatReadRowsSeeTheChangesHeldBeforeThem() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "parent", name: "Parent"), now: 1, in: $0) }
        _ = try fixture.write {
            try store.register(Registration(id: "child", name: "Child", parentID: "parent", total: 10), now: 1, in: $0)
        }
        let release = fixture.holdWriter()
        let group = DispatchGroup()
        for work: @Sendable (Database) throws -> Void in [
            { _ = try store.progress("child", ProgressUpdate(completed: 3), now: 2, in: $0) },
            { _ = try store.cancel("parent", now: 3, in: $0) },
            { _ = try store.progress("child", ProgressUpdate(increment: 1), now: 4, in: $0) },
        ] {
            group.enter()
            fixture.writer.submit(work) { _ in group.leave() }
        }
        release()
        group.wait()
        let child = try #require(try fixture.read { try TaskRepository.find("child", in: $0) })
        #expect(child.completed == 4)
        #expect(child.cancelRequested)

        // Past the stored deadline (the last signal at 4 + the timeout), but an update held
        // in the same batch signalled since: the sweep leaves the task alone.
        let timeout = child.stallTimeoutMilliseconds
        let swept = try fixture.write { database in
            _ = try store.progress("child", ProgressUpdate(increment: 1), now: 2 + timeout, in: database)
            return try store.sweep(now: 5 + timeout, limit: 10, in: database)
        }
        #expect(swept.events.isEmpty)
        #expect(try fixture.read { try TaskRepository.find("child", in: $0)?.stalled } == false)
    }
}
