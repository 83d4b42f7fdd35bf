import HeadwayCore

/// The events committed and not yet fanned out, and the rules of when a fan-out round
/// runs and what it carries. Pure: times are monotonic nanoseconds given by the caller.
///
/// A round carries every waiting event in order. Only when the broker is behind — more
/// than `coalescingBacklog` events waiting, or events that waited for a pacing pause — is
/// each task's run of events cut to its latest. After a long round under pressure the
/// next waits for a pause (`FanOutPacing`), except when the broker stops.
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

    /// Adds committed events, in change order.
    mutating func append(_ events: [TaskEvent]) { waiting += events }

    /// When the pause after the last round ends, if the waiting events must wait for it.
    func pauseEnd(now: UInt64) -> UInt64? { pacing.pauseEnd(waiting: waiting.count, now: now) }

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

    /// Records a round that began at `start` and ended at `end` (for the pacing).
    mutating func roundRan(from start: UInt64, to end: UInt64) { pacing.roundRan(from: start, to: end) }

    /// Each task's latest event, in the order of those latest events.
    static func coalesced(_ events: [TaskEvent]) -> [TaskEvent] {
        var latestIndex: [String: Int] = [:]
        for (index, event) in events.enumerated() { latestIndex[event.taskID] = index }
        return events.enumerated().filter { latestIndex[$0.element.taskID] == $0.offset }.map(\.element)
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
        frames = Array(repeating: nil, count: events.count)
    }

    /// The positions of the events.
    var indices: Range<Int> { events.indices }

    /// Whether the event at `index` belongs to a stream with `filter`.
    func matches(_ index: Int, _ filter: StreamFilter) -> Bool {
        filter.matches(taskID: taskIDs[index], parentID: parentIDs[index], kind: events[index].kind)
    }

    /// Every event's frame, in order: what a subscriber that sends the whole round writes.
    private(set) lazy var allFrames: [[UInt8]] = indices.map { frame($0) }

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
