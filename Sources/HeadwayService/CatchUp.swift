import HeadwayCore

/// What the catch-up read from the database for a new subscriber.
struct CatchUp: Sendable {
    /// Frames to send first (`retry:`, the snapshot or the replayed changes).
    var frames: [[UInt8]]
    /// The last change the catch-up reflects: live events up to it are already covered.
    var highWater: Int64
    /// The `min_duration` state after the catch-up (tasks held back).
    var holdBack: HoldBack
    /// What it costs the catch-up budget, once however many subscribers it is sent to
    /// (nil: not counted).
    var charge: CatchUpCharge?
}

/// The one rule that joins a subscriber's catch-up and its live events. The catch-up is
/// read from one database snapshot while live events already flow; it reflects every
/// change up to its high water, so a live event at or below it is not sent again, and
/// the live events that arrived while it was read follow it, cut to each task's latest
/// when there are more than the broker sends one by one (as in a round that fell behind).
struct CatchUpMerge: Equatable {
    /// The last change the catch-up reflects (`.min` before any catch-up).
    let highWater: Int64

    /// Whether the live event with `changeNumber` is news after the catch-up.
    @inline(__always)
    func isNew(_ changeNumber: Int64) -> Bool { changeNumber > highWater }

    /// The live events that arrived during the catch-up, as they are to follow it: those
    /// it reflects dropped, and past `coalescingBacklog` coalesced to each task's latest.
    func eventsAfterCatchUp(_ arrived: [TaskEvent], coalescingBacklog: Int) -> [TaskEvent] {
        let news = arrived.filter { isNew($0.changeNumber) }
        return news.count > coalescingBacklog ? FanOutQueue.coalesced(news) : news
    }
}
