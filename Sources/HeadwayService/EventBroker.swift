import Foundation
import HeadwayCore
import HeadwayStore

/// Fans committed events out to subscribers on its own thread. Publishing only appends to
/// a queue, so ingestion never waits for subscribers; a subscriber that cannot keep up has
/// its waiting events coalesced to the latest per task and, past a bound, is disconnected
/// (its reconnection resumes exactly from the last id it received).
///
/// The thread only moves commands and calls the parts: `FanOutQueue` decides what a round
/// carries, `Subscriber` what each client is sent, `BrokerSchedule` when to look again.
// Unchecked: the command queue is guarded by `condition`; all else is broker-thread only.
final class EventBroker: @unchecked Sendable {
    struct Settings: Sendable {
        var maximumSubscribers = 10_000
        var heartbeatSeconds = 15.0
        /// A stream holding more than this is "full": further events wait, coalesced.
        var streamBufferBytes = 64 * 1024
        /// A subscriber with more tasks than this waiting is disconnected.
        var maximumPendingTasks = 2048
        /// Past this many events waiting for the broker itself, a task's events are
        /// coalesced to its latest before fan-out (the broker is behind; below it, every
        /// event is delivered).
        var coalescingBacklog = 1024
        /// When fan-out rounds may start (see `FanOutPacing`).
        var pacing = FanOutPacing()

        /// The bounds of each subscriber.
        var subscriberLimits: Subscriber.Limits {
            Subscriber.Limits(streamBufferBytes: streamBufferBytes, maximumPendingTasks: maximumPendingTasks)
        }
    }

    /// What other threads ask of the broker thread.
    private enum Command {
        case publish([TaskEvent])
        case attach(SubscriberID, any EventSink, StreamFilter)
        case caughtUp(SubscriberID, CatchUp)
        case drained(SubscriberID)
        case detach(SubscriberID)
        case wake
    }

    let settings: Settings
    private let clock: any WallClock
    private let logger: Logger

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var commands: [Command] = []
    private var stopping = false
    private var paused = false
    /// The broker waits out a pacing pause: new events need not wake it.
    private var inPause = false
    private var reservedSlots = 0
    /// The last number given to a subscriber.
    private var lastSubscriberID = 0
    private let stopped = DispatchSemaphore(value: 0)

    // Broker thread only.
    private var subscribers: [SubscriberID: Subscriber] = [:]
    /// The subscribers holding tasks back (`min_duration`): only these need the clock.
    private var holding: [SubscriberID: Subscriber] = [:]
    /// Events waiting for a round, and the pacing of rounds.
    private var queue: FanOutQueue
    /// When the next heartbeat is due.
    private var schedule: BrokerSchedule

    init(settings: Settings, clock: any WallClock, logger: Logger) {
        self.settings = settings
        self.clock = clock
        self.logger = logger
        queue = FanOutQueue(coalescingBacklog: settings.coalescingBacklog, pacing: settings.pacing)
        schedule = BrokerSchedule(heartbeatSeconds: settings.heartbeatSeconds, now: Self.monotonicNow())
        let thread = Thread { [self] in
            nameCurrentThread("headway-events")
            run()
        }
        thread.name = "headway.events"
        thread.start()
    }

    // MARK: - Any thread

    /// Takes one of the `maximumSubscribers` places, or returns false when all are taken.
    func reserveSlot() -> Bool {
        condition.withLock {
            guard reservedSlots < settings.maximumSubscribers, !stopping else { return false }
            reservedSlots += 1
            return true
        }
    }

    /// Subscribers connected (places taken).
    var subscriberCount: Int { condition.withLock { reservedSlots } }

    /// Queues committed events, in sequence order. With no subscriber there is nobody to
    /// tell: a subscriber that arrives later reads everything committed before its catch-up
    /// (its place is taken before that read, so nothing after it is dropped).
    func publish(_ events: [TaskEvent]) {
        guard !events.isEmpty else { return }
        condition.withLock {
            guard reservedSlots > 0 else { return }
            commands.append(.publish(events))
            if !inPause { condition.signal() }
        }
    }

    /// Starts delivering to a subscriber writing to `sink` (events are kept until its
    /// catch-up is handed over with `caughtUp`). Its place, taken with `reserveSlot`, is
    /// given back when the sink closes.
    func attach(_ sink: any EventSink, filter: StreamFilter) -> SubscriberID {
        let id = condition.withLock {
            lastSubscriberID += 1
            return SubscriberID(rawValue: lastSubscriberID)
        }
        send(.attach(id, sink, filter))
        sink.onClose { [weak self] in self?.send(.detach(id)) }
        sink.onDrain { [weak self] in self?.send(.drained(id)) }
        return id
    }

    /// Hands over what the catch-up read.
    func caughtUp(_ id: SubscriberID, _ catchUp: CatchUp) { send(.caughtUp(id, catchUp)) }

    /// Makes the thread look at the clock now (after a test moved it).
    func wake() { send(.wake) }

    /// Holds (true) or releases (false) the queue, so a test can make the broker fall
    /// behind on purpose.
    func setPaused(_ isPaused: Bool) {
        condition.withLock {
            paused = isPaused
            condition.signal()
        }
    }

    /// Ends every stream and stops the thread (once; later calls return at once). Events
    /// queued before are fanned out first, through a pacing pause if need be.
    func stop() {
        let alreadyStopping = condition.withLock {
            defer { stopping = true; condition.signal() }
            return stopping
        }
        if !alreadyStopping { stopped.wait() }
    }

    private func send(_ command: Command) {
        condition.withLock {
            commands.append(command)
            condition.signal()
        }
    }

    // MARK: - Broker thread

    /// The thread's loop: waits for commands or the next timer, applies the commands,
    /// runs a fan-out round unless a pause holds it, releases held tasks and sends
    /// heartbeats; when stopping, one last round, then every stream is ended.
    private func run() {
        while true {
            condition.lock()
            while (commands.isEmpty || paused) && !stopping {
                if !condition.wait(until: nextWakeUp()) && !paused { break }
            }
            let batch = commands
            commands = []
            let isStopping = stopping
            condition.unlock()

            for command in batch { handle(command) }
            let roundStart = Self.monotonicNow()
            if let events = queue.takeRound(now: roundStart, stopping: isStopping) {
                fanOut(RoundEvents(events))
                queue.roundRan(from: roundStart, to: Self.monotonicNow())
            }
            let isPausing = queue.pauseEnd(now: Self.monotonicNow()) != nil
            condition.withLock { inPause = isPausing }
            releaseHeldTasks()
            sendHeartbeatIfDue()
            if isStopping { break }
        }
        for subscriber in subscribers.values { subscriber.finish() }
        subscribers = [:]
        holding = [:]
        stopped.signal()
    }

    private func handle(_ command: Command) {
        switch command {
        case .publish(let events):
            queue.append(events)
        case .attach(let id, let sink, let filter):
            subscribers[id] = Subscriber(id: id, sink: sink, filter: filter, limits: settings.subscriberLimits)
        case .caughtUp(let id, let catchUp):
            guard let subscriber = subscribers[id] else { return }
            report(subscriber.caughtUp(catchUp, coalescingBacklog: settings.coalescingBacklog, clock: clock), subscriber)
            noteHolds(subscriber)
        case .drained(let id):
            subscribers[id]?.drained()
        case .detach(let id):
            holding[id] = nil
            if subscribers.removeValue(forKey: id) != nil {
                condition.withLock { reservedSlots -= 1 }
            }
        case .wake:
            break
        }
    }

    /// Hands one round to every subscriber (each frame is encoded once, for all).
    private func fanOut(_ round: RoundEvents) {
        for subscriber in subscribers.values {
            report(subscriber.deliver(round, clock: clock), subscriber)
            if subscriber.holdsBack && subscriber.isLive { noteHolds(subscriber) }
        }
    }

    /// Logs a subscriber cut off for being too slow.
    @inline(__always)
    private func report(_ delivery: Delivery, _ subscriber: Subscriber) {
        guard case .cutOff(let pendingTasks) = delivery else { return }
        logger.log(.warn, "events.subscriber_too_slow", ["pending_tasks": "\(pendingTasks)"])
    }

    /// Keeps `holding` in step with a subscriber's held tasks.
    private func noteHolds(_ subscriber: Subscriber) {
        holding[subscriber.id] = subscriber.nextRelease == nil ? nil : subscriber
    }

    private func releaseHeldTasks() {
        guard !holding.isEmpty else { return }
        let now = clock.now()
        for subscriber in holding.values {
            let delivery = subscriber.releaseHeld(now: now)
            guard delivery != .nothing else { continue }
            report(delivery, subscriber)
            noteHolds(subscriber)
        }
    }

    private func sendHeartbeatIfDue() {
        guard schedule.heartbeatIsDue(now: Self.monotonicNow()) else { return }
        let pieces = [EventFrames.heartbeat]
        for subscriber in subscribers.values { subscriber.heartbeat(pieces) }
    }

    /// The next time the thread must look without being told (see `BrokerSchedule`).
    private func nextWakeUp() -> Date {
        let now = Self.monotonicNow()
        let nextRelease = holding.values.compactMap(\.nextRelease).min()
        let delay = schedule.delay(now: now, pauseEnd: queue.pauseEnd(now: now), wallNow: clock.now(),
                                   nextRelease: nextRelease)
        return Date(timeIntervalSinceNow: delay)
    }

    /// The monotonic clock, in nanoseconds.
    private static func monotonicNow() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
