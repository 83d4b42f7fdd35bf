import HeadwayCore
import Testing

/// A parent that declares its own `total` counts its children as units of it (Foundation's
/// `Progress`): fraction = (`completed` + weight × fraction of each unfinished child) /
/// `total`; a parent without a total keeps the weighted mean of its children.
@Suite struct ParentTotalTests {
    let start: EpochMilliseconds = 1_000_000

    func task(_ id: String, total: Int64?, completed: Int64 = 0, weight: Double = 1) -> TaskRecord {
        TaskRecord(id: id, name: id, parentID: id == "outer" ? nil : "outer", weight: weight, completed: completed,
                   total: total, createdAt: start, updatedAt: start, lastSignalAt: start)
    }

    /// `parent` after `child` changed from `before` to `after`.
    func rolledUp(_ parent: TaskRecord, _ before: TaskRecord?, _ after: TaskRecord?) throws -> TaskRecord {
        try #require(TaskRules.rollUp(parent, ChildrenChange(from: before, to: after), now: start + 1))
    }

    /// `task` with `completed` set by its runner.
    func progressed(_ task: TaskRecord, to completed: Int64) throws -> TaskRecord {
        try TaskRules.progress(ProgressUpdate(completed: completed), to: task, now: start + 2).task
    }

    /// tqdm's nested bars: an outer bar of 10 whose inner loops come one per iteration. The
    /// first inner loop done is 10%, not 100% (each inner loop is one unit of the outer
    /// bar's total); while an inner loop runs, its share shows.
    @Test func anOuterBarCountsItsInnerLoopsAsUnitsOfItsTotal() throws {
        var outer = task("outer", total: 10)
        var inner = task("inner-0", total: 50)
        outer = try rolledUp(outer, nil, inner)
        #expect(outer.fraction == 0)
        var next = try progressed(inner, to: 25)
        outer = try rolledUp(outer, inner, next)
        inner = next
        #expect(outer.fraction == 0.05, "half of one unit of ten")
        next = try progressed(inner, to: 50)
        outer = try rolledUp(outer, inner, next)
        inner = next
        #expect(outer.fraction == 0.1)
        let done = try TaskRules.finish(Finish(outcome: .succeeded), task: inner, now: start + 3).task
        outer = try rolledUp(outer, inner, done)
        outer = try progressed(outer, to: 1)
        #expect(outer.fraction == 0.1, "one inner loop of ten, not 100%")
        #expect(outer.unfinishedChildrenDone == 0)
        // The second inner loop starts: nothing else moves until it does.
        let second = task("inner-1", total: 50)
        outer = try rolledUp(outer, nil, second)
        #expect(outer.fraction == 0.1)
    }

    /// A child's weight is how many units of the parent's total it stands for.
    @Test func aChildsWeightIsItsUnitsOfTheParentsTotal() throws {
        var outer = task("outer", total: 10, completed: 2)
        var big = task("big", total: 4, weight: 3)
        outer = try rolledUp(outer, nil, big)
        let half = try progressed(big, to: 2)
        outer = try rolledUp(outer, big, half)
        big = half
        #expect(outer.fraction == (2 + 3 * 0.5) / 10)
        #expect(outer.mode == .quantified)
    }

    /// Never above 1 while unfinished; 1 once succeeded; never 1 with a failed descendant.
    @Test func theFractionStaysWithinItsBounds() throws {
        var outer = task("outer", total: 4, completed: 4)
        let running = try progressed(task("late", total: 2), to: 1)
        outer = try rolledUp(outer, nil, running)
        #expect(outer.fraction == 1, "4 of 4 units and half a child more: capped at 1")
        let failed = try TaskRules.finish(Finish(outcome: .failed), task: running, now: start + 3).task
        outer = try rolledUp(outer, running, failed)
        #expect(outer.fraction == TaskRecord.belowOne, "a failed child: never 100%")
        var clean = task("outer", total: 4, completed: 3)
        clean = try rolledUp(clean, nil, running)
        let succeeded = try TaskRules.finish(Finish(outcome: .succeeded), task: clean, now: start + 3).task
        #expect(succeeded.fraction == 1)
    }

    /// A parent without a total (or with 0) keeps the weighted mean of its children.
    @Test func aParentWithoutATotalKeepsTheMeanOfItsChildren() throws {
        for total: Int64? in [nil, 0] {
            var outer = task("outer", total: total)
            let child = try progressed(task("only", total: 10), to: 10)
            outer = try rolledUp(outer, nil, child)
            #expect(outer.fraction == 1, "total \(String(describing: total)): one child done of one")
        }
    }

    /// The sum over unfinished children leaves with a child that finishes, and changes add
    /// up as a batch adds them.
    @Test func theUnfinishedSumFollowsTheChildren() throws {
        let a = try progressed(task("a", total: 10), to: 4)
        let b = try progressed(task("b", total: 10, weight: 2), to: 5)
        var change = ChildrenChange(from: nil, to: a)
        change += ChildrenChange(from: nil, to: b)
        #expect(change.unfinishedDone == 0.4 + 2 * 0.5)
        let canceled = try TaskRules.finish(Finish(outcome: .canceled), task: a, now: start + 3).task
        #expect(ChildrenChange(from: a, to: canceled).unfinishedDone == -0.4)
        #expect(ChildrenChange(from: a, to: canceled).done == 0, "a canceled child keeps its share of the mean")
    }
}
