import Dispatch
import HeadwayCore
import Lifecycle
import Testing
@testable import HeadwayStore

/// What one client can make a change cost: the tree's limits (depth, children per parent,
/// tasks stored), roll-ups that stop at the first ancestor that does not change, subtree
/// cancels and deletes in one pass of bounded steps, and batches whose replies match what
/// is stored.
@Suite struct TreeLimitsTests {
    /// Registers a chain `c1` (the root) … `c<depth>`, each the only child of the one before.
    private func registerChain(_ depth: Int, total: Int64? = nil, in fixture: StoreFixture) throws {
        let store = fixture.store
        for level in 1...depth {
            _ = try fixture.write { database in
                try store.register(Registration(id: "c\(level)", name: "Level \(level)", parentID: level == 1 ? nil : "c\(level - 1)",
                                                total: total),
                                   now: 1_000, in: database)
            }
        }
    }

    private func find(_ id: String, _ fixture: StoreFixture) throws -> TaskRecord? {
        try fixture.read { try TaskRepository.find(id, in: $0) }
    }

    // MARK: - Limits

    @Test func aTaskAtTheDeepestLevelIsAcceptedAndOneDeeperIsRefused() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        try registerChain(32, in: fixture)
        #expect(try find("c32", fixture)?.depth == 32)

        let tooDeep = Registration(id: "c33", name: "Level 33", parentID: "c32")
        #expect(throws: TaskError.treeTooDeep(parentID: "c32", maximumDepth: 32)) {
            try fixture.write { try store.register(tooDeep, now: 2_000, in: $0) }
        }
        #expect(try find("c33", fixture) == nil, "nothing stored")
        #expect(try find("c32", fixture)?.childCount == 0)
        // A repeated identical registration stays idempotent.
        let again = try fixture.write {
            try store.register(Registration(id: "c32", name: "Level 32", parentID: "c31"), now: 3_000, in: $0)
        }
        #expect(!again.created)
    }

    @Test func aParentTakesChildrenUpToTheLimit() throws {
        let fixture = try StoreFixture(limits: TreeLimits(maximumChildren: 3))
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "Parent"), now: 1, in: $0) }
        for index in 1...3 {
            _ = try fixture.write { try store.register(Registration(id: "k\(index)", name: "Kid", parentID: "p"), now: 2, in: $0) }
        }
        #expect(try find("p", fixture)?.childCount == 3)
        #expect(throws: TaskError.tooManyChildren(parentID: "p", maximumChildren: 3)) {
            try fixture.write { try store.register(Registration(id: "k4", name: "Kid", parentID: "p"), now: 3, in: $0) }
        }
        #expect(try find("k4", fixture) == nil)

        // A deleted child no longer counts.
        _ = try fixture.write { try store.delete("k1", now: 4, in: $0) }
        #expect(try find("p", fixture)?.childCount == 2)
        _ = try fixture.write { try store.register(Registration(id: "k4", name: "Kid", parentID: "p"), now: 5, in: $0) }
        #expect(try find("k4", fixture) != nil)
    }

    @Test func theStoreHoldsTasksUpToTheLimit() throws {
        let fixture = try StoreFixture(limits: TreeLimits(maximumTasks: 3))
        let store = fixture.store
        for index in 1...3 {
            _ = try fixture.write { try store.register(Registration(id: "t\(index)", name: "Task"), now: 1, in: $0) }
        }
        #expect(throws: TaskError.storageFull(maximumTasks: 3)) {
            try fixture.write { try store.register(Registration(id: "t4", name: "Task"), now: 2, in: $0) }
        }
        #expect(try find("t4", fixture) == nil)
        let again = try fixture.write { try store.register(Registration(id: "t3", name: "Task"), now: 3, in: $0) }
        #expect(!again.created, "a repeated registration is answered even when storage is full")

        _ = try fixture.write { try store.delete("t1", now: 4, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "t4", name: "Task"), now: 5, in: $0) }
        #expect(try find("t4", fixture) != nil)
    }

    // MARK: - Roll-ups

    /// A leaf's heartbeat moves no ancestor's progress: within a second of the signal an
    /// ancestor last published, the ancestors get no event and keep their change numbers,
    /// but their signal time and stall deadline move (liveness); a second later the signal
    /// is published, one `task.updated` per ancestor.
    @Test func aLeafSignalOnlyMovesItsAncestorsSignalTimes() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        // Ancestors without a total of their own: each is the mean of its one child.
        try registerChain(10, in: fixture)
        let before = try (1...9).map { try #require(try find("c\($0)", fixture)) }

        let beat = try fixture.write { try store.heartbeat("c10", Heartbeat(), now: 1_900, in: $0) }
        #expect(beat.events.map(\.taskID) == ["c10"])
        for old in before {
            let now = try #require(try find(old.id, fixture))
            #expect(now.changeNumber == old.changeNumber, "\(old.id) keeps its last change")
            #expect(now.updatedAt == old.updatedAt, "\(old.id) looks the same")
            #expect(now.lastSignalAt == 1_900, "\(old.id) heard the signal")
            let deadline = 1_900 + now.stallTimeoutMilliseconds
            #expect(now.stallDeadline.map { deadline - 1_000 < $0 && $0 <= deadline } == true,
                    "moved, early by less than the storage slack")
        }
        let published = try fixture.write { try store.heartbeat("c10", Heartbeat(), now: 2_000, in: $0) }
        #expect(published.events.map(\.taskID) == (1...10).reversed().map { "c\($0)" })
        #expect(published.events.dropFirst().allSatisfy { $0.kind == .updated })
        #expect(try find("c1", fixture)?.lastSignalAt == 2_000)

        // Progress moves every ancestor's fraction: each gets its change.
        let moved = try fixture.write { try store.progress("c10", ProgressUpdate(completed: 50, total: 100), now: 6_000, in: $0) }
        #expect(moved.events.map(\.taskID) == (1...10).reversed().map { "c\($0)" })
        #expect(try find("c1", fixture)?.fraction == 0.5)
    }

    /// The roll-up stops being a change at the first ancestor whose progress does not move:
    /// a finished child's progress under a parent whose other child is indeterminate.
    @Test func theRollUpStopsAtTheFirstAncestorThatDoesNotMove() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "root", name: "Root"), now: 1_000, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "mid", name: "Mid", parentID: "root"), now: 1_000, in: $0) }
        _ = try fixture.write { try store.register(Registration(id: "leaf", name: "Leaf", parentID: "mid"), now: 1_000, in: $0) }
        let root = try #require(try find("root", fixture))
        let mid = try #require(try find("mid", fixture))

        // An indeterminate leaf's progress moves no fraction (and comes within a second of
        // the signal its ancestors last published).
        let changed = try fixture.write { try store.progress("leaf", ProgressUpdate(completed: 7), now: 1_900, in: $0) }
        #expect(changed.events.map(\.taskID) == ["leaf"])
        #expect(try find("mid", fixture)?.changeNumber == mid.changeNumber)
        #expect(try find("root", fixture)?.changeNumber == root.changeNumber)
        #expect(try find("root", fixture)?.lastSignalAt == 1_900)
    }

    /// An ancestor stalled for silence recovers with the signal of its descendant: that shows.
    @Test func aStalledAncestorRecoversWithItsDescendantsSignal() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write {
            try store.register(Registration(id: "root", name: "Root", stallTimeoutSeconds: 10), now: 1_000, in: $0)
        }
        _ = try fixture.write {
            try store.register(Registration(id: "leaf", name: "Leaf", parentID: "root", stallTimeoutSeconds: 100), now: 1_000, in: $0)
        }
        let swept = try fixture.write { try store.sweep(now: 20_000, limit: 10, in: $0) }
        #expect(swept.events.map(\.taskID) == ["root"])
        #expect(try find("root", fixture)?.stalled == true)

        let beat = try fixture.write { try store.heartbeat("leaf", Heartbeat(), now: 21_000, in: $0) }
        #expect(beat.events.map(\.taskID) == ["leaf", "root"])
        #expect(beat.events.last?.kind == .recovered)
        #expect(try find("root", fixture)?.stalled == false)
    }

    // MARK: - Subtree cancel

    /// Cancelling the root of a chain writes each task once: as many events as tasks, and
    /// statements growing with the chain's length, not its square.
    @Test func aSubtreeCancelIsOnePass() throws {
        func statementsToCancel(chainOf length: Int) throws -> (events: Int, statements: Int) {
            let fixture = try StoreFixture(limits: TreeLimits(maximumDepth: 200))
            try registerChain(length, in: fixture)
            let store = fixture.store
            return try fixture.write { database in
                let start = database.statementsRun
                let changed = try store.cancel("c1", now: 9_000, in: database)
                return (changed.events.count, database.statementsRun - start)
            }
        }
        let short = try statementsToCancel(chainOf: 50)
        let long = try statementsToCancel(chainOf: 150)
        #expect(short.events == 50)
        #expect(long.events == 150)
        #expect(long.statements <= 3 * short.statements + 10, "\(short.statements) then \(long.statements) statements")
        #expect(long.statements <= 4 * 150, "\(long.statements) statements for 150 tasks")
    }

    @Test func aSubtreeCancelReachesEveryUnfinishedDescendant() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        try registerChain(4, in: fixture)
        _ = try fixture.write { try store.finish("c4", Finish(outcome: .succeeded), now: 2_000, in: $0) }
        let changed = try fixture.write { try store.cancel("c2", now: 3_000, in: $0) }
        #expect(changed.events.map(\.taskID) == ["c2", "c3"])
        #expect(changed.events.allSatisfy { $0.kind == .cancelRequested })
        #expect(try find("c3", fixture)?.cancelRequested == true)
        #expect(try find("c4", fixture)?.cancelRequested == false)
        #expect(try find("c1", fixture)?.cancelRequested == false)
    }

    // MARK: - Subtree steps

    /// Registers `root` with `children` children `k<i>`, each with `grandchildren` children
    /// `k<i>-<j>`, in one job; `root` is a child of `parent`, if any.
    private func registerTree(under parent: String? = nil, children: Int, grandchildren: Int,
                              in fixture: StoreFixture) throws {
        let store = fixture.store
        _ = try fixture.write { database in
            _ = try store.register(Registration(id: "root", name: "Root", parentID: parent), now: 1_000, in: database)
            for child in 0..<children {
                _ = try store.register(Registration(id: "k\(child)", name: "Kid", parentID: "root"), now: 1_000, in: database)
                for grandchild in 0..<grandchildren {
                    _ = try store.register(Registration(id: "k\(child)-\(grandchild)", name: "Grandkid", parentID: "k\(child)"),
                                           now: 1_000, in: database)
                }
            }
        }
    }

    /// What a subtree change in steps did: its steps in order, and what was stored when
    /// its reply would be sent.
    private struct Stepped<Stored: Sendable>: Sendable {
        var steps: [SubtreeChange]
        var first: SubtreeChange
        var storedAtReply: Stored
        /// The change number of `other`, registered by another client after the first step.
        var otherChangeNumber: Int64
    }

    /// Runs `first` in steps; after the first step commits, another client registers
    /// `other`; `stored` reads the database when the completion (the reply) comes.
    private func runInSteps<Stored: Sendable>(_ fixture: StoreFixture,
                                              _ first: @escaping @Sendable (Database) throws -> SubtreeChange,
                                              stored: @escaping @Sendable (Database) throws -> Stored) throws -> Stepped<Stored> {
        let store = fixture.store
        let steps = Locked<[SubtreeChange]>([])
        let other = Box<Int64>()
        let outcome = Box<Result<(SubtreeChange, Stored), any Error>>()
        let done = DispatchSemaphore(value: 0)
        store.inSteps(on: fixture.writer, first, afterEachCommit: { step in
            let isFirst = steps.withLock { steps in
                steps.append(step)
                return steps.count == 1
            }
            guard isFirst else { return }
            fixture.writer.submit({ try store.register(Registration(id: "other", name: "Other"), now: 2_000, in: $0) }) { result in
                other.value = (try? result.get())?.task.changeNumber
            }
        }) { result in
            outcome.value = result.flatMap { first in Result { (first, try fixture.read(stored)) } }
            done.signal()
        }
        done.wait()
        let (first, storedAtReply) = try outcome.value!.get()
        return Stepped(steps: steps.withLock { $0 }, first: first, storedAtReply: storedAtReply,
                       otherChangeNumber: try #require(other.value))
    }

    /// A big subtree is deleted in bounded steps, each its own writer job: another client's
    /// write commits between them, the reply comes after the last, and every task is gone
    /// with its tombstone; the parent lost its child once.
    @Test func aBigSubtreeIsDeletedInStepsWithOtherWritesBetween() throws {
        let fixture = try StoreFixture(stepTasks: 100)
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "top", name: "Top"), now: 1_000, in: $0) }
        try registerTree(under: "top", children: 3, grandchildren: 400, in: fixture)
        let batchesBefore = fixture.writer.statistics.batches

        let result = try runInSteps(fixture, { try store.delete("root", now: 3_000, in: $0) }) { database in
            (tasks: try database.scalar("SELECT count(*) FROM tasks WHERE id NOT IN ('top', 'other')"),
             tombstones: try database.scalar("SELECT count(*) FROM tombstones"),
             topChildren: try TaskRepository.find("top", in: database)?.childCount)
        }
        #expect(result.storedAtReply.tasks == 0, "the reply comes after the last step")
        #expect(result.storedAtReply.tombstones == 1_204, "the root, 3 children, 1,200 grandchildren")
        #expect(result.storedAtReply.topChildren == 0)
        #expect(result.steps.count >= 1_204 / 100, "\(result.steps.count) steps")
        #expect(result.steps.allSatisfy { $0.count <= 101 }, "the first step deletes the root too")
        #expect(result.steps.map(\.count).reduce(0, +) == 1_204)
        #expect(result.first == result.steps.first)
        let numbers = result.steps.map { $0.events.map(\.changeNumber) }
        #expect(numbers[0].max()! < result.otherChangeNumber && result.otherChangeNumber < numbers.last!.min()!,
                "another client's write committed between the steps")
        #expect(fixture.writer.statistics.batches - batchesBefore >= result.steps.count, "a batch per step")
    }

    /// A big subtree's cancel runs in bounded steps too; at the reply every unfinished task
    /// of the subtree is cancel-requested and a finished one is left as it was.
    @Test func aBigSubtreeIsCancelledInStepsWithOtherWritesBetween() throws {
        let fixture = try StoreFixture(stepTasks: 100)
        let store = fixture.store
        try registerTree(children: 3, grandchildren: 400, in: fixture)
        _ = try fixture.write { try store.finish("k1-7", Finish(outcome: .succeeded), now: 2_000, in: $0) }

        let result = try runInSteps(fixture, { try store.cancel("root", now: 3_000, in: $0) }) { database in
            (notRequested: try database.scalar("SELECT count(*) FROM tasks WHERE cancel_requested = 0 AND id <> 'other'"),
             finished: try TaskRepository.find("k1-7", in: database)?.cancelRequested)
        }
        #expect(result.storedAtReply.notRequested == 1, "only the finished task")
        #expect(result.storedAtReply.finished == false)
        #expect(result.first.outcome.map { if case .applied = $0 { true } else { false } } == true)
        #expect(result.first.events.first?.taskID == "root", "the reply's task comes first")
        #expect(result.steps.count >= 1_204 / 100, "\(result.steps.count) steps")
        #expect(result.steps.allSatisfy { $0.count <= 101 })
        #expect(result.steps.map(\.count).reduce(0, +) == 1_203, "all but the finished task")
        let numbers = result.steps.map { $0.events.map(\.changeNumber) }
        #expect(numbers[0].max()! < result.otherChangeNumber && result.otherChangeNumber < numbers.last!.min()!)
    }

    /// A big subtree's terminate runs in bounded steps, each its own writer job: another
    /// task's update, sent after the first step, completes before the terminate does (it
    /// no longer waits for the whole subtree); each step ends and reads at most `stepTasks`
    /// tasks; every task ends after its descendants, the subtree's own task last, and the
    /// reply (the last step) has it with its final counts of children.
    @Test func aBigSubtreeIsTerminatedInStepsWithOtherWritesBetween() throws {
        let fixture = try StoreFixture(stepTasks: 100)
        let store = fixture.store
        try registerTree(children: 3, grandchildren: 400, in: fixture)
        _ = try fixture.write { database in
            _ = try store.finish("k1-7", Finish(outcome: .succeeded), now: 2_000, in: database)
            return try store.register(Registration(id: "other", name: "Other", total: 10), now: 2_000, in: database)
        }
        let batchesBefore = fixture.writer.statistics.batches
        let steps = Locked<[TerminationStep]>([])
        let finishedOrder = Locked<[String]>([])
        let done = DispatchSemaphore(value: 0)
        let outcome = Box<Result<TerminationStep, any Error>>()
        store.terminateInSteps("root", on: fixture.writer, now: { 3_000 }, afterEachCommit: { step in
            let isFirst = steps.withLock { steps in
                steps.append(step)
                return steps.count == 1
            }
            guard isFirst else { return }
            fixture.writer.submit({ try store.progress("other", ProgressUpdate(completed: 5), now: 3_500, in: $0) }) { result in
                if case .success = result { finishedOrder.withLock { $0.append("other's update") } }
            }
        }) { result in
            finishedOrder.withLock { $0.append("terminate") }
            outcome.value = result
            done.signal()
        }
        done.wait()
        let last = try outcome.value!.get()
        let allSteps = steps.withLock { $0 }

        #expect(finishedOrder.withLock { $0 } == ["other's update", "terminate"],
                "another task's update completes while the terminate is under way")
        #expect(allSteps.count >= 1_203 / 100, "\(allSteps.count) steps")
        #expect(allSteps.allSatisfy { $0.count <= 100 && $0.rowsRead <= 100 }, "each step's hold is bounded")
        #expect(fixture.writer.statistics.batches - batchesBefore >= allSteps.count, "a batch per step")
        #expect(allSteps.map(\.count).reduce(0, +) == 1_203, "all but the finished task")
        #expect(last == allSteps.last && last.remaining == nil)
        let root = try #require(last.outcome?.task)
        #expect(root.state == .canceled && root.message == "terminated")
        #expect(root.children == ChildrenCounts(canceled: 3), "the reply has the final counts")

        // Each task ends after every task below it; the subtree's own task last.
        let finished = allSteps.flatMap(\.events).filter { $0.kind == .finished }.map(\.taskID)
        #expect(finished.count == 1_203 && finished.last == "root")
        let position = Dictionary(uniqueKeysWithValues: finished.enumerated().map { ($1, $0) })
        for child in 0..<3 {
            let below = (0..<400).compactMap { position["k\(child)-\($0)"] }
            #expect(below.allSatisfy { $0 < position["k\(child)"]! }, "k\(child) ends after its children")
        }
        let stored = try fixture.read { database in
            try database.scalar("SELECT count(*) FROM tasks WHERE state = 'canceled' AND message = 'terminated'")
        }
        #expect(stored == 1_203)
    }

    /// Deleting a subtree costs statements in proportion to its size.
    @Test func aSubtreeDeleteCostsStatementsInProportionToItsSize() throws {
        func statementsToDelete(grandchildren: Int) throws -> Int {
            let fixture = try StoreFixture(stepTasks: 100)
            try registerTree(children: 3, grandchildren: grandchildren, in: fixture)
            let store = fixture.store
            return try fixture.write { database in
                let start = database.statementsRun
                var step = try store.delete("root", now: 9_000, in: database)
                while let walk = step.remaining { step = try store.continueWalk(walk, in: database) }
                return database.statementsRun - start
            }
        }
        let small = try statementsToDelete(grandchildren: 100)
        let large = try statementsToDelete(grandchildren: 400)
        #expect(large <= 4 * small + 10, "\(small) then \(large) statements")
        #expect(large <= 4 * (3 + 1_200), "\(large) statements for 1,204 tasks")
    }

    // MARK: - Batches

    /// SQLite ends the transaction in the middle of a batch (simulated: a job rolls it back
    /// and returns as if nothing happened). No later job may run, each statement of it
    /// committing alone: every job is answered with the error, and nothing of the batch is
    /// stored.
    @Test func aBatchWhoseTransactionIsLostStoresNothingAndSaysSo() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        let release = fixture.holdWriter()
        let group = DispatchGroup()
        let results = Box<[String: Result<Bool, any Error>]>()
        results.value = [:]
        let jobs: [(String, @Sendable (Database) throws -> Bool)] = [
            ("before", { try store.register(Registration(id: "before", name: "Before"), now: 1, in: $0).created }),
            ("rollback", { database in
                try database.execute("ROLLBACK")
                return true
            }),
            ("after", { try store.register(Registration(id: "after", name: "After"), now: 1, in: $0).created }),
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

        #expect(results.value?.count == 3)
        for (name, result) in results.value ?? [:] {
            #expect(throws: (any Error).self, "\(name) is answered with the error") { try result.get() }
        }
        #expect(try find("before", fixture) == nil)
        #expect(try find("after", fixture) == nil)
        // The writer goes on with a clean transaction.
        _ = try fixture.write { try store.register(Registration(id: "later", name: "Later"), now: 2, in: $0) }
        #expect(try find("later", fixture) != nil)
    }

    /// A batch ends once its results hold the byte cap; the jobs after it commit in the next.
    @Test func aBatchIsCappedInBytes() throws {
        let fixture = try StoreFixture(maximumBatchBytes: 1)
        let store = fixture.store
        let batchesBefore = fixture.writer.statistics.batches
        let release = fixture.holdWriter()
        let group = DispatchGroup()
        let created = Box<Int>()
        created.value = 0
        for index in 1...3 {
            group.enter()
            fixture.writer.submit({ try store.register(Registration(id: "b\(index)", name: "B"), now: 1, in: $0) }) { result in
                if case .success = result { created.value! += 1 }
                group.leave()
            }
        }
        release()
        group.wait()
        #expect(created.value == 3)
        #expect(fixture.writer.statistics.batches - batchesBefore == 1 + 3, "the hold, then one batch per job")
    }
}
