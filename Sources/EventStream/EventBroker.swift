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
/// carries, `FanOutLap` which rounds each subscriber is handed as a lap visits it in turn,
/// `Subscriber` what each client is sent, `BrokerSchedule` when to look again. A lap
/// stops to handle commands as soon as they arrive, so a new event joins the lap under
/// way rather than waiting for it to end.
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

    /// The thread's loop: waits for commands or the next timer (not while a lap is under
    /// way), applies the commands, goes on with the fan-out unless a pause holds it (until
    /// the lap ends or commands arrive), releases held tasks and sends heartbeats; when
    /// stopping, every event waiting goes out, then every stream is ended.
    package func run() {
        let thread = BrokerThread(settings: settings, clock: clock, logger: logger, counters: counters)
        let commandsWait = { [inbox] in inbox.withLock { $0.stopping || (!$0.commands.isEmpty && !$0.paused) } }
        while true {
            waitForWork(thread)
            let (batch, isStopping) = inbox.withLock { inbox in
                defer { inbox.commands = [] }
                return (inbox.commands, inbox.stopping)
            }
            for command in batch {
                if thread.handle(command) { inbox.withLock { $0.reservedSlots -= 1 } }
            }
            let isPausing = thread.fanOut(stopping: isStopping, until: commandsWait)
            inbox.withLock { $0.inPause = isPausing }
            // A lap under way releases held tasks as it ends (`fanOut`): under load it stops
            // after nearly every subscriber, and a pass over every holding subscriber at each
            // stop would make a lap cost subscribers × holding subscribers.
            if !thread.isLapUnderWay { thread.releaseHeldTasks() }
            thread.sendHeartbeatIfDue()
            if isStopping { break }
        }
        thread.finishAll()
    }

    /// Sleeps until commands arrive (and the queue is not held) or the thread must look at
    /// the clock; returns at once while a lap is under way (and the queue is not held).
    private func waitForWork(_ thread: BrokerThread) {
        let lapUnderWay = thread.isLapUnderWay
        while true {
            let (ready, paused) = inbox.withLock {
                ($0.stopping || ((!$0.commands.isEmpty || lapUnderWay) && !$0.paused), $0.paused)
            }
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
    /// Events waiting for a round, and the pacing of laps.
    private var queue: FanOutQueue
    /// The rounds on their way, and the lap under way.
    private var lap = FanOutLap()
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
            let subscriber = Subscriber(id: id, sink: sink, filter: filter, limits: settings.subscriberLimits)
            // Rounds taken before are older than its catch-up (events kept in the queue
            // still reach it: published before, they are older, and `CatchUpMerge` drops them).
            subscriber.nextRound = lap.nextRound
            subscribers.add(subscriber)
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
            guard let subscriber = subscribers.remove(id, visitedBefore: &lap.position) else { return false }
            if subscriber.sink.hasStalled { report(.cutOff(.stalled), subscriber) }
            return true
        case .wake:
            break
        }
        return false
    }

    /// Whether a lap is under way (the thread goes on with it without waiting).
    var isLapUnderWay: Bool { lap.isUnderWay }

    /// Goes on with the fan-out until `commandsWait` (asked after each subscriber) or
    /// nothing is left to hand out: begins a lap unless a pause holds it, adds what is
    /// waiting to the lap under way (`FanOutQueue.takeJoining`), visits subscribers in turn
    /// and ends laps. A stopping broker runs laps through any pause until every event has
    /// gone out. Returns whether events wait for a pause.
    func fanOut(stopping: Bool, until commandsWait: () -> Bool) -> Bool {
        while true {
            let now = Self.monotonicNow()
            if lap.isUnderWay {
                if let events = queue.takeJoining() { lap.join(round(events)) }
            } else {
                let coalescedBefore = queue.coalescedCount
                let events = queue.takeRound(now: now, stopping: stopping)
                if queue.coalescedCount > coalescedBefore {
                    counters.coalesced.add(UInt64(queue.coalescedCount - coalescedBefore))
                }
                let pauseEnd = queue.pauseEnd(now: now)
                guard events != nil || (!lap.rounds.isEmpty && (stopping || pauseEnd == nil)) else {
                    return pauseEnd != nil
                }
                lap.begin(with: events.map(round), at: now)
            }
            while lap.position < subscribers.inOrder.count {
                let subscriber = subscribers.inOrder[lap.position]
                lap.position += 1
                visit(subscriber)
                if !stopping && lap.position < subscribers.inOrder.count && commandsWait() { return false }
            }
            let end = Self.monotonicNow()
            queue.roundRan(from: lap.start, to: end)
            counters.laps.add(1)
            counters.lapNanoseconds.add(end - lap.start)
            lap.end()
            releaseHeldTasks()
        }
    }

    /// The round of `events` taken from the queue, counted as sent.
    private func round(_ events: [TaskEvent]) -> RoundEvents {
        counters.sent.add(UInt64(events.count))
        return RoundEvents(events)
    }

    /// Hands `subscriber`, in one write, every round it has not had.
    private func visit(_ subscriber: Subscriber) {
        let rounds = lap.rounds(from: subscriber.nextRound)
        guard !rounds.isEmpty else { return }
        subscriber.nextRound = lap.nextRound
        report(subscriber.deliver(rounds, clock: clock), subscriber)
        if subscriber.holdsBack && subscriber.isLive { noteHolds(subscriber) }
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
/// into its place, keeping those a lap has visited before those it has not.
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
        var noLap = 0
        return remove(id, visitedBefore: &noLap)
    }

    /// Removes and returns the subscriber with `id`, if there is one, while a lap has
    /// visited those before `boundary`: they stay before it (one fewer, if it was one of
    /// them), and the others at or after it, so the lap still visits each of them once.
    mutating func remove(_ id: SubscriberID, visitedBefore boundary: inout Int) -> Subscriber? {
        guard let position = positions.removeValue(forKey: id) else { return nil }
        let removed = inOrder[position]
        var hole = position
        if hole < boundary {
            // The last one visited fills the hole, and leaves its own at the boundary.
            boundary -= 1
            fill(hole, from: boundary)
            hole = boundary
        }
        fill(hole, from: inOrder.count - 1)
        inOrder.removeLast()
        return removed
    }

    /// Moves the subscriber at `source` into the place `hole` (the same place: nothing).
    private mutating func fill(_ hole: Int, from source: Int) {
        guard source != hole else { return }
        inOrder[hole] = inOrder[source]
        positions[inOrder[hole].id] = hole
    }
}
