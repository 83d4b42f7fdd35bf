import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import EventStream

/// One subscriber, driven by hand with a fake sink and a manual clock: what it writes,
/// what it keeps waiting, when it is cut off, and how its catch-up joins live events.
@Suite struct SubscriberTests {
    let clock = ManualClock()
    /// Full at 1,000 bytes, cut off past 4,000.
    let limits = Subscriber.Limits(unsentBytes: 4000, maximumPendingTasks: 3)
    let catchUpFrame = "retry: 3000\n\n"
    typealias E = TestEvents

    private func subscriber(_ sink: FakeEventSink, filter: StreamFilter = StreamFilter()) -> Subscriber {
        Subscriber(id: SubscriberID(rawValue: 1), sink: sink, filter: filter, limits: limits)
    }

    /// A subscriber whose catch-up (one `retry:` frame, reflecting changes up to
    /// `highWater`) has been handed over.
    private func live(_ sink: FakeEventSink, filter: StreamFilter = StreamFilter(), highWater: Int64 = 0) -> Subscriber {
        let subscriber = subscriber(sink, filter: filter)
        let catchUp = CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: highWater, holdBack: HoldBack(filter: filter))
        #expect(subscriber.caughtUp(catchUp, coalescingBacklog: 1024, clock: clock) == .nothing)
        return subscriber
    }

    @Test func aRoundGoesOutInOneWriteWithOnlyTheMatchingEventsNewerThanTheCatchUp() {
        let sink = FakeEventSink()
        let subscriber = live(sink, filter: StreamFilter(taskIDs: ["a"], parentIDs: ["p"]), highWater: 10)
        let round = RoundEvents([E.event(10, "a"), E.event(11, "a"), E.event(12, "b"), E.event(13, "c", parent: "p")])
        #expect(subscriber.deliver(round, clock: clock) == .written)
        #expect(sink.writtenTexts == [catchUpFrame, E.frame(E.event(11, "a")) + E.frame(E.event(13, "c", parent: "p"))])
        #expect(sink.writes[1].count == 2, "one piece per frame, in one write")
        #expect(subscriber.deliver(RoundEvents([E.event(14, "b")]), clock: clock) == .nothing)
        #expect(sink.writes.count == 2)
    }

    /// Rounds handed over together (a lap reached the subscriber after another round
    /// joined it) go out in one write, each round filtered as alone, the shared frames of a
    /// round sent whole among the frames gathered from one that is not; while catching up,
    /// their matching events are kept, in order.
    @Test func roundsHandedOverTogetherGoOutInOneWriteEachFilteredAsAlone() {
        let sink = FakeEventSink()
        let subscriber = live(sink, filter: StreamFilter(taskIDs: ["a", "b"]), highWater: 10)
        let rounds = [RoundEvents([E.event(10, "a"), E.event(11, "x"), E.event(12, "b")]),
                      RoundEvents([E.event(13, "a"), E.event(14, "b")]),
                      RoundEvents([E.event(15, "x")])]
        #expect(subscriber.deliver(rounds[...], clock: clock) == .written)
        #expect(sink.writtenTexts.dropFirst() == [[12, 13, 14].map { E.frame(E.event($0, $0 == 13 ? "a" : "b")) }.joined()])
        #expect(subscriber.deliver(rounds[2...], clock: clock) == .nothing, "nothing of theirs")

        let catchingUp = self.subscriber(FakeEventSink(), filter: StreamFilter(taskIDs: ["a", "b"]))
        #expect(catchingUp.deliver(rounds[...], clock: clock) == .nothing)
        let catchUp = CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 12, holdBack: HoldBack(filter: catchingUp.filter))
        let catchingUpSink = catchingUp.sink as? FakeEventSink
        #expect(catchingUp.caughtUp(catchUp, coalescingBacklog: 1024, clock: clock) == .written)
        #expect(catchingUpSink?.writtenTexts == [catchUpFrame, E.frame(E.event(13, "a")) + E.frame(E.event(14, "b"))])
    }

    @Test func theFrameIsExactlyTheServerSentEvent() {
        #expect(E.frame(E.event(7, "a")) == "id: 7\nevent: task.updated\ndata: {\"id\":\"a\",\"seq\":7}\n\n")
        #expect(E.frame(E.event(7, "a"), withID: false) == "event: task.updated\ndata: {\"id\":\"a\",\"seq\":7}\n\n")
    }

    @Test func eventsArrivingDuringTheCatchUpFollowItAndThoseItReflectsAreDropped() {
        let sink = FakeEventSink()
        let subscriber = subscriber(sink, filter: StreamFilter(taskIDs: ["a", "b"]))
        #expect(subscriber.deliver(RoundEvents([E.event(5, "a"), E.event(6, "x")]), clock: clock) == .nothing)
        #expect(subscriber.deliver(RoundEvents([E.event(7, "b"), E.event(8, "a")]), clock: clock) == .nothing)
        #expect(sink.writes.isEmpty, "nothing goes out before the catch-up")
        #expect(!subscriber.isLive)

        let catchUp = CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 6, holdBack: HoldBack(filter: subscriber.filter))
        #expect(subscriber.caughtUp(catchUp, coalescingBacklog: 1024, clock: clock) == .written)
        #expect(subscriber.isLive)
        #expect(sink.writtenTexts == [catchUpFrame, E.frame(E.event(7, "b")) + E.frame(E.event(8, "a"))])
        // The same rule keeps holding for live rounds: a change the catch-up reflects
        // (published late, in the same batch as the hand-over) is not sent again.
        #expect(subscriber.deliver(RoundEvents([E.event(6, "a"), E.event(9, "a")]), clock: clock) == .written)
        #expect(sink.writtenTexts.last == E.frame(E.event(9, "a")))
    }

    @Test func aLargeBacklogDuringTheCatchUpFollowsItCoalesced() {
        let sink = FakeEventSink()
        let subscriber = subscriber(sink)
        subscriber.deliver(RoundEvents((1...5).map { E.event($0, $0 % 2 == 0 ? "even" : "odd") }), clock: clock)
        let catchUp = CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 1, holdBack: HoldBack(filter: StreamFilter()))
        subscriber.caughtUp(catchUp, coalescingBacklog: 3, clock: clock)
        #expect(sink.writtenTexts == [catchUpFrame, E.frame(E.event(4, "even")) + E.frame(E.event(5, "odd"))])
    }

    @Test func aFullStreamKeepsTheLatestFramePerTaskInTheOrderOfLatestChange() {
        let sink = FakeEventSink()
        let subscriber = live(sink)
        sink.fill(1000)
        #expect(subscriber.deliver(RoundEvents([E.event(1, "a"), E.event(2, "b"), E.event(3, "a")]), clock: clock) == .waiting)
        #expect(subscriber.pendingTaskCount == 2)
        sink.peerRead()
        // Room again, but frames wait: a new round queues behind them rather than jump ahead.
        #expect(subscriber.deliver(RoundEvents([E.event(4, "c")]), clock: clock) == .waiting)
        subscriber.drained()
        #expect(sink.writtenTexts.dropFirst() == [E.frame(E.event(2, "b")) + E.frame(E.event(3, "a")) + E.frame(E.event(4, "c"))])
        #expect(subscriber.pendingTaskCount == 0)
        #expect(subscriber.deliver(RoundEvents([E.event(5, "a")]), clock: clock) == .written)
    }

    @Test func drainingWritesWaitingFramesOnlyWhileTheyFit() {
        let sink = FakeEventSink()
        let subscriber = live(sink)
        let events = [E.event(1, "a"), E.event(2, "b"), E.event(3, "c")]
        let frameBytes = E.frame(events[0]).utf8.count
        sink.fill(1000)
        subscriber.deliver(RoundEvents(events), clock: clock)
        sink.fill(1000 - frameBytes)
        subscriber.drained()
        #expect(sink.writtenTexts.last == E.frame(events[0]), "room for one frame: one frame")
        #expect(subscriber.pendingTaskCount == 2)
        sink.peerRead()
        subscriber.drained()
        #expect(sink.writtenTexts.last == E.frame(events[1]) + E.frame(events[2]))
    }

    @Test func pastItsBoundASubscriberIsCutOffAtOnce() {
        let sink = FakeEventSink()
        let subscriber = live(sink)
        sink.fill(1000)
        #expect(subscriber.deliver(RoundEvents((1...3).map { E.event($0, "t\($0)") }), clock: clock) == .waiting)
        #expect(!sink.wasAborted, "at the bound, it waits")
        #expect(subscriber.deliver(RoundEvents([E.event(4, "t4")]), clock: clock) == .cutOff(.pendingTasks(4)))
        #expect(sink.wasAborted && !sink.wasFinished, "closed at once, not after what is queued")
        #expect(subscriber.pendingTaskCount == 0)
        #expect(subscriber.deliver(RoundEvents([E.event(5, "t5")]), clock: clock) == .dropped)
        #expect(subscriber.pendingTaskCount == 0)
    }

    /// Owned unsent bytes and waiting frames together are capped: at the cap it waits,
    /// one byte past it the stream is closed, however few tasks wait.
    @Test func pastTheCapInBytesASubscriberIsCutOffEvenWithOneTaskWaiting() {
        let frame = E.frame(E.event(1, "big"))
        for (owned, expected) in [(4000 - frame.utf8.count, Delivery.waiting),
                                  (4001 - frame.utf8.count, .cutOff(.bytes(4001)))] {
            let sink = FakeEventSink()
            let subscriber = live(sink)
            sink.fill(owned)
            #expect(subscriber.deliver(RoundEvents([E.event(1, "big")]), clock: clock) == expected, "\(owned) bytes owned")
            #expect(sink.wasAborted == (expected != .waiting))
        }
    }

    /// The catch-up is written shared (referenced, not counted): one larger than the cap
    /// reaches a client that reads, and only what is written after it counts.
    @Test func aCatchUpLargerThanTheCapIsSharedAndDoesNotCount() {
        let sink = FakeEventSink()
        let subscriber = subscriber(sink)
        sink.fill(0)
        let big = Array(repeating: UInt8(ascii: "x"), count: 10_000)
        let catchUp = CatchUp(frames: [big], highWater: 0, holdBack: HoldBack(filter: StreamFilter()))
        #expect(subscriber.caughtUp(catchUp, coalescingBacklog: 1024, clock: clock) == .nothing)
        #expect(sink.sharedWrites == [true])
        #expect(sink.bufferedBytes == 10_000 && sink.ownedBytes == 0)
        // The stream is full (its catch-up waits): live frames wait too.
        #expect(subscriber.deliver(RoundEvents([E.event(1, "a")]), clock: clock) == .waiting)
        #expect(!sink.wasAborted)
        sink.peerRead()
        subscriber.drained()
        #expect(sink.writtenTexts.last == E.frame(E.event(1, "a")))
        #expect(sink.sharedWrites == [true, false], "live frames are owned")
    }

    /// A heartbeat goes only into an empty stream: it must not grow one whose peer reads
    /// nothing (nor add to a catch-up still waiting).
    @Test func heartbeatsNeverGrowAStreamThatHoldsBytes() {
        let sink = FakeEventSink()
        let subscriber = live(sink)
        sink.fill(10)
        subscriber.heartbeat([EventFrames.heartbeat])
        #expect(sink.writes.count == 1, "only the catch-up")
        sink.peerRead()
        subscriber.heartbeat([EventFrames.heartbeat])
        #expect(sink.writtenTexts.last == ":\n\n")
    }

    @Test func manyChangesOfOneTaskNeverCutASubscriberOff() {
        let sink = FakeEventSink()
        let subscriber = live(sink)
        sink.fill(1000)
        for seq in 1...100 { #expect(subscriber.deliver(RoundEvents([E.event(Int64(seq), "busy")]), clock: clock) == .waiting) }
        #expect(subscriber.pendingTaskCount == 1)
        sink.peerRead()
        subscriber.drained()
        #expect(sink.writtenTexts.last == E.frame(E.event(100, "busy")))
    }

    @Test func heartbeatsGoOnlyToLiveSubscribersWithNothingWaiting() {
        let comment = [EventFrames.heartbeat]
        let catchingUpSink = FakeEventSink()
        subscriber(catchingUpSink).heartbeat(comment)
        #expect(catchingUpSink.writes.isEmpty)

        let sink = FakeEventSink()
        let subscriber = live(sink)
        subscriber.heartbeat(comment)
        #expect(sink.writtenTexts.last == ":\n\n")
        sink.fill(1000)
        subscriber.deliver(RoundEvents([E.event(1)]), clock: clock)
        subscriber.heartbeat(comment)
        #expect(sink.writes.count == 2, "frames wait: no heartbeat")
    }

    @Test func youngTasksAreHeldThenReleasedWithTheReleaseID() {
        let sink = FakeEventSink()
        let subscriber = live(sink, filter: StreamFilter(minDurationMilliseconds: 5000))
        let start = clock.now()
        let created = E.event(1, "young", kind: .created, createdAt: start)
        let updated = E.event(2, "young", createdAt: start)
        #expect(subscriber.deliver(RoundEvents([created]), clock: clock) == .nothing)
        clock.advance(by: 1000)
        #expect(subscriber.deliver(RoundEvents([updated]), clock: clock) == .nothing)
        #expect(subscriber.nextRelease == start + 5000)
        #expect(subscriber.releaseHeld(now: start + 4999) == .nothing)
        #expect(subscriber.releaseHeld(now: start + 5000) == .written)
        #expect(sink.writtenTexts.last == E.releaseFrame(updated, handedThrough: 2, at: start + 5000),
                "its latest state; the id: the changes handed (not its own, older than those sent) and the release time")
        #expect(subscriber.nextRelease == nil)
        clock.advance(by: 4000)
        #expect(subscriber.deliver(RoundEvents([E.event(3, "young", createdAt: start)]), clock: clock) == .written)
        #expect(sink.writtenTexts.last == E.frame(E.event(3, "young", createdAt: start)))
    }

    @Test func theCatchUpHandsOverTheTasksItHeldBack() {
        let sink = FakeEventSink()
        let filter = StreamFilter(minDurationMilliseconds: 5000)
        let subscriber = subscriber(sink, filter: filter)
        let start = clock.now()
        var holdBack = HoldBack(filter: filter)
        let held = E.event(1, "young", kind: .created, createdAt: start)
        #expect(holdBack.offer(held, now: start) == .hold)
        subscriber.caughtUp(CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 1, holdBack: holdBack),
                            coalescingBacklog: 1024, clock: clock)
        #expect(subscriber.nextRelease == start + 5000)
        #expect(subscriber.releaseHeld(now: start + 5000) == .written)
        #expect(sink.writtenTexts == [catchUpFrame, E.releaseFrame(held, handedThrough: 1, at: start + 5000)])
    }

    /// A release of several tasks: only the last frame carries the release id (a client
    /// cut off before it resumes from an earlier id, and is sent them again).
    @Test func onlyTheLastFrameOfAReleaseCarriesItsID() {
        let sink = FakeEventSink()
        let subscriber = live(sink, filter: StreamFilter(minDurationMilliseconds: 5000), highWater: 3)
        let start = clock.now()
        let first = E.event(4, "first", kind: .created, createdAt: start)
        let second = E.event(5, "second", kind: .created, createdAt: start + 10)
        #expect(subscriber.deliver(RoundEvents([first, second, E.event(9, "other", createdAt: start - 60_000)]),
                                   clock: clock) == .written)
        #expect(subscriber.releaseHeld(now: start + 6000) == .written)
        #expect(sink.writtenTexts.last == E.frame(first, withID: false) + E.releaseFrame(second, handedThrough: 9, at: start + 6000))
    }

    /// One encode per event per round, shared: every subscriber writes the same bytes.
    @Test func subscribersShareOneEncodedFramePerEvent() {
        let sinks = [FakeEventSink(), FakeEventSink(), FakeEventSink()]
        let subscribers = sinks.map { live($0) }
        let round = RoundEvents([E.event(1, "a"), E.event(2, "b")])
        for subscriber in subscribers { #expect(subscriber.deliver(round, clock: clock) == .written) }
        let buffers = sinks.map { sink in sink.writes[1].map { $0.withUnsafeBufferPointer { $0.baseAddress } } }
        #expect(buffers[0].count == 2)
        #expect(buffers.allSatisfy { $0 == buffers[0] }, "the same storage, not copies")
    }

    /// A change of `task` whose frame is about 2,000 bytes (half the cap).
    private func large(_ seq: Int64, _ task: String) -> TaskEvent {
        TaskEvent(changeNumber: seq, kind: .updated, taskID: task, parentID: nil, createdAt: 0, finishedAt: nil,
                  data: #"{"id":"\#(task)","metadata":"\#(String(repeating: "m", count: 2000))"}"#)
    }

    /// A subscriber with a 10,000-byte catch-up (over twice the cap) its peer has not read.
    private func sendingCatchUp(_ sink: FakeEventSink, hold: CatchUpHold? = nil) -> Subscriber {
        let subscriber = subscriber(sink)
        sink.fill(0)
        let catchUp = CatchUp(frames: [Array(repeating: UInt8(ascii: "x"), count: 10_000)], highWater: 0,
                              holdBack: HoldBack(filter: StreamFilter()))
        #expect(subscriber.caughtUp(catchUp, holding: hold, coalescingBacklog: 1024, clock: clock) == .nothing)
        #expect(subscriber.isSendingCatchUp)
        return subscriber
    }

    /// While its catch-up is being sent, a subscriber's live frames wait bounded by count,
    /// not by bytes: a slow reader finishes a catch-up however many bytes of news arrive,
    /// up to `maximumPendingTasks` tasks; one task more and it is cut off.
    @Test func aSubscriberSendingItsCatchUpIsCutOffOnlyPastTheBoundInTasks() {
        let sink = FakeEventSink()
        let subscriber = sendingCatchUp(sink)
        let round = RoundEvents((1...3).map { large(Int64($0), "t\($0)") })
        #expect(subscriber.deliver(round, clock: clock) == .waiting, "three tasks, ~6,000 bytes: past the cap, within the bound")
        #expect(!sink.wasAborted)
        #expect(subscriber.deliver(RoundEvents([large(4, "t4")]), clock: clock) == .cutOff(.pendingTasks(4)))
        #expect(sink.wasAborted)
    }

    /// Once the catch-up has gone out, the frames that waited behind it all go out and
    /// the byte cap applies again.
    @Test func afterItsCatchUpHasGoneOutTheByteCapAppliesAgain() {
        let sink = FakeEventSink()
        let subscriber = sendingCatchUp(sink)
        #expect(subscriber.deliver(RoundEvents([large(1, "a"), large(2, "b")]), clock: clock) == .waiting)
        sink.peerRead()
        subscriber.drained()
        #expect(!subscriber.isSendingCatchUp)
        #expect(sink.writtenTexts.dropFirst() == [E.frame(large(1, "a")), E.frame(large(2, "b"))])
        sink.fill(1000)
        #expect(subscriber.deliver(RoundEvents([large(3, "c")]), clock: clock) == .waiting)
        #expect(subscriber.deliver(RoundEvents([large(4, "d")]), clock: clock) == .cutOff(.bytes(1000 + 2 * E.frame(large(3, "c")).utf8.count)))
    }

    /// A stream that drains writes every waiting frame while it stays below its full mark,
    /// not only one full mark's worth (a socket that takes them all at once calls back no
    /// more).
    @Test func drainingWritesEveryWaitingFrameWhileTheStreamTakesThem() {
        let sink = FakeEventSink()
        let subscriber = Subscriber(id: SubscriberID(rawValue: 1), sink: sink, filter: StreamFilter(),
                                    limits: Subscriber.Limits(unsentBytes: 4000, maximumPendingTasks: 100))
        subscriber.caughtUp(CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 0, holdBack: HoldBack(filter: StreamFilter())),
                            coalescingBacklog: 1024, clock: clock)
        sink.fill(1000)
        let events = (1...30).map { E.event(Int64($0), "t\($0)") }
        #expect(subscriber.deliver(RoundEvents(events), clock: clock) == .waiting)
        sink.peerRead()
        subscriber.drained()
        #expect(subscriber.pendingTaskCount == 0)
        #expect(sink.writtenTexts.dropFirst().joined() == events.map { E.frame($0) }.joined())
    }

    /// The catch-up's charge on the budget is held while the stream holds the catch-up,
    /// and let go once it has been sent.
    @Test func theCatchUpsChargeIsLetGoOnceItsStreamHasSentIt() {
        let budget = CatchUpBudget(limitBytes: 10_000)
        let sink = FakeEventSink()
        let subscriber = sendingCatchUp(sink, hold: budget.holding(CatchUpCharge(bytes: 10_000)))
        #expect(budget.usedBytes == 10_000)
        subscriber.drained()
        #expect(budget.usedBytes == 10_000, "a drain before the catch-up has gone out keeps it")
        sink.peerRead()
        subscriber.drained()
        #expect(budget.usedBytes == 0)
    }

    /// A catch-up the socket takes at once is not held at all.
    @Test func aCatchUpSentAtOnceHoldsNoCharge() {
        let budget = CatchUpBudget(limitBytes: 10_000)
        let sink = FakeEventSink()
        let catchUp = CatchUp(frames: [Array(catchUpFrame.utf8)], highWater: 0, holdBack: HoldBack(filter: StreamFilter()))
        subscriber(sink).caughtUp(catchUp, holding: budget.holding(CatchUpCharge(bytes: 10_000)), coalescingBacklog: 1024,
                                  clock: clock)
        #expect(budget.usedBytes == 0)
    }
}

/// The broker's list of subscribers: each found by its id after any mix of arrivals and
/// departures, every one visited once, and those that never left in the order they came
/// except where a departure moved the last into its place.
@Suite struct SubscriberListTests {
    @Test func findsEachByIDAndVisitsEachOnceThroughArrivalsAndDepartures() {
        var list = SubscriberList()
        var model: [Int] = []  // ids in the list's order, moved as the list moves them
        var random = SystemRandomNumberGenerator()
        var nextID = 0
        for _ in 0..<2000 {
            if model.isEmpty || Int.random(in: 0..<3, using: &random) > 0 {
                nextID += 1
                list.add(Subscriber(id: SubscriberID(rawValue: nextID), sink: FakeEventSink(), filter: StreamFilter(),
                                    limits: Subscriber.Limits(unsentBytes: 4000, maximumPendingTasks: 3)))
                model.append(nextID)
            } else {
                let position = Int.random(in: 0..<model.count, using: &random)
                let id = model[position]
                #expect(list.remove(SubscriberID(rawValue: id))?.id.rawValue == id)
                #expect(list.remove(SubscriberID(rawValue: id)) == nil, "gone once removed")
                let last = model.removeLast()
                if position < model.count { model[position] = last }
            }
        }
        #expect(list.inOrder.map(\.id.rawValue) == model)
        for id in 1...nextID {
            #expect(list[SubscriberID(rawValue: id)]?.id.rawValue == (model.contains(id) ? id : nil))
        }
    }

    /// Departures during a lap keep those it has visited before its position and the
    /// others from it on, whichever leave (random departures, from a fixed seed).
    @Test func departuresDuringALapKeepTheVisitedBeforeItsPosition() {
        var random = SeededGenerator(seed: 5)
        for _ in 0..<300 {
            var list = SubscriberList()
            let count = Int.random(in: 1...12, using: &random)
            for id in 1...count {
                list.add(Subscriber(id: SubscriberID(rawValue: id), sink: FakeEventSink(), filter: StreamFilter(),
                                    limits: Subscriber.Limits(unsentBytes: 4000, maximumPendingTasks: 3)))
            }
            var position = Int.random(in: 0...count, using: &random)
            var visited = Set(list.inOrder[..<position].map(\.id.rawValue))
            var notVisited = Set(list.inOrder[position...].map(\.id.rawValue))
            for id in (1...count).shuffled(using: &random).prefix(Int.random(in: 0...count, using: &random)) {
                let removed = list.remove(SubscriberID(rawValue: id), visitedBefore: &position)
                #expect(removed?.id.rawValue == id)
                visited.remove(id)
                notVisited.remove(id)
                #expect(Set(list.inOrder[..<position].map(\.id.rawValue)) == visited)
                #expect(Set(list.inOrder[position...].map(\.id.rawValue)) == notVisited)
                #expect(list.inOrder.allSatisfy { list[$0.id] === $0 }, "each found by its id")
            }
        }
    }
}
