import HeadwayCore

/// What a new subscriber is sent before its live events.
package struct CatchUp: Sendable {
    /// Frames to send first (`retry:`, the snapshot or the replayed changes).
    var frames: [[UInt8]]
    /// The last change the catch-up reflects: live events up to it are already covered.
    var highWater: Int64
    /// The `min_duration` state after the catch-up (tasks held back).
    var holdBack: HoldBack

    package init(frames: [[UInt8]], highWater: Int64, holdBack: HoldBack) {
        self.frames = frames
        self.highWater = highWater
        self.holdBack = holdBack
    }
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

/// A catch-up as read once for every stream whose filter selects the same tasks, before
/// any stream's `min_duration`: that is a display filter, applied per stream (`view`).
/// The items' bytes — a snapshot's tasks as JSON, a replay's frames — are packed into
/// blocks that the streams' writes reference, never copy; a stream that holds back or
/// drops an item of a block is sent a copy of that block without it, and shares the rest.
/// The first blocks are small and the later ones large (64 KiB doubling to 1 MiB): the
/// items a `min_duration` holds back are the youngest tasks, which a snapshot lists first,
/// so a copy is small, and a stream of a large catch-up references few blocks.
package final class CatchUpBase: Sendable {
    /// A snapshot also shows tasks finished this recently (and is valid until the first of
    /// them leaves that window).
    package static let recentlyFinishedMilliseconds: Int64 = 60_000

    /// One event of the catch-up, its bytes in a block.
    struct Item: Sendable {
        /// The event, without its data (its bytes are in the block).
        let event: TaskEvent
        let block: Int
        /// Where the item is in its block (a snapshot's item: the task's JSON, without the
        /// separator before it).
        let range: Range<Int>
        /// Where the event's data (the task's JSON) is in the block.
        let dataRange: Range<Int>
    }

    /// The bytes before the items (a snapshot's `id:`, `event:` and the start of its data).
    let head: [UInt8]
    /// Between two items (a snapshot's comma).
    let separator: [UInt8]
    /// After the items (the end of a snapshot's data).
    let tail: [UInt8]
    let blocks: [[UInt8]]
    let items: [Item]
    /// The index of each block's first item.
    let blockStarts: [Int]
    /// The last change it reflects.
    package let highWater: Int64
    /// When it stops being what a fresh read would give (its oldest finished task leaves
    /// a snapshot's last minute), if ever.
    package let validUntil: EpochMilliseconds?
    /// What it costs in memory, as the budget counts it.
    package let bytes: Int

    fileprivate init(builder: Builder) {
        head = builder.head
        separator = builder.separator
        tail = builder.tail
        blocks = builder.blocks
        items = builder.items
        blockStarts = builder.blockStarts
        highWater = builder.highWater
        validUntil = builder.validUntil
        bytes = builder.bytes
    }

    /// The most bytes of items in block number `index` (64 KiB doubling to 1 MiB).
    static func blockLimit(_ index: Int) -> Int { 1 << min(16 + index, 20) }

    /// What one stream is sent of this catch-up, with `holdBack` (its `min_duration`) at
    /// `now`: the base's blocks where it sends every item of a block; copies of the others
    /// without the items it holds back or drops (`holdBack` keeps the held ones). The
    /// copies' bytes are asked of `reserve` before they are made; nil when it refuses.
    package func view(holdBack: inout HoldBack, now: EpochMilliseconds,
                      reserve: (Int) -> Bool) -> (frames: [[UInt8]], ownBytes: Int)? {
        guard holdBack.filter.minDurationMilliseconds > 0 else {
            return (([head] + blocks + [tail]).filter { !$0.isEmpty }, 0)
        }
        var shown = [Bool](repeating: false, count: items.count)
        for (index, item) in items.enumerated() {
            var event = item.event
            if holdBack.wouldHold(event, now: now) {
                event.data = String(decoding: blocks[item.block][item.dataRange], as: UTF8.self)
            }
            if case .send = holdBack.offer(event, now: now) { shown[index] = true }
        }
        // Which blocks are copied, and their size, before any is made.
        var copies: [Int: Int] = [:]
        var emitted = false
        for block in blocks.indices {
            let members = itemRange(ofBlock: block)
            let showsAll = shown[members].allSatisfy { $0 }
            // A block after the first begins with a separator, which only follows an item.
            if !showsAll || (block > 0 && !emitted && !separator.isEmpty) {
                copies[block] = members.filter { shown[$0] }.enumerated().reduce(0) { size, pair in
                    size + items[pair.element].range.count + (emitted || pair.offset > 0 ? separator.count : 0)
                }
            }
            emitted = emitted || members.contains { shown[$0] }
        }
        let ownBytes = copies.values.reduce(0, +)
        guard ownBytes == 0 || reserve(ownBytes) else { return nil }
        var frames = [head]
        emitted = false
        for block in blocks.indices {
            let members = itemRange(ofBlock: block)
            guard let size = copies[block] else {
                frames.append(blocks[block])
                emitted = emitted || !members.isEmpty
                continue
            }
            var copy: [UInt8] = []
            copy.reserveCapacity(size)
            for index in members where shown[index] {
                if emitted { copy += separator }
                copy += blocks[block][items[index].range]
                emitted = true
            }
            if !copy.isEmpty { frames.append(copy) }
        }
        frames.append(tail)
        return (frames.filter { !$0.isEmpty }, ownBytes)
    }

    /// The indices of the items of block number `block`.
    private func itemRange(ofBlock block: Int) -> Range<Int> {
        blockStarts[block]..<(block + 1 < blockStarts.count ? blockStarts[block + 1] : items.count)
    }

    /// Packs a catch-up's items into blocks as it is read, each item's bytes reserved
    /// before they are added.
    package struct Builder {
        fileprivate let head: [UInt8]
        fileprivate let separator: [UInt8]
        fileprivate let tail: [UInt8]
        fileprivate let isSnapshot: Bool
        fileprivate let highWater: Int64
        fileprivate var blocks: [[UInt8]] = []
        fileprivate var items: [Item] = []
        fileprivate var blockStarts: [Int] = []
        fileprivate var validUntil: EpochMilliseconds?
        /// Bytes reserved so far: the blocks, the items' records, head and tail.
        fileprivate private(set) var bytes: Int
        private var current: [UInt8] = []

        /// A snapshot at change `changeNumber`: one event whose data lists the tasks.
        package static func snapshot(changeNumber: Int64) -> Builder {
            Builder(head: Array("id: \(changeNumber)\nevent: snapshot\ndata: {\"tasks\":[".utf8), separator: [44],
                    tail: Array("]}\n\n".utf8), isSnapshot: true, highWater: changeNumber)
        }

        /// A replay of changes, each its own frame with its id, up to change `highWater`.
        package static func changes(through highWater: Int64) -> Builder {
            Builder(head: [], separator: [], tail: [], isSnapshot: false, highWater: highWater)
        }

        private init(head: [UInt8], separator: [UInt8], tail: [UInt8], isSnapshot: Bool, highWater: Int64) {
            self.head = head
            self.separator = separator
            self.tail = tail
            self.isSnapshot = isSnapshot
            self.highWater = highWater
            bytes = head.count + tail.count
        }

        /// What the head and tail cost, to reserve before the first item.
        package var fixedBytes: Int { head.count + tail.count }

        /// Adds `event` (a snapshot's task, or a replayed change), after reserving what it
        /// costs; false when `reserve` refuses (the catch-up is then given up).
        package mutating func append(_ event: TaskEvent, reserve: (Int) -> Bool) -> Bool {
            // A task's JSON is one line (the writer escapes every control character), so
            // a replayed change's frame is its fields, one `data:` line and a blank line.
            let frame = isSnapshot ? [] : EventFrames.event(event, withID: true)
            let dataCount = event.data.utf8.count
            let itemCount = isSnapshot ? dataCount : frame.count
            let isFirst = blocks.isEmpty && current.isEmpty
            let leading = isSnapshot && !isFirst ? separator.count : 0
            let record = MemoryLayout<Item>.stride + event.taskID.utf8.count + (event.parentID?.utf8.count ?? 0)
            guard reserve(leading + itemCount + record) else { return false }
            bytes += leading + itemCount + record
            if isFirst || current.count + leading + itemCount > CatchUpBase.blockLimit(blocks.count) && !current.isEmpty {
                closeBlock()
                current.reserveCapacity(max(CatchUpBase.blockLimit(blocks.count), leading + itemCount))
                blockStarts.append(items.count)
            }
            current += separator.prefix(leading)
            let start = current.count
            if isSnapshot { current += event.data.utf8 } else { current += frame }
            let dataStart = isSnapshot ? start : current.count - 2 - dataCount
            var bare = event
            bare.data = ""
            items.append(Item(event: bare, block: blocks.count, range: start..<current.count,
                              dataRange: dataStart..<(dataStart + dataCount)))
            if isSnapshot, let finishedAt = event.finishedAt {
                validUntil = min(validUntil ?? .max, finishedAt + CatchUpBase.recentlyFinishedMilliseconds)
            }
            return true
        }

        /// The catch-up built.
        package mutating func finish() -> CatchUpBase {
            closeBlock()
            return CatchUpBase(builder: self)
        }

        /// Ends the block being filled (copied to its size when much of its room is unused:
        /// the bytes counted are the bytes held).
        private mutating func closeBlock() {
            guard !current.isEmpty else { return }
            if current.capacity - current.count > current.count / 8 {
                let count = current.count
                current = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                    _ = buffer.initialize(from: current)
                    initialized = count
                }
            }
            blocks.append(current)
            current = []
        }
    }
}
