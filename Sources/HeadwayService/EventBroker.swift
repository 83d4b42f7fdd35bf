import Foundation
import Lifecycle
import HTTPServer
import HeadwayCore
import HeadwayStore

/// One client of `GET /v1/events`. Its state belongs to the broker thread, except
/// `stream`, which any thread may write.
final class Subscriber: @unchecked Sendable {
    let stream: ResponseStream
    let filter: StreamFilter
    /// The `min_duration` rule, handed over from the catch-up once it is done.
    var holdBack: HoldBack
    /// Live events that arrived while the catch-up read the database.
    var arrivedDuringCatchUp: [TaskEvent] = []
    var isLive = false
    /// The last change its catch-up reflected: older events are not sent again.
    var highWater: Int64 = .min
    /// Frames waiting because the stream is full: at most one per task, in the order
    /// of their latest change (an ordered dictionary).
    var pendingFrames: [String: [UInt8]] = [:]
    var pendingOrder: [String] = []
    var isAttached = false

    init(stream: ResponseStream, filter: StreamFilter) {
        self.stream = stream
        self.filter = filter
        self.holdBack = HoldBack(filter: filter)
    }
}

/// What the catch-up read from the database for a new subscriber.
struct CatchUp: Sendable {
    /// Frames to send first (`retry:`, the snapshot or the replayed changes).
    var frames: [[UInt8]]
    /// The last change the catch-up reflects: live events up to it are already covered.
    var highWater: Int64
    /// The `min_duration` state after the catch-up (tasks held back).
    var holdBack: HoldBack
}

/// Fans committed events out to subscribers on its own thread. Publishing only appends to
/// a queue, so ingestion never waits for subscribers; a subscriber that cannot keep up has
/// its waiting events coalesced to the latest per task and, past a bound, is disconnected
/// (its reconnection resumes exactly from the last id it received).
final class EventBroker: Service, @unchecked Sendable {
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
    }

    private enum Command {
        case publish([TaskEvent])
        case attach(Subscriber)
        case caughtUp(Subscriber, CatchUp)
        case drained(Subscriber)
        case detach(Subscriber)
        case wake
    }

    let settings: Settings
    private let clock: any WallClock
    private let logger: Logger
    private let condition = NSCondition()
    private var commands: [Command] = []
    private var stopping = false
    private var paused = false
    /// The broker waits out a pacing pause: new events need not wake it.
    private var inPause = false
    private var reservedSlots = 0

    // Broker thread only.
    private var subscribers: [ObjectIdentifier: Subscriber] = [:]
    /// The subscribers holding tasks back (`min_duration`): only these need the clock.
    private var holding: [ObjectIdentifier: Subscriber] = [:]
    private var nextHeartbeat = DispatchTime.now()
    /// Events committed and not yet fanned out, and whether some waited for a pause.
    private var waiting: [TaskEvent] = []
    private var waitedForPacing = false
    /// When the last fan-out round ran, and so when the next may.
    private var pacing: FanOutPacing

    init(settings: Settings, clock: any WallClock, logger: Logger) {
        self.settings = settings
        self.pacing = settings.pacing
        self.clock = clock
        self.logger = logger
        nextHeartbeat = .now() + settings.heartbeatSeconds
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

    /// Starts delivering to `subscriber` (events are kept until its catch-up is done).
    /// The subscriber's place is given back when its stream closes.
    func attach(_ subscriber: Subscriber) {
        subscriber.stream.onClose { [weak self] in self?.send(.detach(subscriber)) }
        subscriber.stream.onDrain { [weak self] in self?.send(.drained(subscriber)) }
        send(.attach(subscriber))
    }

    /// Hands over what the catch-up read.
    func caughtUp(_ subscriber: Subscriber, _ catchUp: CatchUp) { send(.caughtUp(subscriber, catchUp)) }

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

    /// Makes `run()` fan out what is queued, end every stream and return.
    func requestStop() {
        condition.withLock {
            stopping = true
            condition.signal()
        }
    }

    private func send(_ command: Command) {
        condition.withLock {
            commands.append(command)
            condition.signal()
        }
    }

    // MARK: - Broker thread

    /// Fans events out until a stop is requested.
    func run() {
        while true {
            condition.lock()
            while (commands.isEmpty || paused) && !stopping {
                if !condition.wait(until: nextWakeUp()) && !paused { break }
            }
            let batch = commands
            commands = []
            let isStopping = stopping
            condition.unlock()

            for command in batch {
                if case .publish(let events) = command {
                    waiting += events
                } else {
                    handle(command)
                }
            }
            if isStopping || pauseEnd() == nil {
                fanOut()
            } else {
                waitedForPacing = true
            }
            let isPausing = pauseEnd() != nil
            condition.withLock { inPause = isPausing }
            releaseHeldTasks()
            sendHeartbeatIfDue()
            if isStopping { break }
        }
        for subscriber in subscribers.values { subscriber.stream.finish() }
        subscribers = [:]
    }

    private func handle(_ command: Command) {
        switch command {
        case .attach(let subscriber):
            subscriber.isAttached = true
            subscribers[ObjectIdentifier(subscriber)] = subscriber
        case .caughtUp(let subscriber, let catchUp):
            guard subscriber.isAttached else { return }
            subscriber.holdBack = catchUp.holdBack
            subscriber.highWater = catchUp.highWater
            subscriber.stream.write(contentsOf: catchUp.frames)
            let arrived = subscriber.arrivedDuringCatchUp.filter { $0.seq > catchUp.highWater }
            subscriber.arrivedDuringCatchUp = []
            subscriber.isLive = true
            deliver(RoundEvents(arrived.count > settings.coalescingBacklog ? coalesced(arrived) : arrived), to: subscriber)
            noteHolds(subscriber)
        case .drained(let subscriber):
            flushPending(subscriber)
        case .detach(let subscriber):
            subscriber.isAttached = false
            holding[ObjectIdentifier(subscriber)] = nil
            if subscribers.removeValue(forKey: ObjectIdentifier(subscriber)) != nil {
                condition.withLock { reservedSlots -= 1 }
            }
        case .publish, .wake:
            break
        }
    }

    /// Fans the waiting events out in one round, every event in order; only when the
    /// broker is behind (a backlog past `coalescingBacklog`, or events that waited for a
    /// pause) is a task's run of events cut to its latest. A long round is followed by a
    /// pause (`FanOutPacing`).
    private func fanOut() {
        guard !waiting.isEmpty else { return }
        let started = DispatchTime.now()
        let events = RoundEvents(waitedForPacing || waiting.count > settings.coalescingBacklog ? coalesced(waiting) : waiting)
        waiting = []
        waitedForPacing = false
        for subscriber in subscribers.values {
            if subscriber.isLive {
                deliver(events, to: subscriber)
                if subscriber.filter.minDurationMilliseconds > 0 { noteHolds(subscriber) }
            } else {
                for index in events.indices where events.matches(index, subscriber.filter) {
                    subscriber.arrivedDuringCatchUp.append(events.events[index])
                }
            }
        }
        pacing.roundRan(from: started.uptimeNanoseconds, to: DispatchTime.now().uptimeNanoseconds)
    }

    /// When the pause after the last round ends, if the waiting events must wait for it.
    private func pauseEnd() -> DispatchTime? {
        pacing.pauseEnd(waiting: waiting.count, now: DispatchTime.now().uptimeNanoseconds)
            .map { DispatchTime(uptimeNanoseconds: $0) }
    }

    /// Hands one subscriber its events of a round, newer than its catch-up, in one write.
    private func deliver(_ events: RoundEvents, to subscriber: Subscriber) {
        var frames: [[UInt8]] = []
        var tasks: [String] = []
        let holding = subscriber.filter.minDurationMilliseconds > 0
        let now = holding ? clock.now() : 0
        for index in events.indices
        where events.seqs[index] > subscriber.highWater && events.matches(index, subscriber.filter) {
            if holding {
                guard case .send = subscriber.holdBack.offer(events.events[index], now: now) else { continue }
            }
            frames.append(events.frame(index))
            tasks.append(events.taskIDs[index])
        }
        enqueue(frames, tasks: tasks, to: subscriber)
    }

    /// Writes `frames` (one per task in `tasks`) at once, or, when the stream is full or
    /// frames already wait, keeps them waiting: the latest per task, in the order of their
    /// latest change (an ordered dictionary).
    private func enqueue(_ frames: [[UInt8]], tasks: [String], to subscriber: Subscriber) {
        guard !frames.isEmpty else { return }
        if subscriber.pendingOrder.isEmpty
            && subscriber.stream.write(contentsOf: frames, unlessMoreThan: settings.streamBufferBytes - 1) {
            return
        }
        guard subscriber.stream.isOpen else { return }
        for (frame, task) in zip(frames, tasks) {
            if subscriber.pendingFrames.updateValue(frame, forKey: task) != nil {
                subscriber.pendingOrder.removeAll { $0 == task }
            }
            subscriber.pendingOrder.append(task)
        }
        if subscriber.pendingOrder.count > settings.maximumPendingTasks {
            logger.log(.warn, "events.subscriber_too_slow", ["pending_tasks": "\(subscriber.pendingOrder.count)"])
            subscriber.pendingFrames = [:]
            subscriber.pendingOrder = []
            // Closed at once: its socket is full, so a clean end would wait for a client
            // that may never read again. Its reconnection resumes from the last whole event.
            subscriber.stream.abort()
        }
    }

    private func flushPending(_ subscriber: Subscriber) {
        var frames: [[UInt8]] = []
        var room = settings.streamBufferBytes - subscriber.stream.bufferedBytes
        while let task = subscriber.pendingOrder.first, room > 0 {
            subscriber.pendingOrder.removeFirst()
            if let frame = subscriber.pendingFrames.removeValue(forKey: task) {
                frames.append(frame)
                room -= frame.count
            }
        }
        subscriber.stream.write(contentsOf: frames)
    }

    /// Keeps `holding` in step with a subscriber's held tasks.
    private func noteHolds(_ subscriber: Subscriber) {
        holding[ObjectIdentifier(subscriber)] = subscriber.holdBack.nextRelease == nil ? nil : subscriber
    }

    private func releaseHeldTasks() {
        let now = clock.now()
        for subscriber in holding.values where subscriber.isLive {
            guard let due = subscriber.holdBack.nextRelease, due <= now else { continue }
            let released = subscriber.holdBack.release(now: now)
            enqueue(released.map { EventFrames.event($0, withID: false) }, tasks: released.map(\.taskID), to: subscriber)
            noteHolds(subscriber)
        }
    }

    private func sendHeartbeatIfDue() {
        guard DispatchTime.now() >= nextHeartbeat else { return }
        nextHeartbeat = .now() + settings.heartbeatSeconds
        let comment = Array(ServerSentEvent.comment().utf8)
        for subscriber in subscribers.values where subscriber.isLive && subscriber.pendingOrder.isEmpty {
            subscriber.stream.write(comment)
        }
    }

    /// The next time the thread must look without being told: a heartbeat, a release, or
    /// the end of a pause with events waiting.
    private func nextWakeUp() -> Date {
        var seconds = Double(nextHeartbeat.uptimeNanoseconds) / 1e9 - Double(DispatchTime.now().uptimeNanoseconds) / 1e9
        if let pauseEnd = pauseEnd() {
            seconds = min(seconds, Double(pauseEnd.uptimeNanoseconds) / 1e9 - Double(DispatchTime.now().uptimeNanoseconds) / 1e9)
        }
        let now = clock.now()
        for subscriber in holding.values {
            if let release = subscriber.holdBack.nextRelease {
                seconds = min(seconds, Double(release - now) / 1000)
            }
        }
        return Date(timeIntervalSinceNow: max(0.001, seconds))
    }

    private func coalesced(_ events: [TaskEvent]) -> [TaskEvent] {
        var latestIndex: [String: Int] = [:]
        for (index, event) in events.enumerated() { latestIndex[event.taskID] = index }
        return events.enumerated().filter { latestIndex[$0.element.taskID] == $0.offset }.map(\.element)
    }
}

/// The events of one fan-out round, with what every subscriber looks at kept apart (so
/// matching does not copy events) and each frame encoded once, when first needed.
private final class RoundEvents {
    let events: [TaskEvent]
    let seqs: [Int64]
    let taskIDs: [String]
    let parentIDs: [String?]
    private var frames: [[UInt8]?]

    init(_ events: [TaskEvent]) {
        self.events = events
        seqs = events.map(\.seq)
        taskIDs = events.map(\.taskID)
        parentIDs = events.map(\.parentID)
        frames = Array(repeating: nil, count: events.count)
    }

    var indices: Range<Int> { events.indices }

    func matches(_ index: Int, _ filter: StreamFilter) -> Bool {
        filter.matches(taskID: taskIDs[index], parentID: parentIDs[index])
    }

    /// The frame of an event, with its id.
    func frame(_ index: Int) -> [UInt8] {
        if let frame = frames[index] { return frame }
        let frame = EventFrames.event(events[index], withID: true)
        frames[index] = frame
        return frame
    }
}

/// The bytes of event-stream frames.
enum EventFrames {
    /// A change: `id` (unless it is a held-back task shown late), event name, task JSON.
    static func event(_ event: TaskEvent, withID: Bool) -> [UInt8] {
        // Ids are numbers and names are fixed constants: neither can hold a line break.
        let frame = try! ServerSentEvent(id: withID ? String(event.seq) : nil, event: event.kind.rawValue, data: event.data)
        return frame.bytes
    }

    /// The first event of a fresh subscription.
    static func snapshot(_ tasks: [TaskRecord], seq: Int64) -> [UInt8] {
        var data = "{\"tasks\":["
        for (index, task) in tasks.enumerated() {
            if index > 0 { data += "," }
            data += task.json
        }
        data += "]}"
        let frame = try! ServerSentEvent(id: String(seq), event: "snapshot", data: data)
        return frame.bytes
    }
}
