import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import EventStream

/// What a fan-out round carries and when it may run, with explicit times (nanoseconds):
/// every event below the backlog bound, each task's latest past it or after a pause.
@Suite struct FanOutRoundTests {
    private let ms: UInt64 = 1_000_000
    typealias E = TestEvents

    /// Pacing that pauses after any round, for `factor` times its length.
    private func pressed(factor: UInt64 = 3) -> FanOutPacing {
        FanOutPacing(threshold: 0, minimumWaiting: 1, factor: factor)
    }

    @Test func belowTheBacklogEveryEventGoesOutInOrder() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: FanOutPacing())
        var round: [TaskEvent]?
        let events = (1...200).map { E.event(Int64($0), "fast") }
        queue.append(Array(events[..<150]))
        queue.append(Array(events[150...]))
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round == events, "200 queued changes, 200 events")
        #expect(queue.waiting.isEmpty)
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round == nil, "nothing waits: no round")
    }

    @Test func pastTheBacklogARoundCarriesEachTasksLatestInTheOrderOfThoseChanges() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: FanOutPacing())
        var round: [TaskEvent]?
        queue.append((1...1100).map { E.event(Int64($0), "fast") })
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round == [E.event(1100, "fast")],
                "a backlog of 1,100 changes of one task comes as its latest state")

        queue.append((1...1025).map { E.event(Int64($0), $0 == 1024 ? "other" : "fast") })
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round == [E.event(1024, "other"), E.event(1025, "fast")])
        queue.append((1...1024).map { E.event(Int64($0), "fast") })
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round?.count == 1024, "at the bound, every event")
    }

    @Test func eventsThatWaitForAPauseGoCoalescedWhenItEnds() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: pressed())
        var round: [TaskEvent]?
        queue.append([E.event(1, "storm")])
        round = queue.takeRound(now: 0, stopping: false)
        #expect(round == [E.event(1, "storm")])
        queue.roundRan(from: 0, to: 10 * ms)
        // A 10 ms round: the next starts 4 × 10 ms after it began.
        queue.append([E.event(2, "storm"), E.event(3, "calm"), E.event(4, "storm")])
        #expect(queue.pauseEnd(now: 20 * ms) == 40 * ms)
        round = queue.takeRound(now: 20 * ms, stopping: false)
        #expect(round == nil)
        #expect(queue.waitedForPacing)
        queue.append((5...100).map { E.event(Int64($0), "storm") })
        round = queue.takeRound(now: 39 * ms, stopping: false)
        #expect(round == nil)
        round = queue.takeRound(now: 40 * ms, stopping: false)
        #expect(round == [E.event(3, "calm"), E.event(100, "storm")],
                "99 changes that waited come as each task's latest")
        queue.roundRan(from: 40 * ms, to: 41 * ms)
        queue.append([E.event(101, "storm")])
        round = queue.takeRound(now: 44 * ms, stopping: false)
        #expect(round == [E.event(101, "storm")], "after the pause, at once")
    }

    @Test func aStoppingBrokerRunsItsLastRoundThroughAPause() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: pressed(factor: 1000))
        var round: [TaskEvent]?
        queue.append([E.event(1)])
        _ = queue.takeRound(now: 0, stopping: false)
        queue.roundRan(from: 0, to: ms)
        queue.append([E.event(2), E.event(3)])
        round = queue.takeRound(now: 2 * ms, stopping: false)
        #expect(round == nil)
        round = queue.takeRound(now: 2 * ms, stopping: true)
        #expect(round == [E.event(3)])
    }

    @Test func aShortRoundOrFewEventsWaitingNeedNoPause() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: FanOutPacing(threshold: 5 * ms, minimumWaiting: 64, factor: 3))
        var round: [TaskEvent]?
        queue.roundRan(from: 0, to: 40 * ms)
        queue.append((1...63).map { E.event(Int64($0)) })
        #expect(queue.pauseEnd(now: 40 * ms) == nil)
        round = queue.takeRound(now: 40 * ms, stopping: false)
        #expect(round?.count == 63, "few waiting: every event, at once")
    }

    /// Events join the lap under way while fewer than the pacing's `minimumWaiting` have
    /// joined it; past that they wait for the next lap, and the pacing counts those that
    /// joined as having poured in during the lap.
    @Test func eventsJoinALapUnderWayUntilTheyPourIn() {
        var queue = FanOutQueue(coalescingBacklog: 1024, pacing: FanOutPacing(threshold: 5 * ms, minimumWaiting: 4, factor: 3))
        queue.append([E.event(1)])
        #expect(queue.takeRound(now: 0, stopping: false) == [E.event(1)])
        #expect(queue.takeJoining() == nil, "nothing waits")
        queue.append([E.event(2), E.event(3)])
        #expect(queue.takeJoining() == [E.event(2), E.event(3)])
        queue.append([E.event(4)])
        #expect(queue.takeJoining() == [E.event(4)])
        queue.append([E.event(5)])
        #expect(queue.takeJoining() == nil, "a fourth would make as many as pour in")
        queue.roundRan(from: 0, to: 10 * ms)
        #expect(queue.pauseEnd(now: 10 * ms) == 40 * ms, "three joined and one waits: four poured in")
        #expect(queue.takeRound(now: 40 * ms, stopping: false) == [E.event(5)])
        queue.roundRan(from: 40 * ms, to: 50 * ms)
        #expect(queue.pauseEnd(now: 50 * ms) == nil, "nothing joined the last lap")
    }

    /// A lap hands each subscriber the rounds it has not had, and lets a round go once it
    /// has ended after every subscriber had it: those that joined it stay for the next.
    @Test func aLapKeepsEachRoundUntilEverySubscriberHasHadIt() {
        var lap = FanOutLap()
        let (first, second, third) = (RoundEvents([E.event(1)]), RoundEvents([E.event(2)]), RoundEvents([E.event(3)]))
        lap.begin(with: first, at: 0)
        #expect(lap.nextRound == 1)
        #expect(lap.rounds(from: 0).map(\.highestChange) == [1])
        lap.join(second)
        #expect(lap.rounds(from: 0).map(\.highestChange) == [1, 2], "one not visited yet: both")
        #expect(lap.rounds(from: 1).map(\.highestChange) == [2], "one visited before the second joined")
        #expect(lap.rounds(from: 2).isEmpty)
        lap.end()
        #expect(lap.rounds.count == 1, "the second has not reached those visited before it joined")
        #expect(lap.rounds(from: 0).map(\.highestChange) == [2])
        lap.begin(with: third, at: 1)
        #expect(lap.rounds(from: 1).map(\.highestChange) == [2, 3])
        lap.end()
        #expect(lap.rounds.isEmpty && lap.nextRound == 3, "every round everywhere")
    }

    /// Coalescing keeps exactly each task's latest event, in the order of those events,
    /// whatever the mix (random mixes, from a fixed seed).
    @Test func coalescingKeepsExactlyEachTasksLatestInOrder() {
        var random = SeededGenerator(seed: 9)
        for _ in 0..<200 {
            let count = Int.random(in: 0...60, using: &random)
            let tasks = (0..<Int.random(in: 1...8, using: &random)).map { "t\($0)" }
            let events = (0..<count).map { E.event(Int64($0), tasks.randomElement(using: &random)!) }
            let coalesced = FanOutQueue.coalesced(events)
            let expected = events.indices.filter { index in
                !events[(index + 1)...].contains { $0.taskID == events[index].taskID }
            }.map { events[$0] }
            #expect(coalesced == expected)
            #expect(Set(coalesced.map(\.taskID)).count == coalesced.count)
        }
    }

    /// Coalesced runs of random lives (creations, updates, stalls, finishes, deletions of
    /// roots and children; seeded), handed to subscribers of every kind of filter: each
    /// gets at most one frame per task, with the task's latest change number, only of a
    /// task it would have had an event of uncoalesced, the latest event itself when it takes
    /// it; and a `new_roots` stream gets, as `task.created`, every root created in the run
    /// that still exists.
    @Test func coalescedRunsReachEveryFilterOncePerTaskAndNewRootsHearOfEveryNewRoot() {
        var random = SeededGenerator(seed: 58)
        let filters = [StreamFilter(), StreamFilter(newRoots: true), StreamFilter(taskIDs: ["r1"]),
                       StreamFilter(taskIDs: ["r1"], newRoots: true), StreamFilter(parentIDs: ["r0"], newRoots: true),
                       StreamFilter(parentIDs: ["r0"])]
        let later: [TaskEventKind] = [.updated, .updated, .stalled, .recovered, .overdue, .cancelRequested, .finished,
                                      .tooQuick, .deleted]
        for _ in 0..<300 {
            var events: [TaskEvent] = []
            var exists: Set<String> = []
            var change: Int64 = 0
            for _ in 0..<Int.random(in: 1...30, using: &random) {
                let task = ["r0", "r1", "r2", "c0", "c1"].randomElement(using: &random)!
                let parent = task.hasPrefix("c") ? "r0" : nil
                let kind: TaskEventKind = exists.contains(task) ? later.randomElement(using: &random)! : .created
                if kind == .created { exists.insert(task) } else if kind == .deleted { exists.remove(task) }
                change += 1
                events.append(E.event(change, task, parent: parent, kind: kind))
            }
            let coalesced = FanOutQueue.coalesced(events)
            let latest = Dictionary(events.map { ($0.taskID, $0) }, uniquingKeysWith: { $1 })
            for filter in filters {
                let sink = FakeEventSink()
                let subscriber = Subscriber(id: SubscriberID(rawValue: 1), sink: sink, filter: filter,
                                            limits: Subscriber.Limits(unsentBytes: 1 << 24, maximumPendingTasks: 1 << 16))
                let clock = ManualClock()
                subscriber.caughtUp(CatchUp(frames: [], highWater: 0, holdBack: HoldBack(filter: filter)),
                                    coalescingBacklog: 1 << 16, clock: clock)
                subscriber.deliver(RoundEvents(coalesced), clock: clock)
                let frames = sink.writtenTexts.joined().components(separatedBy: "\n\n").filter { !$0.isEmpty }
                let sent = frames.map { frame in
                    let fields = Dictionary(frame.split(separator: "\n").map { line in
                        let parts = line.split(separator: ":", maxSplits: 1)
                        return (String(parts[0]), parts.count > 1 ? String(parts[1].dropFirst()) : "")
                    }, uniquingKeysWith: { $1 })
                    let data = fields["data"] ?? ""
                    let task = String(data.split(separator: "\"")[3])
                    return (task: task, id: Int64(fields["id"] ?? "") ?? -1, kind: fields["event"] ?? "")
                }
                #expect(Set(sent.map(\.task)).count == sent.count, "one frame per task: \(sent) for \(filter)")
                for frame in sent {
                    let last = latest[frame.task]!
                    #expect(frame.id == last.changeNumber, "the task's latest change: \(frame) for \(filter)")
                    #expect(events.contains { $0.taskID == frame.task
                        && filter.matches(taskID: $0.taskID, parentID: $0.parentID, kind: $0.kind) },
                            "a task it would have had an event of: \(frame) for \(filter)")
                    if filter.matches(taskID: last.taskID, parentID: last.parentID, kind: last.kind) {
                        #expect(frame.kind == last.kind.rawValue || (frame.kind == "task.created" && last.kind == .updated),
                                "the latest event itself: \(frame) for \(filter)")
                    }
                }
                guard filter.newRoots else { continue }
                // Heard of: as a creation, unless the stream takes the root's latest event.
                let newRoots = Set(events.filter { $0.kind == .created && $0.parentID == nil }.map(\.taskID)).intersection(exists)
                for root in newRoots {
                    let last = latest[root]!
                    let kind = filter.matches(taskID: root, parentID: nil, kind: last.kind) ? last.kind : .created
                    #expect(sent.contains { $0.task == root && ($0.kind == kind.rawValue || $0.kind == "task.created") },
                            "the new root \(root): \(sent) for \(filter) of \(events.map(\.kind))")
                }
            }
        }
    }

    @Test func aRoundEncodesEachFrameOnceAndMatchesByFilter() {
        let round = RoundEvents([E.event(1, "a"), E.event(2, "c", parent: "p")])
        let first = round.frame(0)
        let again = round.frame(0)
        #expect(first.withUnsafeBufferPointer { $0.baseAddress } == again.withUnsafeBufferPointer { $0.baseAddress })
        #expect(String(decoding: first, as: UTF8.self) == E.frame(E.event(1, "a")))
        #expect(round.matches(1, StreamFilter(parentIDs: ["p"])))
        #expect(!round.matches(0, StreamFilter(parentIDs: ["p"])))
        #expect(round.changeNumbers == [1, 2] && round.taskIDs == ["a", "c"])
    }
}

/// The join of a catch-up and the live events that arrived while it was read.
@Suite struct CatchUpMergeTests {
    typealias E = TestEvents

    @Test func liveEventsTheCatchUpReflectsAreDropped() {
        let merge = CatchUpMerge(highWater: 10)
        #expect(!merge.isNew(9) && !merge.isNew(10) && merge.isNew(11))
        let arrived = [E.event(9, "a"), E.event(10, "b"), E.event(11, "a"), E.event(12, "b")]
        #expect(merge.eventsAfterCatchUp(arrived, coalescingBacklog: 1024) == [E.event(11, "a"), E.event(12, "b")])
    }

    @Test func pastTheBacklogTheNewEventsComeOnceEachAtTheirLatest() {
        let merge = CatchUpMerge(highWater: 1)
        let arrived = [E.event(1, "a"), E.event(2, "a"), E.event(3, "b"), E.event(4, "a")]
        #expect(merge.eventsAfterCatchUp(arrived, coalescingBacklog: 2) == [E.event(3, "b"), E.event(4, "a")])
        #expect(merge.eventsAfterCatchUp(arrived, coalescingBacklog: 3) == Array(arrived.dropFirst()),
                "the bound counts only the new events")
    }

    @Test func beforeAnyCatchUpEveryEventIsNew() {
        #expect(CatchUpMerge(highWater: .min).isNew(.min + 1))
        #expect(CatchUpMerge(highWater: .min).eventsAfterCatchUp([E.event(0)], coalescingBacklog: 0) == [E.event(0)])
    }
}

/// When the broker thread looks again without being told.
@Suite struct BrokerScheduleTests {
    private let second: UInt64 = 1_000_000_000

    @Test func heartbeatsComeOneIntervalApartFromWhenTheyAreSent() {
        var schedule = BrokerSchedule(heartbeatSeconds: 15, now: 100 * second)
        var due = schedule.heartbeatIsDue(now: 115 * second - 1)
        #expect(!due)
        due = schedule.heartbeatIsDue(now: 115 * second)
        #expect(due)
        due = schedule.heartbeatIsDue(now: 115 * second)
        #expect(!due, "once")
        #expect(schedule.nextHeartbeat == 130 * second)
        due = schedule.heartbeatIsDue(now: 140 * second)
        #expect(due, "late: sent, and the next counted from now")
        #expect(schedule.nextHeartbeat == 155 * second)
    }

    @Test func theThreadSleepsUntilTheFirstThingDue() {
        let schedule = BrokerSchedule(heartbeatSeconds: 15, now: 0)
        let wall: EpochMilliseconds = 1_800_000_000_000
        #expect(schedule.delay(now: 0, pauseEnd: nil, wallNow: wall, nextRelease: nil) == 15)
        #expect(schedule.delay(now: 5 * second, pauseEnd: nil, wallNow: wall, nextRelease: nil) == 10)
        #expect(schedule.delay(now: 0, pauseEnd: 2 * second, wallNow: wall, nextRelease: nil) == 2)
        #expect(schedule.delay(now: 0, pauseEnd: 2 * second, wallNow: wall, nextRelease: wall + 500) == 0.5)
        #expect(schedule.delay(now: 0, pauseEnd: nil, wallNow: wall, nextRelease: wall + 20_000) == 15)
    }

    @Test func aTimeAlreadyPastIsWaitedForBrieflyNotInABusyLoop() {
        let schedule = BrokerSchedule(heartbeatSeconds: 15, now: 0)
        #expect(schedule.delay(now: 20 * second, pauseEnd: nil, wallNow: 0, nextRelease: nil) == 0.001)
        #expect(schedule.delay(now: 0, pauseEnd: nil, wallNow: 1000, nextRelease: 999) == 0.001)
    }
}
