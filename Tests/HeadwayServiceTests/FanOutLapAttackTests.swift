import Dispatch
import Foundation
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import EventStream
@testable import Telemetry

/// A sink whose peer reads everything at once, and which runs `onWrite` on the writing
/// (broker) thread after each accepted write: a test acts in the middle of a lap.
final class ScriptedSink: EventSink, @unchecked Sendable {
    private struct State {
        var texts: [String] = []
        var shared: [Bool] = []
        var isOpen = true
        var closeHandlers: [@Sendable () -> Void] = []
        var onWrite: (@Sendable () -> Void)?
    }
    private let state = Locked(State())

    var texts: [String] { state.withLock { $0.texts } }
    var sharedFlags: [Bool] { state.withLock { $0.shared } }
    func setOnWrite(_ hook: (@Sendable () -> Void)?) { state.withLock { $0.onWrite = hook } }

    func close() {
        let handlers = state.withLock { state in
            state.isOpen = false
            defer { state.closeHandlers = [] }
            return state.closeHandlers
        }
        handlers.forEach { $0() }
    }

    func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int) -> Bool { append(pieces, shared: false) }
    func writeShared(contentsOf pieces: [[UInt8]]) -> Bool { append(pieces, shared: true) }

    private func append(_ pieces: [[UInt8]], shared: Bool) -> Bool {
        let hook = state.withLock { state -> (@Sendable () -> Void)?? in
            guard state.isOpen else { return nil }
            state.texts.append(String(decoding: pieces.joined(), as: UTF8.self))
            state.shared.append(shared)
            return .some(state.onWrite)
        }
        guard let hook else { return false }
        if !shared { hook?() }
        return true
    }

    var bufferedBytes: Int { 0 }
    var ownedBytes: Int { 0 }
    var sharedBytes: Int { 0 }
    var hasStalled: Bool { false }
    var isOpen: Bool { state.withLock { $0.isOpen } }
    func abort() { close() }
    func finish() { state.withLock { $0.isOpen = false } }
    func onClose(_ handler: @escaping @Sendable () -> Void) { state.withLock { $0.closeHandlers.append(handler) } }
    func onDrain(atOrBelow lowWaterBytes: Int, _ handler: @escaping @Sendable () -> Void) {}
}

/// A clock that stands still and counts how often it is read.
final class CountingClock: WallClock {
    let time: EpochMilliseconds
    private let reads = Locked(0)
    init(_ time: EpochMilliseconds) { self.time = time }
    var readCount: Int { reads.withLock { $0 } }
    func now() -> EpochMilliseconds {
        reads.withLock { $0 += 1 }
        return time
    }
}

/// The ids of the event frames in `text`, in order.
func frameIDs(_ text: String) -> [Int64] {
    text.split(separator: "\n").compactMap { line in line.hasPrefix("id: ") ? Int64(line.dropFirst(4)) : nil }
}

@Suite struct FanOutLapAttackTests {
    typealias E = TestEvents

    final class Running: Sendable { let group = Locked<ServiceGroup?>(nil) }
    let running = Running()

    private func broker(clock: any WallClock, _ adjust: (inout EventBroker.Settings) -> Void = { _ in }) -> EventBroker {
        var settings = EventBroker.Settings()
        adjust(&settings)
        let broker = EventBroker(settings: settings, clock: clock, logger: Logger(minimumLevel: .error, sink: { _ in }))
        let group = ServiceGroup([ServiceGroup.Member("test-events", broker)])
        #expect(throws: Never.self) { try group.start() }
        running.group.withLock { $0 = group }
        return broker
    }

    private func stop() { running.group.withLock { $0 }?.stop() }

    // MARK: - Model-based: arrivals, departures, late catch-ups and publishes in the middle of laps

    /// One subscriber of the fuzz, as the script knows it.
    final class Sub: @unchecked Sendable {
        let sink = ScriptedSink()
        var id: SubscriberID?
        let filter: StreamFilter
        /// The catch-up's high water, once handed over.
        var highWater: Int64?
        var closed = false
        let mayClose: Bool
        init(filter: StreamFilter, mayClose: Bool) { self.filter = filter; self.mayClose = mayClose }
    }

    /// What the script does, under one lock: numbers and publishes events (so the
    /// broker's inbox has them in number order), attaches, hands catch-ups late, closes.
    final class Script: @unchecked Sendable {
        struct State {
            var random: SeededGenerator
            var published: [TaskEvent] = []
            var subs: [Sub] = []
            var waitingCatchUp: [Sub] = []
            var actionsLeft: Int
        }
        let state: Locked<State>
        let broker: EventBroker
        static let tasks: [(String, String?)] = [("a", nil), ("b", "p"), ("c", "p"), ("d", nil)]
        static let filters: [StreamFilter] = [StreamFilter(), StreamFilter(taskIDs: ["a"]), StreamFilter(parentIDs: ["p"]),
                                              StreamFilter(taskIDs: ["d", "b"])]

        init(seed: UInt64, broker: EventBroker, actions: Int) {
            state = Locked(State(random: SeededGenerator(seed: seed), actionsLeft: actions))
            self.broker = broker
        }

        var last: Int64 { state.withLock { $0.published.last?.changeNumber ?? 0 } }

        func publish(_ count: Int, _ state: inout State) {
            var events: [TaskEvent] = []
            for _ in 0..<count {
                let (task, parent) = Self.tasks.randomElement(using: &state.random)!
                let seq = (state.published.last?.changeNumber ?? 0) + 1
                let event = E.event(seq, task, parent: parent)
                state.published.append(event)
                events.append(event)
            }
            broker.publish(events)
        }

        func attach(_ state: inout State, late: Bool) {
            let filter = Self.filters.randomElement(using: &state.random)!
            let sub = Sub(filter: filter, mayClose: Bool.random(using: &state.random))
            guard broker.reserveSlot() else { return }
            sub.sink.setOnWrite { [self] in act() }
            sub.id = broker.attach(sub.sink, filter: filter)
            state.subs.append(sub)
            if late { state.waitingCatchUp.append(sub) } else { catchUp(sub, &state) }
        }

        /// Hands the catch-up read now: it reflects every change published so far.
        func catchUp(_ sub: Sub, _ state: inout State) {
            let highWater = state.published.last?.changeNumber ?? 0
            sub.highWater = highWater
            broker.caughtUp(sub.id!, CatchUp(frames: [Array("retry: 3000\n\n".utf8)], highWater: highWater,
                                             holdBack: HoldBack(filter: sub.filter)))
        }

        /// One random action, on the broker's thread in the middle of a lap.
        func act() {
            state.withLock { state in
                guard state.actionsLeft > 0 else { return }
                state.actionsLeft -= 1
                switch Int.random(in: 0..<10, using: &state.random) {
                case 0...3: publish(Int.random(in: 1...3, using: &state.random), &state)
                case 4: attach(&state, late: false)
                case 5: attach(&state, late: true)
                case 6:
                    if !state.waitingCatchUp.isEmpty {
                        let sub = state.waitingCatchUp.remove(at: Int.random(in: 0..<state.waitingCatchUp.count, using: &state.random))
                        catchUp(sub, &state)
                    }
                case 7:
                    let open = state.subs.filter { $0.mayClose && !$0.closed }
                    if let sub = open.randomElement(using: &state.random) {
                        sub.closed = true
                        sub.sink.close()
                    }
                default: break
                }
            }
        }
    }

    /// Whatever arrives, leaves, catches up late or is published between two subscribers
    /// of a lap, every subscriber receives exactly the events after its catch-up that its
    /// filter takes, each once, in order (those that left: a beginning of them).
    @Test(arguments: 1...8) func everySubscriberGetsEveryMatchingEventOnceInOrder(seed: Int) {
        let broker = broker(clock: ManualClock()) {
            // No coalescing and no pause: every event is due to every subscriber; on even
            // seeds at most 3 events join a lap (the cap), the rest wait for the next.
            $0.pacing = FanOutPacing(threshold: .max / 4, minimumWaiting: seed.isMultiple(of: 2) ? 4 : .max, factor: 1)
            $0.coalescingBacklog = .max
        }
        let script = Script(seed: UInt64(seed), broker: broker, actions: 600)
        let witness = Sub(filter: StreamFilter(), mayClose: false)
        script.state.withLock { state in
            for _ in 0..<6 { script.attach(&state, late: false) }
            #expect(broker.reserveSlot())
            witness.id = broker.attach(witness.sink, filter: witness.filter)
            script.catchUp(witness, &state)
            state.subs.append(witness)
        }
        // The test thread publishes too, until the actions are used up (bounded).
        for _ in 0..<2000 {
            if script.state.withLock({ $0.actionsLeft }) == 0 { break }
            script.state.withLock { state in script.publish(1, &state) }
            Thread.sleep(forTimeInterval: 0.0005)
        }
        // No more actions; a last event, once the witness has it, shows every command
        // before it handled.
        let last = script.state.withLock { state in
            state.actionsLeft = 0
            script.publish(1, &state)
            return state.published.last!.changeNumber
        }
        var tries = 0
        while tries < 20_000 && !witness.sink.texts.contains(where: { frameIDs($0).contains(last) }) {
            tries += 1
            Thread.sleep(forTimeInterval: 0.001)
        }
        stop()
        let (published, subs) = script.state.withLock { ($0.published, $0.subs) }
        var checked = 0
        for sub in subs {
            guard let highWater = sub.highWater else { continue }
            let texts = sub.sink.texts
            guard let catchUpIndex = sub.sink.sharedFlags.firstIndex(of: true) else {
                if sub.closed { continue }  // gone before its catch-up was handed: dropped
                Issue.record("seed \(seed): a subscriber handed its catch-up has none written")
                continue
            }
            let received = texts[(catchUpIndex + 1)...].flatMap(frameIDs)
            let expected = published.filter { $0.changeNumber > highWater && sub.filter.matches(taskID: $0.taskID, parentID: $0.parentID) }
                .map(\.changeNumber)
            if sub.closed {
                #expect(Array(expected.prefix(received.count)) == received, "seed \(seed): a subscriber that left")
            } else {
                #expect(received == expected, "seed \(seed): filter \(sub.filter), high water \(highWater)")
                checked += 1
            }
        }
        #expect(checked >= 2)
    }

    // MARK: - Cost of stopping mid-lap

    /// A lap stops after each subscriber when commands wait (here each write sends one,
    /// as publishes and drains do under load). Between two subscribers the broker only
    /// needs to handle the commands; `releaseHeldTasks` looks at every subscriber holding
    /// young tasks (dashboards: `min_duration=2` by default), so running it at every stop
    /// makes a lap cost subscribers × holding subscribers. The clock is read once per
    /// holding subscriber visited (its hold-back) and once per `releaseHeldTasks`.
    @Test func aLapStoppedAfterEverySubscriberDoesNotLookAtEveryHeldTaskEachTime() {
        let start: EpochMilliseconds = 1_800_000_000_000
        let clock = CountingClock(start)
        let broker = broker(clock: clock)
        let count = 200
        let holding = StreamFilter(minDurationMilliseconds: 10_000)
        var sinks: [ScriptedSink] = []
        for _ in 0..<count {
            let sink = ScriptedSink()
            #expect(broker.reserveSlot())
            let id = broker.attach(sink, filter: holding)
            broker.caughtUp(id, CatchUp(frames: [Array("retry: 3000\n\n".utf8)], highWater: 0, holdBack: HoldBack(filter: holding)))
            sinks.append(sink)
        }
        let witness = FakeEventSink()
        #expect(broker.reserveSlot())
        let witnessID = broker.attach(witness, filter: StreamFilter())
        broker.caughtUp(witnessID, CatchUp(frames: [Array("retry: 3000\n\n".utf8)], highWater: 0, holdBack: HoldBack(filter: StreamFilter())))
        #expect(witness.waitForWrites(1))
        // Every holding subscriber holds a young task.
        broker.publish([E.event(1, "young", kind: .created, createdAt: start)])
        #expect(witness.waitForWrites(1))
        // Now each write sends a command, so the next lap stops after every subscriber.
        for sink in sinks { sink.setOnWrite { [broker] in broker.wake() } }
        let readsBefore = clock.readCount
        broker.publish([E.event(2, "old", createdAt: start - 60_000)])
        #expect(witness.waitForWrites(1))
        let reads = clock.readCount - readsBefore
        stop()
        #expect(reads <= count + 10, "releaseHeldTasks ran \(reads - count) times in one lap, each over \(count) subscribers")
    }

    // MARK: - Coalescing and new_roots (on main too)

    /// A new top-level task created and then updated while the broker is behind: the round
    /// is coalesced to the task's latest event, a `task.updated`, which a `new_roots`
    /// stream (a dashboard following only what it shows) does not take: it never hears
    /// of the new root.
    @Test func aNewRootCreatedAndUpdatedInOneCoalescedRoundReachesANewRootsStream() {
        var queue = FanOutQueue(coalescingBacklog: 1, pacing: FanOutPacing())
        queue.append([E.event(1, "root", kind: .created), E.event(2, "root")])
        let events = queue.takeRound(now: 0, stopping: false) ?? []
        let sink = FakeEventSink()
        let filter = StreamFilter(newRoots: true)
        let subscriber = Subscriber(id: SubscriberID(rawValue: 1), sink: sink, filter: filter,
                                    limits: Subscriber.Limits(unsentBytes: 1 << 20, maximumPendingTasks: 100))
        let clock = ManualClock()
        subscriber.caughtUp(CatchUp(frames: [Array("retry: 3000\n\n".utf8)], highWater: 0, holdBack: HoldBack(filter: filter)),
                            coalescingBacklog: 1024, clock: clock)
        subscriber.deliver(RoundEvents(events), clock: clock)
        #expect(sink.writtenTexts.dropFirst().joined().contains("id: "), "the new root is never heard of: \(events.map(\.kind))")
    }
}
