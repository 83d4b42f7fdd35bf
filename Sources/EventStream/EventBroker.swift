import Foundation
import HeadwayCore
import HeadwayStore
import Lifecycle
import Telemetry

/// Fans committed events out to subscribers on its own thread (a service). Publishing only
/// appends to a queue, so ingestion never waits for subscribers; a subscriber that cannot
/// keep up has its waiting events coalesced to the latest per task and, past its bounds, is
/// disconnected (its reconnection resumes exactly from the last id it received).
///
/// The thread only moves commands and calls the parts: `FanOutQueue` decides what a round
/// carries, `Subscriber` what each client is sent, `BrokerSchedule` when to look again.
/// What only the thread uses lives in `run()` itself (`BrokerThread`); other threads reach
/// it through the inbox. The writer publishes to it (`TaskEventSink`) after each commit.
package final class EventBroker: Service, TaskEventSink {
    package struct Settings: Sendable, Equatable {
        package var maximumSubscribers = 50_000
        package var heartbeatSeconds = 15.0
        /// The cap on one stream's unsent bytes (see `Subscriber`): past it the subscriber
        /// is disconnected; from a quarter of it further events wait, coalesced.
        package var streamBufferBytes = 256 * 1024
        /// A subscriber with more tasks than this waiting is disconnected.
        package var maximumPendingTasks = 2048
        /// Past this many events waiting for the broker itself, a task's events are
        /// coalesced to its latest before fan-out (the broker is behind; below it, every
        /// event is delivered).
        package var coalescingBacklog = 1024
        /// When fan-out rounds may start (see `FanOutPacing`).
        package var pacing = FanOutPacing()

        package init() {}

        /// The bounds of each subscriber.
        var subscriberLimits: Subscriber.Limits {
            Subscriber.Limits(unsentBytes: streamBufferBytes, maximumPendingTasks: maximumPendingTasks)
        }
    }

    /// What other threads ask of the broker thread.
    fileprivate enum Command: Sendable {
        case publish([TaskEvent])
        case attach(SubscriberID, any EventSink, StreamFilter, tokenID: String?)
        case closeTokens(Set<String>)
        case caughtUp(SubscriberID, CatchUp, CatchUpHold?)
        case drained(SubscriberID)
        case detach(SubscriberID)
        case wake
    }

    /// What other threads share with the broker thread.
    private struct Inbox {
        var commands: [Command] = []
        var stopping = false
        var paused = false
        /// The broker waits out a pacing pause: new events need not wake it.
        var inPause = false
        var reservedSlots = 0
        /// The last number given to a subscriber.
        var lastSubscriberID = 0
    }

    package let settings: Settings
    private let clock: any WallClock
    private let logger: Logger
    /// Shared by the publishers (the writer's thread, subscribers arriving) and the broker's thread.
    private let inbox = Locked(Inbox())
    private let commandsArrived = Doorbell()
    /// What the broker thread counts for the metrics.
    let counters: EventCounters

    package init(settings: Settings, clock: any WallClock, logger: Logger, counters: EventCounters = EventCounters()) {
        self.counters = counters
        self.settings = settings
        self.clock = clock
        self.logger = logger
    }

    // MARK: - Any thread

    /// Takes one of the `maximumSubscribers` places, or returns false when all are taken.
    package func reserveSlot() -> Bool {
        inbox.withLock { inbox in
            guard inbox.reservedSlots < settings.maximumSubscribers, !inbox.stopping else { return false }
            inbox.reservedSlots += 1
            return true
        }
    }

    /// Subscribers connected (places taken).
    package var subscriberCount: Int { inbox.withLock { $0.reservedSlots } }

    /// Queues committed events, in sequence order. With no subscriber there is nobody to
    /// tell: a subscriber that arrives later reads everything committed before its catch-up
    /// (its place is taken before that read, so nothing after it is dropped).
    package func publish(_ events: [TaskEvent]) {
        guard !events.isEmpty else { return }
        let wake = inbox.withLock { inbox -> Bool in
            guard inbox.reservedSlots > 0 else { return false }
            inbox.commands.append(.publish(events))
            return !inbox.inPause
        }
        if wake { commandsArrived.ring() }
    }

    /// Starts delivering to a subscriber writing to `sink` (events are kept until its
    /// catch-up is handed over with `caughtUp`). Its place, taken with `reserveSlot`, is
    /// given back when the sink closes. `tokenID` names the token the stream was opened
    /// with, whose revocation or expiry closes it (`closeStreams`).
    package func attach(_ sink: any EventSink, filter: StreamFilter, tokenID: String? = nil) -> SubscriberID {
        let id = inbox.withLock { inbox in
            inbox.lastSubscriberID += 1
            return SubscriberID(rawValue: inbox.lastSubscriberID)
        }
        send(.attach(id, sink, filter, tokenID: tokenID))
        sink.onClose { [weak self] in self?.send(.detach(id)) }
        sink.onDrain(atOrBelow: settings.subscriberLimits.lowWaterBytes) { [weak self] in self?.send(.drained(id)) }
        return id
    }

    /// Hands over what the catch-up read, with its charge on the catch-up budget (let go
    /// once the subscriber's stream has sent it, or at once if the subscriber is gone).
    package func caughtUp(_ id: SubscriberID, _ catchUp: CatchUp, holding hold: CatchUpHold? = nil) {
        send(.caughtUp(id, catchUp, hold))
    }

    /// Closes at once every stream opened with one of `tokenIDs` (revoked or expired), and
    /// any such stream attached later.
    package func closeStreams(ofTokens tokenIDs: Set<String>) { send(.closeTokens(tokenIDs)) }

    /// Makes the thread look at the clock now (after a test moved it).
    package func wake() { send(.wake) }

    /// Holds (true) or releases (false) the queue, so a test can make the broker fall
    /// behind on purpose.
    package func setPaused(_ isPaused: Bool) {
        inbox.withLock { $0.paused = isPaused }
        commandsArrived.ring()
    }

    /// Makes `run()` fan out what is queued (through a pacing pause if need be), end every
    /// stream and return.
    package func requestStop() {
        inbox.withLock { $0.stopping = true }
        commandsArrived.ring()
    }

    private func send(_ command: Command) {
        inbox.withLock { $0.commands.append(command) }
        commandsArrived.ring()
    }

    // MARK: - Broker thread

    /// The thread's loop: waits for commands or the next timer, applies the commands,
    /// runs a fan-out round unless a pause holds it, releases held tasks and sends
    /// heartbeats; when stopping, one last round, then every stream is ended.
    package func run() {
        let thread = BrokerThread(settings: settings, clock: clock, logger: logger, counters: counters)
        while true {
            waitForWork(thread)
            let (batch, isStopping) = inbox.withLock { inbox in
                defer { inbox.commands = [] }
                return (inbox.commands, inbox.stopping)
            }
            for command in batch {
                if thread.handle(command) { inbox.withLock { $0.reservedSlots -= 1 } }
            }
            let isPausing = thread.fanOut(stopping: isStopping)
            inbox.withLock { $0.inPause = isPausing }
            thread.releaseHeldTasks()
            thread.sendHeartbeatIfDue()
            if isStopping { break }
        }
        thread.finishAll()
    }

    /// Sleeps until commands arrive (and the queue is not held) or the thread must look at
    /// the clock.
    private func waitForWork(_ thread: BrokerThread) {
        while true {
            let (ready, paused) = inbox.withLock { ($0.stopping || (!$0.commands.isEmpty && !$0.paused), $0.paused) }
            if ready { return }
            if !commandsArrived.wait(until: thread.nextWakeUp()) && !paused { return }
        }
    }
}

/// The broker thread's own state and steps, made and used by `EventBroker.run()` only.
private final class BrokerThread {
    private let settings: EventBroker.Settings
    private let clock: any WallClock
    private let logger: Logger
    private var subscribers = SubscriberList()
    /// The token each stream was opened with, if any.
    private var tokens: [SubscriberID: String] = [:]
    /// Tokens revoked or expired: their streams are closed, even those attached later.
    private var deadTokens: Set<String> = []
    /// The subscribers holding tasks back (`min_duration`): only these need the clock.
    private var holding: [SubscriberID: Subscriber] = [:]
    /// Events waiting for a round, and the pacing of rounds.
    private var queue: FanOutQueue
    /// When the next heartbeat is due.
    private var schedule: BrokerSchedule
    private let counters: EventCounters

    init(settings: EventBroker.Settings, clock: any WallClock, logger: Logger, counters: EventCounters) {
        self.counters = counters
        self.settings = settings
        self.clock = clock
        self.logger = logger
        queue = FanOutQueue(coalescingBacklog: settings.coalescingBacklog, pacing: settings.pacing)
        schedule = BrokerSchedule(heartbeatSeconds: settings.heartbeatSeconds, now: Self.monotonicNow())
    }

    /// Applies one command; true when it gave a subscriber's place back.
    func handle(_ command: EventBroker.Command) -> Bool {
        switch command {
        case .publish(let events):
            queue.append(events)
        case .attach(let id, let sink, let filter, let tokenID):
            subscribers.add(Subscriber(id: id, sink: sink, filter: filter, limits: settings.subscriberLimits))
            if let tokenID {
                tokens[id] = tokenID
                // Its place is given back when the closed sink reports it (`detach`).
                if deadTokens.contains(tokenID) { sink.abort() }
            }
        case .closeTokens(let tokenIDs):
            deadTokens.formUnion(tokenIDs)
            for (id, tokenID) in tokens where tokenIDs.contains(tokenID) { subscribers[id]?.sink.abort() }
        case .caughtUp(let id, let catchUp, let hold):
            guard let subscriber = subscribers[id] else { return false }
            report(subscriber.caughtUp(catchUp, holding: hold, coalescingBacklog: settings.coalescingBacklog,
                                       clock: clock), subscriber)
            noteHolds(subscriber)
        case .drained(let id):
            subscribers[id]?.drained()
        case .detach(let id):
            holding[id] = nil
            tokens[id] = nil
            guard let subscriber = subscribers.remove(id) else { return false }
            if subscriber.sink.hasStalled { report(.cutOff(.stalled), subscriber) }
            return true
        case .wake:
            break
        }
        return false
    }

    /// Runs a round unless a pause holds it; returns whether events wait for a pause.
    func fanOut(stopping: Bool) -> Bool {
        let roundStart = Self.monotonicNow()
        let coalescedBefore = queue.coalescedCount
        if let events = queue.takeRound(now: roundStart, stopping: stopping) {
            counters.sent.add(UInt64(events.count))
            if queue.coalescedCount > coalescedBefore { counters.coalesced.add(UInt64(queue.coalescedCount - coalescedBefore)) }
            let round = RoundEvents(events)
            // Each frame is encoded once, for all subscribers.
            for subscriber in subscribers.inOrder {
                report(subscriber.deliver(round, clock: clock), subscriber)
                if subscriber.holdsBack && subscriber.isLive { noteHolds(subscriber) }
            }
            queue.roundRan(from: roundStart, to: Self.monotonicNow())
        }
        return queue.pauseEnd(now: Self.monotonicNow()) != nil
    }

    func releaseHeldTasks() {
        guard !holding.isEmpty else { return }
        let now = clock.now()
        for subscriber in holding.values {
            let delivery = subscriber.releaseHeld(now: now)
            guard delivery != .nothing else { continue }
            report(delivery, subscriber)
            noteHolds(subscriber)
        }
    }

    func sendHeartbeatIfDue() {
        guard schedule.heartbeatIsDue(now: Self.monotonicNow()) else { return }
        let pieces = [EventFrames.heartbeat]
        for subscriber in subscribers.inOrder { subscriber.heartbeat(pieces) }
    }

    /// Ends every stream (the broker stops).
    func finishAll() {
        for subscriber in subscribers.inOrder { subscriber.finish() }
        subscribers = SubscriberList()
        holding = [:]
    }

    /// The next time the thread must look without being told (see `BrokerSchedule`).
    func nextWakeUp() -> DispatchTime {
        let now = Self.monotonicNow()
        let nextRelease = holding.values.compactMap(\.nextRelease).min()
        let delay = schedule.delay(now: now, pauseEnd: queue.pauseEnd(now: now), wallNow: clock.now(),
                                   nextRelease: nextRelease)
        return .now() + delay
    }

    /// Logs a subscriber cut off for being too slow: one line, with the reason.
    private func report(_ delivery: Delivery, _ subscriber: Subscriber) {
        guard case .cutOff(let why) = delivery else { return }
        counters.cutOff.add([why.reason])
        let event = "events.subscriber_too_slow"
        switch why {
        case .bytes(let bytes): logger.log(.warn, event, ["reason": why.reason, "unsent_bytes": "\(bytes)"])
        case .pendingTasks(let count): logger.log(.warn, event, ["reason": why.reason, "pending_tasks": "\(count)"])
        case .stalled: logger.log(.warn, event, ["reason": why.reason])
        }
    }

    /// Keeps `holding` in step with a subscriber's held tasks.
    private func noteHolds(_ subscriber: Subscriber) {
        holding[subscriber.id] = subscriber.nextRelease == nil ? nil : subscriber
    }

    /// The monotonic clock, in nanoseconds.
    private static func monotonicNow() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}

/// The broker's subscribers: found by id, visited in the order they came, so that a round
/// writes their sockets in that order rather than a hash table's (made one after another,
/// their objects and sockets lie near one another in memory). Removing one moves the last
/// into its place.
struct SubscriberList {
    private var positions: [SubscriberID: Int] = [:]
    /// Every subscriber, mostly in the order they came.
    private(set) var inOrder: [Subscriber] = []

    subscript(id: SubscriberID) -> Subscriber? { positions[id].map { inOrder[$0] } }

    /// Adds `subscriber` at the end, or in the place of the one with its id.
    mutating func add(_ subscriber: Subscriber) {
        if let position = positions[subscriber.id] {
            inOrder[position] = subscriber
        } else {
            positions[subscriber.id] = inOrder.count
            inOrder.append(subscriber)
        }
    }

    /// Removes and returns the subscriber with `id`, if there is one.
    mutating func remove(_ id: SubscriberID) -> Subscriber? {
        guard let position = positions.removeValue(forKey: id) else { return nil }
        let removed = inOrder[position]
        let last = inOrder.removeLast()
        if position < inOrder.count {
            inOrder[position] = last
            positions[last.id] = position
        }
        return removed
    }
}
