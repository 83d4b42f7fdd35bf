import Testing
@testable import HeadwayCore

private let start: EpochMilliseconds = 1_800_000_000_000

private func runningTask(stallTimeout: Int64 = 30_000, progressTimeout: Int64? = nil, total: Int64? = 100) -> TaskRecord {
    var task = TaskRecord(id: "t", name: "T", total: total, stallTimeoutMilliseconds: stallTimeout,
                          progressTimeoutMilliseconds: progressTimeout, createdAt: start, updatedAt: start,
                          lastSignalAt: start)
    task.startedAt = start
    return task
}

@Suite struct StallRuleTests {
    @Test func silentAfterTheStallTimeout() {
        let task = runningTask()
        #expect(StallRule.reason(task, now: start + 29_999, graceStart: 0) == nil)
        #expect(StallRule.reason(task, now: start + 30_000, graceStart: 0) == .silent)
        #expect(StallRule.nextDeadline(task, graceStart: 0) == start + 30_000)
    }

    @Test func noProgressWhenSignalsComeButCompletedDoesNotGrow() {
        var task = runningTask(progressTimeout: 60_000)
        task.lastSignalAt = start + 50_000  // heartbeats keep it from being silent
        #expect(StallRule.reason(task, now: start + 59_999, graceStart: 0) == nil)
        #expect(StallRule.reason(task, now: start + 60_000, graceStart: 0) == .noProgress)
        task.lastProgressAt = start + 40_000
        #expect(StallRule.reason(task, now: start + 60_000, graceStart: 0) == nil)
        #expect(StallRule.nextDeadline(task, graceStart: 0) == start + 80_000)
    }

    @Test func silentWinsOverNoProgress() {
        let task = runningTask(stallTimeout: 10_000, progressTimeout: 5_000)
        #expect(StallRule.reason(task, now: start + 6_000, graceStart: 0) == .noProgress)
        #expect(StallRule.reason(task, now: start + 10_000, graceStart: 0) == .silent)
    }

    @Test func pendingAndFinishedTasksAreNeverStalled() {
        var task = runningTask()
        task.state = .pending
        #expect(StallRule.reason(task, now: start + 1_000_000, graceStart: 0) == nil)
        #expect(StallRule.nextDeadline(task, graceStart: 0) == nil)
        task.state = .failed
        #expect(StallRule.reason(task, now: start + 1_000_000, graceStart: 0) == nil)
    }

    @Test func afterARestartEveryTaskGetsAFullTimeout() {
        let task = runningTask()
        let restart = start + 100_000
        #expect(StallRule.reason(task, now: restart + 1, graceStart: restart) == nil)
        #expect(StallRule.reason(task, now: restart + 30_000, graceStart: restart) == .silent)
        #expect(StallRule.nextDeadline(task, graceStart: restart) == restart + 30_000)
    }

    @Test func raisingHappensOnceAndRecoveryClearsTheFlag() {
        var task = runningTask(progressTimeout: 5_000)
        #expect(StallRule.apply(to: &task, now: start + 4_000, graceStart: 0, raising: true) == nil)
        #expect(StallRule.apply(to: &task, now: start + 5_200, graceStart: 0, raising: true) == .stalled)
        #expect(task.stalled && task.stallReason == .noProgress)
        #expect(task.stalledSince == start + 5_000, "stalled since the deadline, not since the sweep")
        #expect(task.stallDeadline == start + 30_000, "still to be flagged silent")
        #expect(StallRule.apply(to: &task, now: start + 6_000, graceStart: 0, raising: true) == nil, "raised once")
        #expect(StallRule.apply(to: &task, now: start + 30_500, graceStart: 0, raising: true) == .updated)
        #expect(task.stallReason == .silent)
        #expect(task.stallDeadline == nil, "only a signal can change a silent stall")
        // A heartbeat clears silence but not the lack of progress…
        task.lastSignalAt = start + 31_000
        #expect(StallRule.apply(to: &task, now: start + 31_000, graceStart: 0, raising: false) == .updated)
        #expect(task.stallReason == .noProgress)
        // …progress does.
        task.lastProgressAt = start + 32_000
        task.lastSignalAt = start + 32_000
        #expect(StallRule.apply(to: &task, now: start + 32_000, graceStart: 0, raising: false) == .recovered)
        #expect(!task.stalled && task.stallReason == nil && task.stalledSince == nil)
    }

    @Test func signalsNeverRaiseTheFlag() {
        var task = runningTask()
        #expect(StallRule.apply(to: &task, now: start + 40_000, graceStart: 0, raising: false) == nil)
        #expect(!task.stalled)
    }
}

/// The estimator, driven by explicit report times: the three properties the design asks for.
@Suite struct RateEstimatorTests {
    /// Reports `values` at `times` (seconds after start) to a task of `total` units; returns
    /// the ETA after each report.
    private func etas(total: Int64, reports: [(seconds: Double, completed: Int64)]) throws -> [Double?] {
        var task = runningTask(total: total)
        task.rate.observe(0, at: start)
        return try reports.map { report in
            let now = start + Int64(report.seconds * 1000)
            task = try TaskRules.progress(ProgressUpdate(completed: report.completed), to: task, now: now).task
            return task.estimate?.etaSeconds
        }
    }

    @Test func steadyRateGivesAnETAWithin5PercentAfter10Seconds() throws {
        // 7 units per second, reported every 0.5 s, 1000 units in all.
        let reports = (1...40).map { (seconds: Double($0) * 0.5, completed: Int64(Double($0) * 0.5 * 7)) }
        let result = try etas(total: 1000, reports: reports)
        for (report, eta) in zip(reports, result) where report.seconds >= 10 {
            let truth = Double(1000 - report.completed) / 7
            #expect(abs(eta! - truth) / truth < 0.05, "at \(report.seconds) s: \(eta!) vs \(truth)")
        }
    }

    @Test func burstsEvery3SecondsKeepSuccessiveETAsWithin15Percent() throws {
        // 10 units/s on average, delivered as three quick reports every 3 s.
        var reports: [(seconds: Double, completed: Int64)] = []
        var completed: Int64 = 0
        for burst in 1...20 {
            for step in 0..<3 {
                completed += 10
                reports.append((Double(burst) * 3 + Double(step) * 0.01, completed))
            }
        }
        // After the first 10 s (as for a steady rate), successive ETAs stay close.
        let settled = zip(reports, try etas(total: 1000, reports: reports)).filter { $0.0.seconds >= 10 }.compactMap(\.1)
        #expect(settled.count == reports.count - 9)
        for (previous, next) in zip(settled, settled.dropFirst()) {
            #expect(abs(next - previous) / previous < 0.15, "\(previous) → \(next)")
        }
    }

    @Test func aHalvingOfSpeedIsReflectedWithin30Seconds() throws {
        // 20 units/s for 60 s, then 10 units/s; reports every second.
        var reports: [(seconds: Double, completed: Int64)] = []
        for second in 1...120 {
            let completed = second <= 60 ? 20 * second : 1200 + 10 * (second - 60)
            reports.append((Double(second), Int64(completed)))
        }
        let result = try etas(total: 5000, reports: reports)
        let at90 = result[89]!
        let truth = Double(5000 - 1500) / 10
        #expect(abs(at90 - truth) / truth < 0.10, "30 s after the halving: \(at90) vs \(truth)")
    }

    @Test func nullWheneverItCannotBeHonest() {
        var task = runningTask(total: 100)
        #expect(task.estimate == nil, "no samples")
        task.rate.observe(0, at: start)
        task.rate.observe(5, at: start + 500)
        #expect(task.estimate == nil, "samples less than a second apart")
        task.rate.observe(10, at: start + 2000)
        #expect(task.estimate != nil)
        var indeterminate = task
        indeterminate.total = nil
        #expect(indeterminate.estimate == nil)
        var stalled = task
        stalled.stalled = true
        #expect(stalled.estimate == nil)
        var finished = task
        finished.state = .succeeded
        #expect(finished.estimate == nil)
        var still = runningTask(total: 100)
        still.rate.observe(10, at: start)
        still.rate.observe(10, at: start + 5000)
        #expect(still.estimate == nil, "no movement")
    }
}

@Suite struct RollUpTests {
    /// A weighted change of one child, as `ChildrenChange` makes it.
    func change(weight: Double = 0, done: Double) -> ChildrenChange {
        var change = ChildrenChange()
        change.weight = weight
        change.done = done
        return change
    }

    @Test func parentFractionIsTheWeightedMeanOfItsChildren() throws {
        var parent = runningTask(total: nil)
        #expect(parent.mode == .indeterminate)
        var child = runningTask(total: 10)
        child.weight = 3
        child.completed = 5
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: nil, to: child), now: start + 1))
        var indeterminateChild = runningTask(total: nil)
        indeterminateChild.weight = 1
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: nil, to: indeterminateChild), now: start + 2))
        #expect(parent.mode == .quantified)
        #expect(parent.children == ChildrenCounts(running: 2))
        let expectedBefore: Double = (3 * 0.5 + 1 * 0) / 4
        #expect(parent.fraction == expectedBefore)
        var failed = indeterminateChild
        failed.state = .failed
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: indeterminateChild, to: failed), now: start + 3))
        #expect(parent.fraction == expectedBefore, "a failed indeterminate child counts 0, not 1")
        #expect(parent.children == ChildrenCounts(running: 1, failed: 1))
        #expect(parent.attention == .failed)
        #expect(parent.lastSignalAt == start + 3, "a child's activity is the parent's signal")
    }

    /// A failed or canceled child counts the fraction it had when it finished; a succeeded
    /// one 1. A parent with a failed descendant never shows 1, even succeeded.
    @Test func finishedChildrenCountWhatTheyDid() throws {
        var parent = runningTask(total: nil)
        var a = runningTask(total: 10)
        a.completed = 1
        var b = a
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: nil, to: a), now: start + 1))
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: nil, to: b), now: start + 1))
        var failedA = a
        failedA.state = .failed
        var canceledB = b
        canceledB.state = .canceled
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: a, to: failedA), now: start + 2))
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: b, to: canceledB), now: start + 2))
        #expect(parent.fraction == 0.1)
        #expect(parent.children == ChildrenCounts(failed: 1, canceled: 1))
        #expect(parent.attention == .failed)

        var whole = runningTask(total: nil)
        a.completed = 10
        b = a
        b.state = .failed
        whole = try #require(TaskRules.rollUp(whole, ChildrenChange(from: nil, to: b), now: start + 1))
        #expect(try #require(whole.fraction) < 1, "a child that failed at 10 of 10 leaves its parent below 1")
        whole.state = .succeeded
        #expect(try #require(whole.fraction) < 1)
        #expect(Int(try #require(whole.fraction) * 100) == 99)
    }

    /// While `attention` is set, a parent shows no rate and no ETA.
    @Test func attentionHidesTheParentsEstimate() throws {
        var parent = runningTask(total: nil)
        var child = runningTask(total: 10)
        parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: nil, to: child), now: start))
        for second in 1...5 {
            var next = child
            next.completed = Int64(second)
            parent = try #require(TaskRules.rollUp(parent, ChildrenChange(from: child, to: next), now: start + Int64(second) * 1_000))
            child = next
        }
        #expect(parent.estimate != nil)
        var stalled = child
        stalled.stalled = true
        stalled.stallReason = .silent
        let step = TaskRules.rollUpStep(parent, ChildrenChange(from: child, to: stalled), isSignal: false, now: start + 6_000)
        guard case .changed(let flagged) = step else { Issue.record("expected a change: \(step)"); return }
        #expect(flagged.attention == .stalled)
        #expect(flagged.children.stalled == 1 && flagged.children.running == 1)
        #expect(flagged.estimate == nil)
        #expect(flagged.lastSignalAt == parent.lastSignalAt, "a stall raised is no signal")
    }

    @Test func aFinishedParentNoLongerChanges() {
        var parent = runningTask(total: nil)
        parent.state = .succeeded
        #expect(TaskRules.rollUp(parent, change(weight: 1, done: 1), now: start) == nil)
    }
}

@Suite struct DownsamplingTests {
    @Test func keepsFirstAndLastAndAtMostTheMaximum() {
        let points = (0..<1000).map { (x: Double($0), y: Double($0 * $0 % 97)) }
        for maximum in [2, 3, 10, 200, 999] {
            let kept = Downsampling.largestTriangleThreeBuckets(points, maximum: maximum)
            #expect(kept.count == maximum)
            #expect(kept.first == 0 && kept.last == 999)
            #expect(kept == kept.sorted() && Set(kept).count == kept.count)
        }
        #expect(Downsampling.largestTriangleThreeBuckets(Array(points.prefix(5)), maximum: 10) == [0, 1, 2, 3, 4])
    }

    @Test func keepsTheShapeOfAStep() {
        // Flat, then a jump: the corner points must survive.
        let points = (0..<100).map { (x: Double($0), y: $0 < 50 ? 0.0 : 1.0) }
        let kept = Downsampling.largestTriangleThreeBuckets(points, maximum: 10)
        #expect(kept.contains { $0 == 49 || $0 == 50 })
    }
}
