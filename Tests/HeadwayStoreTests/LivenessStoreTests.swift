import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// Sweeper, roll-up, history and retention on a real SQLite file, with explicit times.
@Suite struct LivenessStoreTests {
    private func register(_ fixture: StoreFixture, _ store: TaskStore, _ registration: Registration,
                          at now: EpochMilliseconds) throws -> TaskStore.Registered {
        try fixture.write { try store.register(registration, now: now, in: $0) }
    }

    @Test func theSweeperFlagsDueTasksOnceInDeadlineOrderAndASignalRecovers() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for (id, timeout) in [("late", 2.0), ("early", 1.0), ("calm", 60.0)] {
            _ = try register(fixture, store, Registration(id: id, name: id, stallTimeoutSeconds: timeout), at: 0)
        }
        let first = try fixture.write { try store.sweep(now: 1500, limit: 100, in: $0) }
        #expect(first.events.map(\.taskID) == ["early"])
        #expect(first.events.map(\.kind) == [.stalled])
        #expect(first.examined == 1, "only due tasks are read")
        let second = try fixture.write { try store.sweep(now: 2500, limit: 100, in: $0) }
        #expect(second.events.map(\.taskID) == ["late"])
        #expect(try fixture.write { try store.sweep(now: 2600, limit: 100, in: $0) }.events.isEmpty, "raised once")
        let stalled = try fixture.read { try TaskRepository.find("early", in: $0) }
        #expect(stalled?.stalled == true && stalled?.stallReason == .silent && stalled?.stalledSince == 1000)
        let recovered = try fixture.write { try store.heartbeat("early", Heartbeat(), now: 3000, in: $0) }
        #expect(recovered.events.map(\.kind) == [.recovered])
        #expect(recovered.outcome.task.stalled == false)
    }

    @Test func theSweeperReadsOnlyDueDeadlinesNotEveryTask() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        for index in 0..<500 {
            _ = try register(fixture, store, Registration(id: "t\(index)", name: "T", stallTimeoutSeconds: 3600), at: 0)
        }
        #expect(try fixture.write { try store.sweep(now: 60_000, limit: 100, in: $0) }.examined == 0)
        let plan = try fixture.read { database in
            try database.rows("EXPLAIN QUERY PLAN SELECT * FROM tasks WHERE stall_deadline <= 5 ORDER BY stall_deadline LIMIT 10") {
                $0.text(3)
            }
        }
        #expect(plan.contains { $0.contains("USING INDEX tasks_by_deadline") }, "\(plan)")
    }

    /// A task reporting often moves its stored deadline only once the exact one is a slack
    /// later (a tenth of its 2 s timeout): the stored deadline may be early, never late,
    /// and the sweeper, reaching an early one, stores the exact one and flags nothing
    /// before it.
    @Test func aStoredDeadlineMayBeEarlyNeverLate() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try register(fixture, store, Registration(id: "busy", name: "Busy", stallTimeoutSeconds: 2), at: 0)
        func stored() throws -> EpochMilliseconds? {
            try fixture.read { try TaskRepository.find("busy", in: $0)?.stallDeadline }
        }
        func beat(_ now: EpochMilliseconds) throws {
            _ = try fixture.write { try store.heartbeat("busy", Heartbeat(), now: now, in: $0) }
        }
        #expect(try stored() == 2_000)
        for now: EpochMilliseconds in [50, 100, 150, 199] { try beat(now) }
        #expect(try stored() == 2_000, "199 ms later: within the slack of 200 ms")
        try beat(200)
        #expect(try stored() == 2_200, "a slack later: moved to the exact deadline")
        try beat(300)
        #expect(try stored() == 2_200, "kept, 100 ms early")

        let early = try fixture.write { try store.sweep(now: 2_250, limit: 10, in: $0) }
        #expect(early.examined == 1 && early.events.isEmpty, "due as stored, not stalled")
        #expect(try stored() == 2_300, "the sweeper stored the exact deadline")
        #expect(try fixture.write { try store.sweep(now: 2_299, limit: 10, in: $0) }.examined == 0)
        let due = try fixture.write { try store.sweep(now: 2_300, limit: 10, in: $0) }
        #expect(due.events.map(\.kind) == [.stalled])
        #expect(try fixture.read { try TaskRepository.find("busy", in: $0)?.stalledSince } == 2_300)
    }

    @Test func afterARestartDeadlinesCountFromTheRestart() throws {
        let fixture = try StoreFixture()
        _ = try register(fixture, fixture.store, Registration(id: "old", name: "Old", stallTimeoutSeconds: 30), at: 0)
        let restarted = TaskStore(changeCounter: fixture.store.changeCounter, graceStart: 100_000)
        #expect(try fixture.write { try restarted.sweep(now: 100_001, limit: 10, in: $0) }.events.isEmpty)
        #expect(try fixture.read { try TaskRepository.find("old", in: $0)?.stallDeadline } == 130_000)
        #expect(try fixture.write { try restarted.sweep(now: 130_000, limit: 10, in: $0) }.events.map(\.kind) == [.stalled])
    }

    /// The counts the triggers keep (what `/metrics` shows) agree with the tasks themselves
    /// after every kind of change: a total given later, children, a stall, a recovery, a
    /// finish, a deletion.
    @Test func taskCountsFollowStateModeAndStallReason() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let ids = ["plain", "sized", "parent", "child", "later"]
        func counted() throws -> [TaskCount] { try fixture.read { try $0.taskCountsByStateModeAndStall() } }
        func truth() throws -> [TaskCount] {
            var counts: [String: TaskCount] = [:]
            for id in ids {
                guard let task = try fixture.read({ try TaskRepository.find(id, in: $0) }) else { continue }
                let key = "\(task.state.rawValue) \(task.mode == .quantified ? 1 : 0) \(task.stallReason?.rawValue ?? "")"
                counts[key, default: TaskCount(state: task.state.rawValue, mode: task.mode,
                                               stallReason: task.stallReason, count: 0)].count += 1
            }
            return counts.sorted { $0.key < $1.key }.map(\.value)
        }
        _ = try register(fixture, store, Registration(id: "plain", name: "P", stallTimeoutSeconds: 1), at: 0)
        _ = try register(fixture, store, Registration(id: "sized", name: "S", total: 10, stallTimeoutSeconds: 60), at: 0)
        _ = try register(fixture, store, Registration(id: "parent", name: "Parent", stallTimeoutSeconds: 60), at: 0)
        #expect(try counted() == truth())
        #expect(try counted().first { $0.mode == .indeterminate }?.count == 2)
        _ = try register(fixture, store, Registration(id: "child", name: "C", parentID: "parent"), at: 0)
        #expect(try counted() == truth(), "a parent with children is quantified")
        _ = try fixture.write { try store.sweep(now: 1500, limit: 100, in: $0) }
        #expect(try counted().contains { $0.stallReason == .silent && $0.count == 1 })
        #expect(try counted() == truth())
        _ = try fixture.write { try store.progress("plain", ProgressUpdate(completed: 1, total: 5), now: 1600, in: $0) }
        #expect(try counted() == truth(), "a total given later makes it quantified, and the signal recovers it")
        #expect(try counted().allSatisfy { $0.stallReason == nil })
        #expect(try counted().filter { $0.mode == .indeterminate }.map(\.count) == [1], "only the child is left")
        _ = try fixture.write { try store.progress("sized", ProgressUpdate(completed: 2), now: 1650, in: $0) }
        #expect(try counted() == truth(), "an update that moves no count")
        _ = try register(fixture, store, Registration(id: "later", name: "L", stallTimeoutSeconds: 60), at: 1650)
        _ = try fixture.write { try store.progress("later", ProgressUpdate(completed: 1, total: 3), now: 1660, in: $0) }
        #expect(try counted() == truth(), "a total given to a running task that is not stalled: only its mode changes")
        _ = try fixture.write { try store.finish("sized", Finish(outcome: .failed), now: 1700, in: $0) }
        _ = try fixture.write { try store.delete("child", now: 1800, in: $0) }
        #expect(try counted() == truth())
    }

    @Test func childrenRollUpIntoEveryAncestor() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try register(fixture, store, Registration(id: "root", name: "Root"), at: 0)
        _ = try register(fixture, store, Registration(id: "mid", name: "Mid", parentID: "root"), at: 0)
        _ = try register(fixture, store, Registration(id: "a", name: "A", parentID: "mid", weight: 3, total: 10), at: 0)
        _ = try register(fixture, store, Registration(id: "b", name: "B", parentID: "mid", weight: 1), at: 0)
        let changed = try fixture.write { try store.progress("a", ProgressUpdate(completed: 5), now: 1000, in: $0) }
        #expect(changed.events.map(\.taskID) == ["a", "mid", "root"])
        let mid = try fixture.read { try TaskRepository.find("mid", in: $0) }!
        let root = try fixture.read { try TaskRepository.find("root", in: $0) }!
        #expect(mid.mode == .quantified)
        #expect(mid.fraction == 1.5 / 4)
        #expect(root.fraction == 1.5 / 4)
        #expect(root.lastSignalAt == 1000, "a descendant's activity keeps the root alive")
        // A failed indeterminate child counts the 0 it had; its failure reaches every ancestor.
        _ = try fixture.write { try store.finish("b", Finish(outcome: .failed), now: 2000, in: $0) }
        #expect(try fixture.read { try TaskRepository.find("mid", in: $0)?.fraction } == 1.5 / 4)
        #expect(try fixture.read { try TaskRepository.find("root", in: $0)?.attention } == .failed)
        let deleted = try fixture.write { try store.delete("a", now: 3000, in: $0) }
        #expect(deleted.events.map(\.taskID) == ["a", "mid", "root"])
        #expect(try fixture.read { try TaskRepository.find("mid", in: $0)?.fraction } == 0)
        #expect(try fixture.read { try TaskRepository.find("mid", in: $0)?.children } == ChildrenCounts(failed: 1))
    }

    @Test func historyStaysBoundedAndKeepsItsEnds() throws {
        let fixture = try StoreFixture(durability: .normal)
        let store = fixture.store
        _ = try register(fixture, store, Registration(id: "long", name: "Long", total: 100_000), at: 0)
        // Many updates in the same second keep one sample; many seconds get thinned.
        for completed in 1...5 {
            _ = try fixture.write { try store.progress("long", ProgressUpdate(completed: Int64(completed)), now: 500, in: $0) }
        }
        let stored = try fixture.read { try $0.rows("SELECT completed FROM history WHERE task_id = 'long'") { $0.int(0) } }
        #expect(stored == [0], "one sample per second; the task row holds the latest")
        let curve = try fixture.read { database in try History.points(of: TaskRepository.find("long", in: database)!, in: database) }
        #expect(curve.map(\.completed) == [0, 5], "the curve ends with the current state")
        for second in 1...4500 {
            _ = try fixture.write {
                try store.progress("long", ProgressUpdate(completed: Int64(5 + second)), now: Int64(second) * 1000, in: $0)
            }
        }
        let task = try fixture.read { try TaskRepository.find("long", in: $0) }!
        let points = try fixture.read { try History.points(of: task, in: $0) }
        let storedCount = try fixture.read { try $0.scalar("SELECT count(*) FROM history WHERE task_id = 'long'") }
        #expect(storedCount! <= Int64(History.maximumPoints))
        #expect(storedCount! > Int64(History.maximumPoints / 4))
        #expect(points.first?.t == 0, "the registration's sample")
        #expect(points.last?.completed == 4505)
        #expect(Int64(task.historyPoints) == storedCount)
    }

    @Test func retentionForgetsOldFinishedFamiliesLeavesFirst() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try register(fixture, store, Registration(id: "done", name: "Done"), at: 0)
        _ = try register(fixture, store, Registration(id: "parent", name: "Parent"), at: 0)
        _ = try register(fixture, store, Registration(id: "child", name: "Child", parentID: "parent"), at: 0)
        _ = try register(fixture, store, Registration(id: "running", name: "Running"), at: 0)
        _ = try register(fixture, store, Registration(id: "gone", name: "Gone"), at: 0)
        _ = try register(fixture, store, Registration(id: "recent", name: "Recent"), at: 0)
        for id in ["done", "child", "parent"] {
            _ = try fixture.write { try store.finish(id, Finish(outcome: .succeeded), now: 1000, in: $0) }
        }
        _ = try fixture.write { try store.finish("recent", Finish(outcome: .succeeded), now: 9000, in: $0) }
        let deletedAt: EpochMilliseconds = 1000
        let deletion = try fixture.write { try store.delete("gone", now: deletedAt, in: $0) }
        let seenBefore = deletion.events[0].changeNumber - 1

        #expect(try fixture.write { try store.prune(finishedBefore: 5000, limit: 100, in: $0) } == 3,
                "done and child (leaves), and the tombstone; the parent waits for its child")
        #expect(try fixture.write { try store.prune(finishedBefore: 5000, limit: 100, in: $0) } == 1, "then the parent")
        let left = try fixture.read { try $0.rows("SELECT id FROM tasks ORDER BY id") { $0.text(0) } }
        #expect(left == ["recent", "running"])
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM history WHERE task_id IN ('done', 'child', 'parent')") } == 0)
        let position = try fixture.read { try ChangeFeed.position(in: $0) }
        #expect(!position.canResume(from: seenBefore), "what was forgotten cannot be replayed")
        #expect(position.canResume(from: position.last))
    }
}
