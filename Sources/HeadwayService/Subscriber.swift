import HeadwayCore

/// Identifies a subscriber to the broker from other threads.
struct SubscriberID: Hashable, Sendable {
    /// A number the broker gives out once.
    let rawValue: Int
}

/// What became of frames handed to a subscriber.
enum Delivery: Equatable {
    /// There was nothing to send.
    case nothing
    /// Written to the stream at once.
    case written
    /// Kept waiting, because the stream is full or older frames wait.
    case waiting
    /// Dropped: the stream is no longer open.
    case dropped
    /// Too many tasks were waiting: the stream was closed at once.
    case cutOff(pendingTasks: Int)
}

/// One client of `GET /v1/events`, as the broker serves it: it owns its queue of frames
/// waiting for room, its bound, its catch-up state and its `min_duration` hold-back, and
/// writes to its stream through an `EventSink`. It is made and used on the broker thread
/// only; only its sink is shared with other threads.
///
/// Until its catch-up is handed over it keeps the live events that match its filter; then
/// the catch-up's frames go first and those events follow (`CatchUpMerge`). A round's
/// frames go out in one write; when the stream is full they wait, one per task at its
/// latest, and past `maximumPendingTasks` tasks waiting the stream is closed (its client
/// reconnects and resumes from the last whole event it received).
final class Subscriber {
    /// The bounds of one subscriber.
    struct Limits: Equatable {
        /// A stream holding more than this is full: further frames wait, one per task.
        var streamBufferBytes: Int
        /// Past this many tasks waiting, the subscriber is cut off.
        var maximumPendingTasks: Int
    }

    /// How other threads name it to the broker.
    let id: SubscriberID
    /// Its stream, the only part other threads touch.
    let sink: any EventSink
    /// Which tasks it wants, and its `min_duration`.
    let filter: StreamFilter
    /// Its bounds.
    let limits: Limits
    /// Whether its catch-up has been handed over (until then live events are kept).
    private(set) var isLive = false
    /// Live events that arrived while the catch-up was read.
    private var arrivedDuringCatchUp: [TaskEvent] = []
    /// Where its catch-up ends: older live events are not sent again.
    private var merge = CatchUpMerge(highWater: .min)
    /// The `min_duration` rule, handed over from the catch-up once it is done.
    private var holdBack: HoldBack
    /// Frames waiting because the stream is full.
    private var pending = PendingFrames()

    init(id: SubscriberID, sink: any EventSink, filter: StreamFilter, limits: Limits) {
        self.id = id
        self.sink = sink
        self.filter = filter
        self.limits = limits
        self.holdBack = HoldBack(filter: filter)
    }

    /// Whether it holds young tasks back (`min_duration`), and so needs the clock.
    var holdsBack: Bool { filter.minDurationMilliseconds > 0 }

    /// When its next held task comes of age, if it holds any.
    var nextRelease: EpochMilliseconds? { holdBack.nextRelease }

    /// Tasks whose frames wait for room in the stream.
    var pendingTaskCount: Int { pending.taskCount }

    /// Hands over a round: while catching up its matching events are kept; once live, its
    /// matching events newer than the catch-up, past the hold-back, go out in one write.
    @discardableResult
    func deliver(_ round: RoundEvents, clock: any WallClock) -> Delivery {
        guard isLive else {
            for index in round.indices where round.matches(index, filter) {
                arrivedDuringCatchUp.append(round.events[index])
            }
            return .nothing
        }
        var frames: [[UInt8]] = []
        var tasks: [String] = []
        let holding = holdsBack
        let now = holding ? clock.now() : 0
        for index in round.indices where merge.isNew(round.changeNumbers[index]) && round.matches(index, filter) {
            if holding {
                guard case .send = holdBack.offer(round.events[index], now: now) else { continue }
            }
            frames.append(round.frame(index))
            tasks.append(round.taskIDs[index])
        }
        return enqueue(frames, tasks: tasks)
    }

    /// Takes the catch-up: its frames go out first, then the live events that arrived
    /// meanwhile and are newer (`CatchUpMerge`); from now on the subscriber is live.
    @discardableResult
    func caughtUp(_ catchUp: CatchUp, coalescingBacklog: Int, clock: any WallClock) -> Delivery {
        holdBack = catchUp.holdBack
        merge = CatchUpMerge(highWater: catchUp.highWater)
        sink.write(contentsOf: catchUp.frames, unlessMoreThan: .max)
        let following = merge.eventsAfterCatchUp(arrivedDuringCatchUp, coalescingBacklog: coalescingBacklog)
        arrivedDuringCatchUp = []
        isLive = true
        return deliver(RoundEvents(following), clock: clock)
    }

    /// The stream has room again: writes waiting frames, oldest first, while they fit.
    func drained() {
        let frames = pending.takeFront(room: limits.streamBufferBytes - sink.bufferedBytes)
        sink.write(contentsOf: frames, unlessMoreThan: .max)
    }

    /// Sends the held tasks that have come of age at `now`, without ids (they are older
    /// than changes already sent).
    @discardableResult
    func releaseHeld(now: EpochMilliseconds) -> Delivery {
        guard isLive, let due = holdBack.nextRelease, due <= now else { return .nothing }
        let released = holdBack.release(now: now)
        return enqueue(released.map { EventFrames.event($0, withID: false) }, tasks: released.map(\.taskID))
    }

    /// Writes a heartbeat comment (`pieces`, shared by every subscriber) when live and
    /// nothing waits (waiting frames will show the stream is alive soon enough).
    func heartbeat(_ pieces: [[UInt8]]) {
        guard isLive && pending.isEmpty else { return }
        sink.write(contentsOf: pieces, unlessMoreThan: .max)
    }

    /// Ends the stream after what is written.
    func finish() { sink.finish() }

    /// Writes `frames` (one per task in `tasks`) at once, or, when the stream is full or
    /// frames already wait, keeps them waiting; cuts the subscriber off past its bound.
    private func enqueue(_ frames: [[UInt8]], tasks: [String]) -> Delivery {
        guard !frames.isEmpty else { return .nothing }
        if pending.isEmpty && sink.write(contentsOf: frames, unlessMoreThan: limits.streamBufferBytes - 1) {
            return .written
        }
        guard sink.isOpen else { return .dropped }
        for (frame, task) in zip(frames, tasks) { pending.put(frame, for: task) }
        guard pending.taskCount > limits.maximumPendingTasks else { return .waiting }
        let count = pending.taskCount
        pending.removeAll()
        // Closed at once: its socket is full, so a clean end would wait for a client that
        // may never read again. Its reconnection resumes from the last whole event.
        sink.abort()
        return .cutOff(pendingTasks: count)
    }
}

/// Frames waiting for room in a stream: at most one per task, in the order of each task's
/// latest change (an ordered dictionary).
struct PendingFrames {
    private var frames: [String: [UInt8]] = [:]
    private var order: [String] = []

    /// Whether nothing waits.
    var isEmpty: Bool { order.isEmpty }

    /// Tasks waiting.
    var taskCount: Int { order.count }

    /// Keeps `frame` as the task's latest, moving the task to the back.
    mutating func put(_ frame: [UInt8], for task: String) {
        if frames.updateValue(frame, forKey: task) != nil { order.removeAll { $0 == task } }
        order.append(task)
    }

    /// Takes frames from the front while there is room (the last may pass it).
    mutating func takeFront(room: Int) -> [[UInt8]] {
        var taken: [[UInt8]] = []
        var room = room
        while let task = order.first, room > 0 {
            order.removeFirst()
            if let frame = frames.removeValue(forKey: task) {
                taken.append(frame)
                room -= frame.count
            }
        }
        return taken
    }

    /// Forgets everything waiting.
    mutating func removeAll() {
        frames = [:]
        order = []
    }
}
