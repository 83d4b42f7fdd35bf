import HeadwayCore

/// The events committed and not yet fanned out, and the rules of when a fan-out round
/// runs and what it carries. Pure: times are monotonic nanoseconds given by the caller.
///
/// A round carries every waiting event in order. Only when the broker is behind — more
/// than `coalescingBacklog` events waiting, or events that waited for a pacing pause — is
/// each task's run of events cut to its latest. A lap (`FanOutLap`) begins with a round
/// taken by `takeRound`, and rounds taken by `takeJoining` join it on its way. After a
/// long lap under pressure the next waits for a pause (`FanOutPacing`), except when the
/// broker stops.
struct FanOutQueue {
    /// Past this many events waiting, a round is coalesced.
    let coalescingBacklog: Int
    /// When the last round ran, and so when the next may.
    private(set) var pacing: FanOutPacing
    /// Events committed and not yet fanned out, in change order.
    private(set) var waiting: [TaskEvent] = []
    /// Whether the waiting events were held back by a pause (so they go coalesced).
    private(set) var waitedForPacing = false

    init(coalescingBacklog: Int, pacing: FanOutPacing) {
        self.coalescingBacklog = coalescingBacklog
        self.pacing = pacing
    }

    /// Events replaced by a later one of their task so far (for the metrics).
    private(set) var coalescedCount = 0
    /// Events that joined the lap under way (`takeJoining`).
    private(set) var joinedThisLap = 0
    /// Events that joined the last lap: they poured in during it, as much as those still
    /// waiting at its end, so the pacing counts them too.
    private var joinedLastLap = 0

    /// Adds committed events, in change order.
    mutating func append(_ events: [TaskEvent]) { waiting += events }

    /// When the pause after the last lap ends, if the waiting events must wait for it.
    func pauseEnd(now: UInt64) -> UInt64? { pacing.pauseEnd(waiting: waiting.count + joinedLastLap, now: now) }

    /// Takes the events of the round to run at `now`, or nil when there is none: nothing
    /// waits, or a pause holds them (they then go coalesced). A stopping broker runs its
    /// last round through a pause.
    mutating func takeRound(now: UInt64, stopping: Bool) -> [TaskEvent]? {
        guard stopping || pauseEnd(now: now) == nil else {
            waitedForPacing = true
            return nil
        }
        guard !waiting.isEmpty else { return nil }
        let behind = waitedForPacing || waiting.count > coalescingBacklog
        let events = behind ? Self.coalesced(waiting) : waiting
        coalescedCount += waiting.count - events.count
        waiting = []
        waitedForPacing = false
        return events
    }

    /// Takes the waiting events to join the lap under way, so that the subscribers it has
    /// not reached yet get them in the same write as the rest, and those it has passed in
    /// the next lap; nil when nothing waits, or when they would make `pacing.minimumWaiting`
    /// or more joining one lap: updates pour in, and they wait for the next lap, as a whole
    /// (coalesced when the broker is behind), as the pacing would have them.
    mutating func takeJoining() -> [TaskEvent]? {
        guard !waiting.isEmpty, joinedThisLap + waiting.count < pacing.minimumWaiting else { return nil }
        joinedThisLap += waiting.count
        defer { waiting = [] }
        return waiting
    }

    /// Records a lap that began at `start` and ended at `end` (for the pacing).
    mutating func roundRan(from start: UInt64, to end: UInt64) {
        pacing.roundRan(from: start, to: end)
        joinedLastLap = joinedThisLap
        joinedThisLap = 0
    }

    /// Each task's latest event, in the order of those latest events. A task created in the
    /// run is still heard of by the streams that take its creation and not its latest event
    /// (a `new_roots` stream takes a top-level task's creation alone): only updated since,
    /// it is reported as created (its latest state); ended, stalled or flagged since, it
    /// keeps its latest event, and a stand-in for its creation goes right before it
    /// (`isCreationStandIn`), for those streams only. Deleted since, it is gone: nothing
    /// stands in for its creation.
    static func coalesced(_ events: [TaskEvent]) -> [TaskEvent] {
        var latestIndex: [String: Int] = [:]
        var created: Set<String> = []
        for (index, event) in events.enumerated() {
            latestIndex[event.taskID] = index
            if event.kind == .created { created.insert(event.taskID) }
        }
        var kept: [TaskEvent] = []
        kept.reserveCapacity(latestIndex.count)
        for (index, event) in events.enumerated() where latestIndex[event.taskID] == index {
            guard created.contains(event.taskID) else {
                kept.append(event)
                continue
            }
            switch event.kind {
            case .created, .deleted:
                kept.append(event)
            case .updated:
                kept.append(asCreation(event))
            default:
                // Only a top-level task's creation is taken apart from its other events.
                if event.parentID == nil { kept.append(asCreation(event)) }
                kept.append(event)
            }
        }
        return kept
    }

    /// The creation of `event`'s task as coalescing reports it: `task.created`, with the
    /// task's latest state and change number (a stream resuming from it has had that change).
    static func asCreation(_ event: TaskEvent) -> TaskEvent {
        var creation = event
        creation.kind = .created
        return creation
    }

    /// Whether the event at `index` of `events` stands in for a creation that coalescing
    /// folded into the next event: a creation with that event's task and change number
    /// (every other event has a change of its own).
    static func isCreationStandIn(_ events: [TaskEvent], at index: Int) -> Bool {
        let next = index + 1
        return events[index].kind == .created && next < events.count && events[next].kind != .created
            && events[next].changeNumber == events[index].changeNumber && events[next].taskID == events[index].taskID
    }
}

/// The rounds on their way to the subscribers, and how far the lap under way has gone. A
/// lap visits every subscriber once, in order, and hands each, in one write, every round
/// it has not had yet (`rounds(from:)`). A round taken while a lap is under way joins it:
/// the next subscriber visited gets it at once, rather than after the lap (at thousands of
/// sockets a lap takes longer than the time between updates), and the subscribers the lap
/// has passed get it in the next lap, which runs while any round is not yet everywhere.
/// Pure: times are monotonic nanoseconds given by the caller.
struct FanOutLap {
    /// Rounds not yet handed to every subscriber, oldest first; the first is numbered
    /// `firstRound`.
    private(set) var rounds: [RoundEvents] = []
    /// The number of the first of `rounds`.
    private(set) var firstRound = 0
    /// The position of the next subscriber to visit in the lap under way (`SubscriberList`
    /// keeps the subscribers before it apart from the others when one leaves).
    var position = 0
    /// Whether a lap is under way.
    private(set) var isUnderWay = false
    /// When the lap under way began.
    private(set) var start: UInt64 = 0
    /// Every subscriber has the rounds numbered below this once the lap under way ends.
    private var floor = 0

    /// The number the next round will have: a subscriber arriving now needs only the
    /// rounds from it on (its catch-up reads what came before).
    var nextRound: Int { firstRound + rounds.count }

    /// Begins a lap at the first subscriber, carrying `round` (if any) and every round the
    /// last lap did not hand to everyone.
    mutating func begin(with round: RoundEvents?, at now: UInt64) {
        if let round { rounds.append(round) }
        floor = nextRound
        position = 0
        isUnderWay = true
        start = now
    }

    /// Adds a round to the lap under way.
    mutating func join(_ round: RoundEvents) { rounds.append(round) }

    /// The rounds a subscriber whose next round is `next` has not had, oldest first.
    func rounds(from next: Int) -> ArraySlice<RoundEvents> {
        rounds[(max(next, firstRound) - firstRound)...]
    }

    /// Ends the lap under way, letting go of the rounds every subscriber has had; those
    /// that joined it stay, for the subscribers it passed before they joined.
    mutating func end() {
        rounds.removeFirst(floor - firstRound)
        firstRound = floor
        position = 0
        isUnderWay = false
    }
}

/// The events of one fan-out round, with what every subscriber looks at kept apart (so
/// matching does not copy events) and each frame encoded once, when first needed, and
/// shared by every subscriber that sends it.
final class RoundEvents {
    let events: [TaskEvent]
    /// The change number of each event.
    let changeNumbers: [Int64]
    /// The task of each event.
    let taskIDs: [String]
    /// The parent of each event's task.
    let parentIDs: [String?]
    /// The highest change number of the round (`.min` when empty).
    let highestChange: Int64
    /// The positions of the creations that stand in for one folded into the next event
    /// (`FanOutQueue.isCreationStandIn`): only a stream that takes the creation and not
    /// that event takes them.
    let creationStandIns: Set<Int>
    private var frames: [[UInt8]?]
    /// The frames with the task's parent hidden, of the events whose parent some stream's
    /// task prefix does not cover (a tree built across prefixes: rare).
    private var framesHidingParent: [Int: [UInt8]] = [:]

    init(_ events: [TaskEvent]) {
        self.events = events
        changeNumbers = events.map(\.changeNumber)
        taskIDs = events.map(\.taskID)
        parentIDs = events.map(\.parentID)
        highestChange = changeNumbers.max() ?? .min
        creationStandIns = Set(events.indices.filter { FanOutQueue.isCreationStandIn(events, at: $0) })
        frames = Array(repeating: nil, count: events.count)
    }

    /// The positions of the events.
    var indices: Range<Int> { events.indices }

    /// Whether the event at `index` belongs to a stream with `filter` (a creation stand-in:
    /// when the event after it does not).
    func matches(_ index: Int, _ filter: StreamFilter) -> Bool {
        let matches = filter.matches(taskID: taskIDs[index], parentID: parentIDs[index], kind: events[index].kind)
        guard matches, isCreationStandIn(index) else { return matches }
        return !self.matches(index + 1, filter)
    }

    /// Whether the event at `index` stands in for a creation folded into the next event.
    @inline(__always)
    func isCreationStandIn(_ index: Int) -> Bool { !creationStandIns.isEmpty && creationStandIns.contains(index) }

    /// The positions of the events a stream of every task sends: all but the creation
    /// stand-ins.
    private(set) lazy var wholeStreamIndices: [Int] = indices.filter { !isCreationStandIn($0) }

    /// The frames of `wholeStreamIndices`, in order: what a subscriber that sends what a
    /// stream of every task sends writes.
    private(set) lazy var wholeStreamFrames: [[UInt8]] = wholeStreamIndices.map { frame($0) }

    /// The tasks of `wholeStreamFrames`.
    private(set) lazy var wholeStreamTaskIDs: [String] =
        creationStandIns.isEmpty ? taskIDs : wholeStreamIndices.map { taskIDs[$0] }

    /// The frame of an event, with its id.
    func frame(_ index: Int) -> [UInt8] {
        if let frame = frames[index] { return frame }
        let frame = EventFrames.event(events[index], withID: true)
        frames[index] = frame
        return frame
    }

    /// Whether a stream with task prefix `prefix` sees the event at `index` with its
    /// task's parent hidden (a parent outside the prefix does not exist for it).
    func hidesParent(_ index: Int, from prefix: String?) -> Bool {
        guard let prefix, let parentID = parentIDs[index] else { return false }
        return !parentID.utf8.starts(with: prefix.utf8)
    }

    /// The frame of an event as a stream with task prefix `prefix` sees it: the shared
    /// frame, or the one with the parent hidden (the same for every prefix that does not
    /// cover the parent, so encoded once a round too).
    func frame(_ index: Int, for prefix: String?) -> [UInt8] {
        guard hidesParent(index, from: prefix) else { return frame(index) }
        if let frame = framesHidingParent[index] { return frame }
        let frame = EventFrames.event(events[index], withID: true, hidingParentOutside: prefix)
        framesHidingParent[index] = frame
        return frame
    }
}
