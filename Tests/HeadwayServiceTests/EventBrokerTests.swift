import HeadwayCore
import Lifecycle
import Testing
@testable import EventStream
@testable import Telemetry

/// The broker's thread with fake sinks: the loop moves commands and calls the parts; no
/// sockets, a manual clock for `min_duration`, and waits only for writes to arrive.
@Suite struct EventBrokerTests {
    typealias E = TestEvents
    let clock = ManualClock()
    let logLines = LogLines()

    /// Log lines written, for checking what the broker reports.
    final class LogLines: Sendable {
        let lines = Locked<[String]>([])
        var all: [String] { lines.withLock { $0 } }
    }

    /// The broker's service group, to stop it as the daemon does.
    final class Running: Sendable {
        let group = Locked<ServiceGroup?>(nil)
    }
    let running = Running()

    /// A running broker.
    private func broker(_ adjust: (inout EventBroker.Settings) -> Void = { _ in }) -> EventBroker {
        var settings = EventBroker.Settings()
        adjust(&settings)
        let lines = logLines
        let broker = EventBroker(settings: settings, clock: clock,
                                 logger: Logger(minimumLevel: .info, sink: { line in lines.lines.withLock { $0.append(line) } }))
        let group = ServiceGroup([ServiceGroup.Member("test-events", broker)])
        #expect(throws: Never.self) { try group.start() }
        running.group.withLock { $0 = group }
        return broker
    }

    /// Stops the broker: a last round, then every stream ends.
    private func stop(_ broker: EventBroker) { running.group.withLock { $0 }?.stop() }

    /// A subscriber taking a place, attached, with a catch-up of one `retry:` frame at
    /// `highWater` already written.
    private func subscribe(_ broker: EventBroker, filter: StreamFilter = StreamFilter(),
                           highWater: Int64 = 0) -> (FakeEventSink, SubscriberID) {
        let sink = FakeEventSink()
        #expect(broker.reserveSlot())
        let id = broker.attach(sink, filter: filter)
        broker.caughtUp(id, CatchUp(frames: [Array("retry: 3000\n\n".utf8)], highWater: highWater,
                                    holdBack: HoldBack(filter: filter)))
        #expect(sink.waitForWrites(1))
        return (sink, id)
    }

    @Test func everySubscriberGetsEachRoundInOneWrite() {
        let broker = broker()
        let subscribers = (0..<3).map { _ in subscribe(broker).0 }
        broker.publish([E.event(1, "a"), E.event(2, "b")])
        for sink in subscribers {
            #expect(sink.waitForWrites(1))
            #expect(sink.writtenTexts.last == E.frame(E.event(1, "a")) + E.frame(E.event(2, "b")))
        }
        stop(broker)
        #expect(subscribers.allSatisfy { $0.wasFinished }, "stopping ends every stream")
    }

    /// An event published while a lap is under way does not wait for the lap to end: the
    /// next subscriber visited gets it at once, in one write with the event it was still
    /// due, and the subscriber the lap had passed gets it in the next lap. The first
    /// subscriber's write is held (the broker's thread waits in it) until the second event
    /// has been published.
    @Test func anEventPublishedDuringALapJoinsItAndLateSubscribersGetBothInOneWrite() {
        let broker = broker()
        let sinks = (0..<3).map { _ in subscribe(broker).0 }
        sinks[0].holdNextWrite()
        broker.publish([E.event(1, "a")])
        #expect(sinks[0].waitForHeldWrite())
        broker.publish([E.event(2, "b")])
        sinks[0].letHeldWriteGo()
        for sink in sinks { #expect(sink.waitForWrites(sink === sinks[0] ? 2 : 1)) }
        stop(broker)
        let both = E.frame(E.event(1, "a")) + E.frame(E.event(2, "b"))
        #expect(sinks[0].writtenTexts.dropFirst() == [E.frame(E.event(1, "a")), E.frame(E.event(2, "b"))])
        #expect(sinks[1].writtenTexts.dropFirst() == [both], "reached after the second event: both, in one write")
        #expect(sinks[2].writtenTexts.dropFirst() == [both])
    }

    /// A subscriber leaving during a lap moves another into its place: the lap still
    /// reaches every subscriber left, each once, with every event in order.
    @Test func subscribersLeavingDuringALapDoNotMakeTheLapSkipOrRepeatAnyone() {
        let broker = broker()
        let subscribed = (0..<6).map { _ in subscribe(broker) }
        let sinks = subscribed.map(\.0)
        sinks[1].holdNextWrite()
        broker.publish([E.event(1, "a")])
        #expect(sinks[1].waitForHeldWrite())
        // One visited (0), the one being visited (1) and one not yet (3) leave; the last
        // (5), not yet visited, fills their places.
        sinks[0].close()
        sinks[3].close()
        broker.publish([E.event(2, "b")])
        sinks[1].close()
        sinks[1].letHeldWriteGo()
        for index in [2, 4, 5] { #expect(sinks[index].waitForWrites(1)) }
        stop(broker)
        let both = E.frame(E.event(1, "a")) + E.frame(E.event(2, "b"))
        for index in [2, 4, 5] {
            #expect(sinks[index].writtenTexts.dropFirst() == [both], "subscriber \(index)")
        }
        #expect(broker.subscriberCount == 3, "the three that left gave their places back")
    }

    /// Pacing with a pause a billion times as long as the round before it: events published
    /// after the first round wait for it, and the last round (when the broker stops) carries
    /// them coalesced, whatever the speed of the machine. A second subscriber's catch-up
    /// marks when the broker has seen them waiting (commands are handled in order, and a
    /// round is decided after the commands of its turn).
    @Test func eventsThatWaitForAPauseReachSubscribersCoalesced() {
        let broker = broker { $0.pacing = FanOutPacing(threshold: 0, minimumWaiting: 1, factor: 1_000_000_000) }
        let (sink, _) = subscribe(broker)
        broker.publish([E.event(1, "storm")])
        #expect(sink.waitForWrites(1))
        for seq in 2...100 { broker.publish([E.event(Int64(seq), "storm")]) }
        broker.publish([E.event(101, "calm")])
        let (marker, _) = subscribe(broker, highWater: 101)
        stop(broker)
        #expect(sink.writtenTexts.dropFirst() == [
            E.frame(E.event(1, "storm")),
            E.frame(E.event(100, "storm")) + E.frame(E.event(101, "calm")),
        ])
        #expect(marker.writes.count == 1, "its catch-up reflects every change")
    }

    /// Top-level tasks created and then ended, stalled or deleted while the broker is
    /// behind (one round, coalesced): a `new_roots` stream, which takes a root's creation
    /// alone, still hears of those that exist, as `task.created` in their latest state (a
    /// short one under `min_duration` is never shown, as without coalescing); a stream of
    /// every task, one naming a root and one following a parent get each task's latest
    /// event as before, and nothing twice.
    @Test func rootsCreatedAndEndedInACoalescedRoundReachNewRootsStreams() {
        let broker = broker {
            $0.coalescingBacklog = 1
            $0.heartbeatSeconds = 3600
        }
        let (roots, _) = subscribe(broker, filter: StreamFilter(newRoots: true))
        let (heldRoots, _) = subscribe(broker, filter: StreamFilter(newRoots: true, minDurationMilliseconds: 2000))
        let (whole, _) = subscribe(broker)
        let (named, _) = subscribe(broker, filter: StreamFilter(taskIDs: ["long"], newRoots: true))
        let (children, _) = subscribe(broker, filter: StreamFilter(parentIDs: ["p"], newRoots: true))
        // Every task created now; `ended` finishes one `ms` later.
        let start = clock.now()
        func created(_ seq: Int64, _ task: String, parent: String? = nil) -> TaskEvent {
            E.event(seq, task, parent: parent, kind: .created, createdAt: start)
        }
        func ended(_ seq: Int64, _ task: String, _ kind: TaskEventKind, parent: String? = nil, after ms: Int64) -> TaskEvent {
            var event = E.event(seq, task, parent: parent, kind: kind, createdAt: start)
            event.finishedAt = kind == .finished ? start + ms : nil
            return event
        }
        let longFinish = ended(2, "long", .finished, after: 5000)
        let quickFinish = ended(4, "quick", .finished, after: 10)
        let hungStall = ended(6, "hung", .stalled, after: 0)
        let gone = ended(8, "gone", .deleted, after: 0)
        let childFinish = ended(10, "child", .finished, parent: "p", after: 5000)
        broker.publish([created(1, "long"), longFinish, created(3, "quick"), quickFinish, created(5, "hung"), hungStall,
                        created(7, "gone"), gone, created(9, "child", parent: "p"), childFinish])
        for sink in [roots, whole, named, children] { #expect(sink.waitForWrites(1)) }
        stop(broker)
        // A creation as coalescing reports it: the task's latest state and change number.
        func creation(_ event: TaskEvent) -> String {
            var creation = event
            creation.kind = .created
            return E.frame(creation)
        }
        #expect(roots.writtenTexts.dropFirst() == [creation(longFinish) + creation(quickFinish) + creation(hungStall)])
        #expect(heldRoots.writtenTexts.dropFirst() == [creation(longFinish)],
                "the quick one finished sooner than min_duration; the stalled one is young: held")
        let latest = [longFinish, quickFinish, hungStall, gone, childFinish]
        #expect(whole.writtenTexts.dropFirst() == [latest.map { E.frame($0) }.joined()])
        #expect(named.writtenTexts.dropFirst() == [E.frame(longFinish) + creation(quickFinish) + creation(hungStall)])
        #expect(children.writtenTexts.dropFirst() == [creation(longFinish) + creation(quickFinish) + creation(hungStall)
                                                        + E.frame(childFinish)])
    }

    @Test func aSubscribersPlaceIsGivenBackWhenItsStreamCloses() {
        let broker = broker { $0.maximumSubscribers = 2 }
        let (first, firstID) = subscribe(broker)
        _ = subscribe(broker)
        #expect(!broker.reserveSlot(), "both places taken")
        first.close()
        broker.caughtUp(firstID, CatchUp(frames: [Array("late\n\n".utf8)], highWater: 0, holdBack: HoldBack(filter: StreamFilter())))
        stop(broker)
        #expect(broker.subscriberCount == 1, "commands sent before the stop are applied before it ends")
        #expect(first.writes.count == 1, "a catch-up for a subscriber gone is dropped")
        #expect(!broker.reserveSlot(), "a stopped broker takes nobody")
    }

    @Test func aSlowSubscriberIsCutOffAndTheOthersGoOn() {
        let broker = broker {
            $0.streamBufferBytes = 4000  // full at 1,000
            $0.maximumPendingTasks = 3
        }
        let (slow, _) = subscribe(broker)
        let (fast, _) = subscribe(broker)
        slow.fill(1000)
        broker.publish((1...4).map { E.event(Int64($0), "t\($0)") })
        #expect(fast.waitForWrites(1))
        stop(broker)
        #expect(slow.wasAborted)
        #expect(slow.writes.count == 1, "only its catch-up")
        #expect(fast.writtenTexts.last == (1...4).map { E.frame(E.event(Int64($0), "t\($0)")) }.joined())
        #expect(logLines.all.contains { $0.contains("events.subscriber_too_slow") && $0.contains("reason=pending_tasks")
            && $0.contains("pending_tasks=4") })
    }

    /// Frames that wait for a full stream go out, each task's latest once, when it drains;
    /// a subscriber that reads shows when each round has been handed out.
    @Test func framesThatWaitedGoOutWhenTheStreamDrains() {
        let broker = broker { $0.streamBufferBytes = 4000 }
        let (sink, _) = subscribe(broker)
        let (witness, _) = subscribe(broker)
        sink.fill(1000)
        broker.publish([E.event(1, "a"), E.event(2, "b")])
        #expect(witness.waitForWrites(1))
        broker.publish([E.event(3, "a")])
        #expect(witness.waitForWrites(1))
        sink.peerRead()
        #expect(sink.waitForWrites(1))
        stop(broker)
        #expect(sink.writtenTexts.dropFirst() == [E.frame(E.event(2, "b")) + E.frame(E.event(3, "a"))])
    }

    /// A stream the HTTP layer closed because its peer took nothing for the stall timeout
    /// is reported once, with its reason; its place is given back.
    @Test func aStalledStreamIsReportedOnceWithItsReason() {
        let broker = broker()
        let (stalled, _) = subscribe(broker)
        let (closed, _) = subscribe(broker)
        stalled.stall()
        closed.close()
        stop(broker)
        let reports = logLines.all.filter { $0.contains("events.subscriber_too_slow") }
        #expect(reports.count == 1)
        #expect(reports.first?.contains("reason=stalled") == true)
        #expect(broker.subscriberCount == 0)
    }

    @Test func heldTasksAreReleasedWhenTheyComeOfAge() {
        let broker = broker()
        let (sink, _) = subscribe(broker, filter: StreamFilter(minDurationMilliseconds: 10_000))
        let start = clock.now()
        let young = E.event(1, "young", kind: .created, createdAt: start)
        let old = E.event(2, "old", createdAt: start - 60_000)
        broker.publish([young, old])
        #expect(sink.waitForWrites(1))
        #expect(sink.writtenTexts.last == E.frame(old), "the young task is held back")
        clock.advance(by: 10_000)
        broker.wake()
        #expect(sink.waitForWrites(1))
        #expect(sink.writtenTexts.last == E.releaseFrame(young, handedThrough: 2, at: start + 10_000))
        stop(broker)
    }

    /// A subscriber whose 10,000-byte catch-up, charged to `budget`, its peer does not read.
    private func subscribeUnread(_ broker: EventBroker, _ budget: CatchUpBudget,
                                 charge: CatchUpCharge = CatchUpCharge(bytes: 10_000)) -> FakeEventSink {
        let sink = FakeEventSink()
        sink.fill(0)
        #expect(broker.reserveSlot())
        let id = broker.attach(sink, filter: StreamFilter())
        let catchUp = CatchUp(frames: [Array(repeating: UInt8(ascii: "x"), count: 10_000)], highWater: 0,
                              holdBack: HoldBack(filter: StreamFilter()))
        broker.caughtUp(id, catchUp, holding: budget.holding(charge))
        #expect(sink.waitForWrites(1))
        return sink
    }

    /// A catch-up counts while a stream holds it, and is let go once that stream has sent
    /// it — or has closed. (A marker subscriber's catch-up shows when the
    /// broker has handled the commands before it.)
    @Test func theBudgetIsLetGoOnceAStreamHasSentItsCatchUpOrClosed() {
        let broker = broker()
        let budget = CatchUpBudget(limitBytes: 10_000)
        let reading = subscribeUnread(broker, budget)
        #expect(budget.usedBytes == 10_000)
        reading.peerRead()
        _ = subscribe(broker)
        #expect(budget.usedBytes == 0, "sent: let go")
        let leaving = subscribeUnread(broker, budget)
        #expect(budget.usedBytes == 10_000)
        leaving.close()
        _ = subscribe(broker)
        #expect(budget.usedBytes == 0, "closed: let go")
        stop(broker)
    }

    /// Subscribers sent the same catch-up (from the cache) charge it once; it counts until
    /// the last of them has sent it. One for a subscriber already gone is let go at once.
    @Test func aSharedCatchUpIsChargedOnceAndOneForASubscriberGoneNotAtAll() {
        let broker = broker()
        let budget = CatchUpBudget(limitBytes: 20_000)
        let charge = CatchUpCharge(bytes: 10_000)
        let sinks = (0..<3).map { _ in subscribeUnread(broker, budget, charge: charge) }
        #expect(budget.usedBytes == 10_000)
        sinks[0].peerRead()
        sinks[1].close()
        _ = subscribe(broker)
        #expect(budget.usedBytes == 10_000, "one stream still holds it")
        sinks[2].peerRead()
        let gone = FakeEventSink()
        #expect(broker.reserveSlot())
        let id = broker.attach(gone, filter: StreamFilter())
        gone.close()
        broker.caughtUp(id, CatchUp(frames: [[1]], highWater: 0, holdBack: HoldBack(filter: StreamFilter())),
                        holding: budget.holding(CatchUpCharge(bytes: 5_000), by: .address(2)))
        // The second marker is handled in a later turn of the loop, after the commands of
        // the first's turn have been let go.
        _ = subscribe(broker)
        _ = subscribe(broker)
        #expect(budget.usedBytes == 0)
        stop(broker)
    }
}
