import Testing
@testable import HeadwayCore

@Suite struct StreamFilterTests {
    @Test func everythingWhenNothingIsNamed() {
        #expect(StreamFilter().matches(taskID: "a", parentID: nil))
        #expect(StreamFilter().matches(taskID: "b", parentID: "a"))
    }

    @Test func namedTasksAndChildrenOfTheNamedParent() {
        let filter = StreamFilter(taskIDs: ["x", "y"], parentIDs: ["p"])
        #expect(filter.matches(taskID: "x", parentID: nil))
        #expect(filter.matches(taskID: "c", parentID: "p"))
        #expect(!filter.matches(taskID: "p", parentID: nil))
        #expect(!filter.matches(taskID: "z", parentID: "q"))
        #expect(StreamFilter(parentIDs: ["p"]).matches(taskID: "c", parentID: "p"))
        #expect(!StreamFilter(parentIDs: ["p"]).matches(taskID: "c", parentID: nil))
    }

    @Test func childrenOfSeveralParents() {
        let filter = StreamFilter(taskIDs: ["x"], parentIDs: ["p", "q"])
        #expect(filter.matches(taskID: "c", parentID: "p") && filter.matches(taskID: "d", parentID: "q"))
        #expect(!filter.matches(taskID: "e", parentID: "r") && !filter.matches(taskID: "p", parentID: nil))
    }

    /// `new_roots`: a new top-level task's creation, nothing else of it, nor of a child.
    @Test func theCreationsOfNewTopLevelTasks() {
        let filter = StreamFilter(taskIDs: ["x"], newRoots: true)
        #expect(filter.matches(taskID: "new", parentID: nil, kind: .created))
        #expect(!filter.matches(taskID: "new", parentID: nil, kind: .updated))
        #expect(!filter.matches(taskID: "child", parentID: "p", kind: .created))
        #expect(filter.matches(taskID: "x", parentID: nil, kind: .finished))
        let alone = StreamFilter(newRoots: true, taskPrefix: "team-")
        #expect(alone.matches(taskID: "team-new", parentID: nil, kind: .created))
        #expect(!alone.matches(taskID: "team-old", parentID: nil, kind: .updated), "new roots alone are not every task")
        #expect(!alone.matches(taskID: "other", parentID: nil, kind: .created), "the task prefix holds")
    }

    @Test func oneNamedTaskAsTheTasksChange() {
        var filter = StreamFilter(taskIDs: ["x"], taskPrefix: "x")
        #expect(filter.matches(taskID: "x", parentID: nil))
        #expect(!filter.matches(taskID: "xy", parentID: nil) && !filter.matches(taskID: "y", parentID: "x"))
        filter.taskIDs.insert("xy")
        #expect(filter.matches(taskID: "x", parentID: nil) && filter.matches(taskID: "xy", parentID: nil))
        filter.taskIDs = ["xz"]
        #expect(!filter.matches(taskID: "x", parentID: nil) && filter.matches(taskID: "xz", parentID: nil))
        filter.parentIDs = ["p"]
        #expect(filter.matches(taskID: "xc", parentID: "p") && !filter.matches(taskID: "c", parentID: "p"))
        filter.taskIDs = []
        #expect(!filter.matches(taskID: "xz", parentID: nil) && filter.matches(taskID: "xc", parentID: "p"))
    }
}

/// `min_duration`: driven by explicit times, no clock needed.
@Suite struct HoldBackTests {
    let start: EpochMilliseconds = 1_000_000
    private func event(_ seq: Int64, _ kind: TaskEventKind = .updated, task: String = "t", createdAt: EpochMilliseconds? = nil,
                       finishedAt: EpochMilliseconds? = nil) -> TaskEvent {
        TaskEvent(changeNumber: seq, kind: kind, taskID: task, parentID: nil, createdAt: createdAt ?? start,
                  finishedAt: finishedAt, data: "{\"seq\":\(seq)}")
    }

    @Test func withoutMinimumEverythingIsSent() {
        var holdBack = HoldBack(filter: StreamFilter())
        #expect(holdBack.offer(event(1, .created), now: start) == .send(event(1, .created)))
    }

    @Test func youngTasksAreHeldAndReleasedAtTheirLatestState() {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 5000))
        #expect(holdBack.offer(event(1, .created), now: start) == .hold)
        #expect(holdBack.offer(event(2), now: start + 1000) == .hold)
        #expect(holdBack.nextRelease == start + 5000)
        #expect(holdBack.release(now: start + 4999) == [])
        #expect(holdBack.release(now: start + 5000) == [event(2)])
        #expect(holdBack.heldTaskIDs.isEmpty)
        #expect(holdBack.offer(event(3), now: start + 6000) == .send(event(3)))
    }

    @Test func tasksThatFinishSoonerAreNeverSent() {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 5000))
        #expect(holdBack.offer(event(1, .created), now: start) == .hold)
        #expect(holdBack.offer(event(2, .finished, finishedAt: start + 4000), now: start + 4000) == .drop)
        #expect(holdBack.release(now: start + 10_000) == [])
        // A deletion of a task never shown is not sent either.
        #expect(holdBack.offer(event(3, .created, task: "u"), now: start) == .hold)
        #expect(holdBack.offer(event(4, .deleted, task: "u"), now: start + 100) == .drop)
    }

    @Test func longTasksAreSentWhenTheyFinishOrAreDeleted() {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 5000))
        let finishedLate = event(1, .finished, finishedAt: start + 6000)
        #expect(holdBack.offer(finishedLate, now: start + 6000) == .send(finishedLate))
        #expect(holdBack.offer(event(2, .deleted, task: "old", createdAt: start - 60_000), now: start)
            == .send(event(2, .deleted, task: "old", createdAt: start - 60_000)))
    }

    @Test func releasesOldestTaskFirst() {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 1000))
        _ = holdBack.offer(event(5, task: "b", createdAt: start + 10), now: start + 10)
        _ = holdBack.offer(event(6, task: "a", createdAt: start), now: start + 10)
        #expect(holdBack.release(now: start + 2000).map(\.taskID) == ["a", "b"])
    }
}

@Suite struct FanOutPacingTests {
    private let ms: UInt64 = 1_000_000

    @Test func roundsFollowAtOnceWithoutPressure() {
        var pacing = FanOutPacing(threshold: 5 * ms, minimumWaiting: 64, factor: 3)
        pacing.roundRan(from: 0, to: 4 * ms)
        #expect(pacing.pauseEnd(waiting: 1000, now: 4 * ms) == nil, "a short round needs no pause")
        pacing.roundRan(from: 10 * ms, to: 50 * ms)
        #expect(pacing.pauseEnd(waiting: 63, now: 50 * ms) == nil, "a long round but few updates waiting")
    }

    @Test func aLongRoundUnderPressureIsFollowedByAPause() {
        var pacing = FanOutPacing(threshold: 5 * ms, minimumWaiting: 64, factor: 3)
        pacing.roundRan(from: 10 * ms, to: 50 * ms)
        // 40 ms of fan-out: the next round starts 4 × 40 ms after the last began.
        #expect(pacing.pauseEnd(waiting: 64, now: 50 * ms) == 170 * ms)
        #expect(pacing.pauseEnd(waiting: 5000, now: 169 * ms) == 170 * ms)
        #expect(pacing.pauseEnd(waiting: 5000, now: 170 * ms) == nil, "the pause is over")
    }

    @Test func byDefaultFanOutTakesAtMostAnEighthOfTheTimeUnderPressure() {
        var pacing = FanOutPacing()
        pacing.roundRan(from: 0, to: 4 * ms)
        #expect(pacing.pauseEnd(waiting: 10_000, now: 4 * ms) == nil, "rounds up to 5 ms need no pause")
        pacing.roundRan(from: 100 * ms, to: 120 * ms)
        #expect(pacing.pauseEnd(waiting: 63, now: 120 * ms) == nil, "fewer than 64 events waiting need no pause")
        // 20 ms of fan-out: the next round starts 8 × 20 ms after the last began.
        #expect(pacing.pauseEnd(waiting: 64, now: 120 * ms) == 260 * ms)
        #expect(pacing.pauseEnd(waiting: 64, now: 260 * ms) == nil)
    }
}
