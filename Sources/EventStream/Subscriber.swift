import HeadwayCore

/// Identifies a subscriber to the broker from other threads.
package struct SubscriberID: Hashable, Sendable {
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
    /// Too slow: the stream was closed at once.
    case cutOff(SlowSubscriber)
}

/// Why a subscriber was cut off, for its log line.
enum SlowSubscriber: Equatable {
    /// Its stream's owned unsent bytes and its waiting frames passed the cap.
    case bytes(Int)
    /// Too many tasks were waiting.
    case pendingTasks(Int)
    /// Its socket took nothing for the stall timeout (the HTTP layer closed it).
    case stalled

    /// The `reason` field of `events.subscriber_too_slow`.
    var reason: String {
        switch self {
        case .bytes: "bytes"
        case .pendingTasks: "pending_tasks"
        case .stalled: "stalled"
        }
    }
}

/// One client of `GET /v1/events`, as the broker serves it: it owns its queue of frames
/// waiting for room, its bound, its catch-up state and its `min_duration` hold-back, and
/// writes to its stream through an `EventSink`. It is made and used on the broker thread
/// only; only its sink is shared with other threads.
///
/// Until its catch-up is handed over it keeps the live events that match its filter; then
/// the catch-up's frames go first and those events follow (`CatchUpMerge`). A round's
/// frames go out in one write; when the stream is full they wait, one per task at its
/// latest; the stream is closed (its client reconnects and resumes from the last whole
/// event it received) once it holds more than its cap or too many tasks wait.
///
/// How bytes count against the cap (`Limits.unsentBytes`): the catch-up is written
/// *shared* — immutable frames that subscribers with the same catch-up (`CatchUpCache`)
/// reference without copying — and does not count, so a catch-up larger than the cap
/// reaches a client that reads; every later write (live frames, held tasks, heartbeats)
/// is *owned* and counts, with the frames waiting here. The cap is checked whenever
/// frames must wait; a round written while the stream was below its full mark may pass it
/// once (a round's frames are encoded once for every subscriber). How long a peer that
/// reads nothing may hold shared bytes is bounded by the stall timeout of the HTTP layer,
/// and how many catch-up bytes all streams hold at once by the `CatchUpBudget`, whose
/// charge the subscriber holds (`CatchUpHold`) until its stream has sent the catch-up.
///
/// While the catch-up is being sent, live frames wait here behind it, one per task at
/// its latest, bounded by count (`maximumPendingTasks`) rather than by the byte cap: a
/// slow but reading client must be able to finish a catch-up many times the cap (it has
/// no event id until then, so a cut-off would send it back for a new one, for ever),
/// and counting bytes would cut it off as soon as more than the cap of distinct tasks
/// changed meanwhile. What that costs at worst: `maximumPendingTasks` frames per such
/// subscriber (2,048 frames of at most ~5 KiB, the largest task: ~10 MiB), but a round's
/// frames are encoded once and shared, so subscribers waiting for the same tasks hold
/// the same latest frames; only the held tasks a `min_duration` releases are its own.
/// Once the catch-up has gone out, the frames waiting go out as the stream takes them,
/// and the byte cap applies again.
final class Subscriber {
    /// The bounds of one subscriber.
    struct Limits: Equatable {
        /// The cap: owned unsent bytes plus frames waiting here; past it, cut off.
        var unsentBytes: Int
        /// Past this many tasks waiting, the subscriber is cut off.
        var maximumPendingTasks: Int

        /// A stream holding this much or more (shared bytes included) is full: further
        /// frames wait here, one per task, so a slow reader gets each task's latest.
        var fullBytes: Int { unsentBytes / 4 }

        /// When a full stream has sent down to this, waiting frames are written.
        var lowWaterBytes: Int { fullBytes / 2 }
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
    /// The highest change it has been handed (sent, held or not matching): a release's id
    /// says the stream resumes after it.
    private var handedThrough: Int64 = .min
    /// Frames waiting because the stream is full.
    private var pending = PendingFrames()
    /// Whether the stream still holds unsent bytes of the catch-up (frames then wait
    /// bounded by count, not bytes).
    private(set) var isSendingCatchUp = false
    /// The catch-up's charge on the budget, held until the stream has sent it.
    private var catchUpHold: CatchUpHold?
    /// The number of the first fan-out round it has not been handed (see `FanOutLap`).
    var nextRound = 0

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
        deliver([round][...], clock: clock)
    }

    /// Hands over rounds, oldest first, as `deliver(_:clock:)` one round, with every
    /// frame they send in one write (a subscriber a lap reaches late gets what joined it
    /// meanwhile together with the rest).
    @discardableResult
    func deliver(_ rounds: ArraySlice<RoundEvents>, clock: any WallClock) -> Delivery {
        guard isLive else {
            for round in rounds {
                for index in round.indices where round.matches(index, filter) {
                    arrivedDuringCatchUp.append(round.events[index])
                }
            }
            return .nothing
        }
        let now = holdsBack ? clock.now() : 0
        var frames: [[UInt8]] = []
        var tasks: [String] = []
        for round in rounds { handOver(round, now: now, frames: &frames, tasks: &tasks) }
        return enqueue(frames, tasks: tasks)
    }

    /// Adds to `frames` (and their tasks to `tasks`) the frames of `round` this live
    /// subscriber sends: its matching events newer than the catch-up, past the hold-back.
    private func handOver(_ round: RoundEvents, now: EpochMilliseconds, frames: inout [[UInt8]],
                          tasks: inout [String]) {
        // While it sends what a stream of every task sends (every event but the creation
        // stand-ins), the round's own arrays stand for what it sends (most subscribers of a
        // round send that): nothing is gathered until it does not.
        var sendsAsWholeStream = true
        let holding = holdsBack
        handedThrough = max(handedThrough, round.highestChange)
        for index in round.indices {
            var sends = merge.isNew(round.changeNumbers[index])
                && (round.matches(index, filter) || (holding && holdBack.isHolding(round.taskIDs[index])))
            if sends && holding {
                switch holdBack.offer(round.events[index], now: now) {
                case .send: break
                case .hold, .drop: sends = false
                }
            }
            // An event shown with its parent hidden has a frame of its own: the round's
            // shared frames no longer stand for what this subscriber sends.
            let wholeStreamSends = !round.isCreationStandIn(index)
            if sendsAsWholeStream && (sends != wholeStreamSends || round.hidesParent(index, from: filter.taskPrefix)) {
                sendsAsWholeStream = false
                let sent = round.wholeStreamIndices.prefix { $0 < index }
                frames += sent.map { round.frame($0) }
                tasks += sent.map { round.taskIDs[$0] }
            }
            if sends && !sendsAsWholeStream {
                frames.append(round.frame(index, for: filter.taskPrefix))
                tasks.append(round.taskIDs[index])
            }
        }
        guard sendsAsWholeStream else { return }
        if frames.isEmpty {
            // The round's arrays themselves, shared rather than copied.
            frames = round.wholeStreamFrames
            tasks = round.wholeStreamTaskIDs
        } else {
            frames += round.wholeStreamFrames
            tasks += round.wholeStreamTaskIDs
        }
    }

    /// Takes the catch-up: its frames go out first, then the live events that arrived
    /// meanwhile and are newer (`CatchUpMerge`); from now on the subscriber is live. Keeps
    /// `hold` (its charge on the catch-up budget) while the stream holds catch-up bytes.
    @discardableResult
    func caughtUp(_ catchUp: CatchUp, holding hold: CatchUpHold? = nil, coalescingBacklog: Int,
                  clock: any WallClock) -> Delivery {
        holdBack = catchUp.holdBack
        merge = CatchUpMerge(highWater: catchUp.highWater)
        handedThrough = catchUp.highWater
        sink.writeShared(contentsOf: catchUp.frames)
        isSendingCatchUp = sink.sharedBytes > 0
        catchUpHold = isSendingCatchUp ? hold : nil
        let following = merge.eventsAfterCatchUp(arrivedDuringCatchUp, coalescingBacklog: coalescingBacklog)
        arrivedDuringCatchUp = []
        isLive = true
        return deliver(RoundEvents(following), clock: clock)
    }

    /// The stream has room again, or has sent its catch-up: lets go of the catch-up's
    /// charge once it has gone out, and writes waiting frames, oldest first, while the
    /// stream is below its full mark (once full, it calls again when it has room).
    func drained() {
        if isSendingCatchUp && sink.sharedBytes == 0 {
            isSendingCatchUp = false
            catchUpHold = nil
        }
        while !pending.isEmpty, sink.isOpen {
            let room = limits.fullBytes - sink.bufferedBytes
            guard room > 0 else { return }
            sink.write(contentsOf: pending.takeFront(room: room), unlessMoreThan: .max)
        }
    }

    /// Sends the held tasks that have come of age at `now`. Their changes are older than
    /// changes already sent, so they carry no id of their own; the last one carries
    /// `LastEventID.release` (the changes handed so far, and `now`), so that a client that
    /// received it and resumes is not sent them again. Ids stay increasing: its number is
    /// the last one handed, and the next change's is higher.
    @discardableResult
    func releaseHeld(now: EpochMilliseconds) -> Delivery {
        guard isLive, let due = holdBack.nextRelease, due <= now else { return .nothing }
        let released = holdBack.release(now: now)
        let releaseID = LastEventID.release(change: handedThrough, at: now)
        let frames = released.indices.map { index in
            EventFrames.event(released[index], id: index == released.count - 1 ? releaseID : nil,
                              hidingParentOutside: filter.taskPrefix)
        }
        return enqueue(frames, tasks: released.map(\.taskID))
    }

    /// Writes a heartbeat comment (`pieces`, shared by every subscriber) when live and
    /// nothing waits, here or in the stream (waiting bytes will show the stream is alive
    /// soon enough, and a heartbeat must not grow a full stream).
    func heartbeat(_ pieces: [[UInt8]]) {
        guard isLive && pending.isEmpty else { return }
        sink.write(contentsOf: pieces, unlessMoreThan: 0)
    }

    /// Ends the stream after what is written.
    func finish() { sink.finish() }

    /// Writes `frames` (one per task in `tasks`) at once, or, when the stream is full or
    /// frames already wait, keeps them waiting; cuts the subscriber off past its bounds
    /// (while the catch-up is being sent, past its bound in tasks only).
    private func enqueue(_ frames: [[UInt8]], tasks: [String]) -> Delivery {
        guard !frames.isEmpty else { return .nothing }
        if pending.isEmpty && sink.write(contentsOf: frames, unlessMoreThan: limits.fullBytes - 1) {
            return .written
        }
        guard sink.isOpen else { return .dropped }
        for (frame, task) in zip(frames, tasks) { pending.put(frame, for: task) }
        let heldBytes = sink.ownedBytes + pending.byteCount
        let overflow: SlowSubscriber
        if heldBytes > limits.unsentBytes && !isSendingCatchUp {
            overflow = .bytes(heldBytes)
        } else if pending.taskCount > limits.maximumPendingTasks {
            overflow = .pendingTasks(pending.taskCount)
        } else {
            return .waiting
        }
        pending.removeAll()
        // Closed at once: its socket is full, so a clean end would wait for a client that
        // may never read again. Its reconnection resumes from the last whole event.
        sink.abort()
        return .cutOff(overflow)
    }
}

/// Frames waiting for room in a stream: at most one per task, in the order of each task's
/// latest change (an ordered dictionary).
struct PendingFrames {
    private var frames: [String: [UInt8]] = [:]
    private var order: [String] = []
    /// The bytes of the frames waiting.
    private(set) var byteCount = 0

    /// Whether nothing waits.
    var isEmpty: Bool { order.isEmpty }

    /// Tasks waiting.
    var taskCount: Int { order.count }

    /// Keeps `frame` as the task's latest, moving the task to the back.
    mutating func put(_ frame: [UInt8], for task: String) {
        if let replaced = frames.updateValue(frame, forKey: task) {
            order.removeAll { $0 == task }
            byteCount -= replaced.count
        }
        order.append(task)
        byteCount += frame.count
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
                byteCount -= frame.count
            }
        }
        return taken
    }

    /// Forgets everything waiting.
    mutating func removeAll() {
        frames = [:]
        order = []
        byteCount = 0
    }
}
