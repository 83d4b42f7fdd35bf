import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// The stored change sequence behind the event stream.
@Suite struct ChangeFeedTests {
    @Test func everyChangeTakesTheNextNumberAndTheSequenceSurvivesARestart() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let start = try fixture.read { try ChangeFeed.position(in: $0) }
        #expect(start.last == start.first)
        #expect(start.first > 0 && start.first < 1 << 41, "a random start below 2^40 (+1)")
        let created = try fixture.write { try store.register(Registration(id: "a", name: "A", total: 5), now: 1, in: $0) }
        let updated = try fixture.write { try store.progress("a", ProgressUpdate(completed: 2), now: 2, in: $0) }
        let finished = try fixture.write { try store.finish("a", Finish(outcome: .succeeded), now: 3, in: $0) }
        #expect(created.events.map(\.changeNumber) == [start.last + 1])
        #expect(updated.events.map(\.kind) == [.updated])
        #expect(updated.events.map(\.changeNumber) == [start.last + 2])
        #expect(finished.events.map(\.kind) == [.finished])
        fixture.stopWriter()

        let reopened = try Database(path: fixture.path)
        let sequence = try ChangeCounter(database: reopened)
        #expect(sequence.last == start.last + 3)
        let store2 = TaskStore(changeCounter: sequence)
        try fixture.restartWriter()
        let next = try fixture.write { try store2.register(Registration(id: "b", name: "B"), now: 4, in: $0) }
        #expect(next.events.map(\.changeNumber) == [start.last + 4])
    }

    @Test func refusedChangesGiveTheirNumbersBack() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "a", name: "A", total: 5), now: 1, in: $0) }
        let before = store.changeCounter.last
        #expect(throws: TaskError.self) {
            _ = try fixture.write { try store.progress("a", ProgressUpdate(completed: 6), now: 2, in: $0) }
        }
        #expect(store.changeCounter.last == before)
        let requested = try fixture.write { try store.cancel("a", now: 3, in: $0) }
        #expect(requested.events.map(\.changeNumber) == [before + 1])
        #expect(try fixture.write { try store.cancel("a", now: 4, in: $0) }.events.isEmpty, "no change, no event")
    }

    @Test func changesAfterAnIdAreEachTaskOnceAtItsLatestStateInOrder() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for id in ["a", "b", "c"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id, total: 10), now: 1, in: $0) }
        }
        let mark = store.changeCounter.last
        _ = try fixture.write { try store.progress("a", ProgressUpdate(completed: 1), now: 2, in: $0) }
        _ = try fixture.write { try store.progress("b", ProgressUpdate(completed: 1), now: 2, in: $0) }
        _ = try fixture.write { try store.progress("a", ProgressUpdate(completed: 2), now: 3, in: $0) }
        let deleted = try fixture.write { try store.delete("c", now: 4, in: $0) }
        let changes = try fixture.read { try ChangeFeed.changes(after: mark, in: $0) }
        #expect(changes.map(\.taskID) == ["b", "a", "c"])
        #expect(changes.map(\.kind) == [.updated, .updated, .deleted])
        #expect(changes.map(\.changeNumber) == [mark + 2, mark + 3, mark + 4])
        #expect(changes[1].data.contains(#""completed":2"#))
        #expect(changes[2].data == #"{"id":"c"}"#)
        #expect(deleted.events.map(\.changeNumber) == [mark + 4])
        #expect(try fixture.read { try ChangeFeed.changes(after: mark + 4, in: $0) }.isEmpty)
        let position = try fixture.read { try ChangeFeed.position(in: $0) }
        #expect(position.last == mark + 4)
        #expect(position.canResume(from: mark))
        #expect(position.canResume(from: position.first))
        #expect(!position.canResume(from: mark + 5), "an id from the future (or another database)")
        #expect(!position.canResume(from: position.prunedThrough - 1))
    }

    @Test func deletingATreeLeavesATombstoneForEveryTask() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "P"), now: 1, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "c", name: "C", parentID: "p"), now: 1, in: $0) }
        let deleted = try fixture.write { try store.delete("p", now: 2, in: $0) }
        #expect(deleted.count == 2)
        #expect(Set(deleted.events.map(\.taskID)) == ["p", "c"])
        #expect(deleted.events.first { $0.taskID == "c" }?.parentID == "p")
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tombstones") } == 2)
    }

    @Test func snapshotHoldsUnfinishedAndRecentlyFinishedTasks() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for id in ["old", "recent", "running"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id), now: 1, in: $0) }
        }
        _ = try fixture.write { try store.finish("old", Finish(outcome: .failed), now: 1_000, in: $0) }
        _ = try fixture.write { try store.finish("recent", Finish(outcome: .succeeded), now: 90_000, in: $0) }
        let snapshot = try fixture.read { try ChangeFeed.snapshot(finishedSince: 40_000, in: $0) }
        #expect(snapshot.map(\.id) == ["running", "recent"])
    }

    /// A filtered catch-up reads only the rows it shows: the named tasks and the children
    /// of the named parent, in the snapshot, the replay and the held-task lookup alike.
    @Test func aSelectionReadsOnlyTheRowsOfTheTasksItFollows() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "P"), now: 1, in: $0) }
        for index in 0..<20 {
            _ = try fixture.write { try store.register(Registration(id: "other\(index)", name: "O"), now: 1, in: $0) }
        }
        let mark = store.changeCounter.last
        for id in ["a", "b"] {
            _ = try fixture.write { try store.register(Registration(id: id, name: id), now: 2, in: $0) }
        }
        _ = try fixture.write { try store.register(Registration(id: "child", name: "C", parentID: "p"), now: 2, in: $0) }
        for index in 0..<20 {
            _ = try fixture.write { try store.progress("other\(index)", ProgressUpdate(completed: 1), now: 3, in: $0) }
        }
        _ = try fixture.write { try store.delete("b", now: 4, in: $0) }
        _ = try fixture.write { try store.delete("other0", now: 4, in: $0) }
        let selection = ChangeFeed.Selection(taskIDs: ["a", "b", "x"], parentIDs: ["p"])

        let (snapshot, snapshotRows) = try fixture.read { database in
            let before = database.rowsRead
            return (try ChangeFeed.snapshot(finishedSince: 0, of: selection, in: database), database.rowsRead - before)
        }
        #expect(snapshot.map(\.id) == ["child", "a"])
        #expect(snapshotRows == 2, "only the rows shown are read")

        let (changes, changeRows) = try fixture.read { database in
            let before = database.rowsRead
            return (try ChangeFeed.changes(after: mark, of: selection, in: database), database.rowsRead - before)
        }
        #expect(changes.map(\.taskID) == ["a", "child", "b"])
        #expect(changes.map(\.kind) == [.created, .created, .deleted])
        #expect(changeRows == 3)

        let (held, heldRows) = try fixture.read { database in
            let before = database.rowsRead
            return (try ChangeFeed.unfinished(createdSince: 2, of: selection, in: database), database.rowsRead - before)
        }
        #expect(Set(held.map(\.id)) == ["a", "child"])
        #expect(heldRows == 2)

        // Without a selection, everything (the same rows as before).
        let all = try fixture.read { try ChangeFeed.snapshot(finishedSince: 0, in: $0) }
        #expect(all.count == 22, "p, a, child and 19 others")
        let parentOnly = ChangeFeed.Selection(taskIDs: [], parentIDs: ["p"])
        #expect(try fixture.read { try ChangeFeed.snapshot(finishedSince: 0, of: parentOnly, in: $0) }.map(\.id) == ["child"])
    }
}
