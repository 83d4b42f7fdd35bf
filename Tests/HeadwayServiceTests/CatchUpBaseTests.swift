import HTTPServer
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import EventStream

/// A catch-up read once and seen through each stream's `min_duration`: every stream gets
/// exactly the bytes a read of its own would give, referencing the shared blocks for all
/// but the blocks it must leave something out of.
@Suite struct CatchUpBaseTests {
    let now: EpochMilliseconds = 10_000_000

    /// Task `number`, created `age` ms before `now`, finished after `lived` ms if given,
    /// with `padding` bytes of metadata.
    private func task(_ number: Int, age: Int64, lived: Int64? = nil, padding: Int = 100) -> TaskEvent {
        let createdAt = now - age
        let data = #"{"id":"t\#(number)","metadata":"\#(String(repeating: "m", count: padding))"}"#
        return TaskEvent(changeNumber: Int64(number + 1), kind: lived == nil ? .updated : .finished, taskID: "t\(number)",
                         parentID: nil, createdAt: createdAt, finishedAt: lived.map { createdAt + $0 }, data: data)
    }

    private func snapshotBase(_ events: [TaskEvent], reserve: (Int) -> Bool = { _ in true }) -> CatchUpBase? {
        var builder = CatchUpBase.Builder.snapshot(changeNumber: 77)
        guard reserve(builder.fixedBytes) else { return nil }
        for event in events where !builder.append(event, reserve: reserve) { return nil }
        return builder.finish()
    }

    /// What a read of its own gave a stream with `minDuration` before catch-ups were
    /// shared: its hold-back applied to each task, the shown ones in one snapshot frame.
    private func ownSnapshot(_ events: [TaskEvent], minDuration: Int64) -> (bytes: [UInt8], held: Set<String>) {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: minDuration))
        let shown = events.filter { if case .send = holdBack.offer($0, now: now) { true } else { false } }
        let frame = try! ServerSentEvent(id: "77", event: "snapshot", data: #"{"tasks":["# + shown.map(\.data).joined(separator: ",") + "]}")
        return (frame.bytes, holdBack.heldTaskIDs)
    }

    private func view(_ base: CatchUpBase, minDuration: Int64) -> (bytes: [UInt8], frames: [[UInt8]], ownBytes: Int, holdBack: HoldBack) {
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: minDuration))
        let view = base.view(holdBack: &holdBack, now: now, reserve: { _ in true })!
        return (view.frames.flatMap { $0 }, view.frames, view.ownBytes, holdBack)
    }

    private func isShared(_ frame: [UInt8], with blocks: [[UInt8]]) -> Bool {
        frame.withUnsafeBufferPointer { mine in
            blocks.contains { block in block.withUnsafeBufferPointer { $0.baseAddress == mine.baseAddress } }
        }
    }

    @Test func withoutMinDurationAStreamIsSentTheBaseItselfAsASnapshotFrame() throws {
        let events = (0..<2000).map { task($0, age: 600_000, padding: 300) }
        let base = try #require(snapshotBase(events))
        #expect(base.blocks.count > 3, "several blocks: \(base.blocks.map(\.count))")
        #expect(base.blocks.dropLast().allSatisfy { $0.count <= 1 << 20 })
        let seen = view(base, minDuration: 0)
        #expect(seen.bytes == ownSnapshot(events, minDuration: 0).bytes)
        #expect(seen.ownBytes == 0)
        #expect(seen.frames.dropFirst().dropLast().allSatisfy { isShared($0, with: base.blocks) }, "every block referenced")
        #expect(view(base, minDuration: 1).ownBytes == 0, "a minimum that holds nothing back shares it all too")
    }

    /// The youngest tasks come first in a snapshot: a stream that holds them back copies
    /// only the first, small block, without them, and the held ones keep their data.
    @Test func aStreamThatHoldsBackYoungTasksCopiesOnlyTheirBlock() throws {
        let events = (0..<5).map { task($0, age: 500) } + (5..<2000).map { task($0, age: 600_000, padding: 300) }
        let base = try #require(snapshotBase(events))
        let seen = view(base, minDuration: 2000)
        let expected = ownSnapshot(events, minDuration: 2000)
        #expect(seen.bytes == expected.bytes)
        #expect(seen.holdBack.heldTaskIDs == expected.held)
        #expect(expected.held.count == 5)
        #expect(seen.ownBytes > 0 && seen.ownBytes <= CatchUpBase.blockLimit(0))
        #expect(seen.frames.filter { isShared($0, with: base.blocks) }.count == base.blocks.count - 1)
        let released = seen.holdBack
        var later = released
        let due = later.release(now: now + 2000)
        #expect(Set(due.map(\.data)) == Set(events.prefix(5).map(\.data)), "held with the whole task")
    }

    /// Whatever a `min_duration` leaves out, wherever it lies (short finished tasks
    /// anywhere, young ones, every one, none), the stream's bytes are exactly those of a
    /// snapshot of its own, valid JSON with no stray separator.
    @Test func everyViewIsTheSnapshotAReadOfItsOwnWouldGive() throws {
        var random = SeededGenerator(seed: 45)
        for round in 0..<40 {
            let count = Int.random(in: 0...600, using: &random)
            let events = (0..<count).map { number -> TaskEvent in
                let age = Int64.random(in: 0...20_000, using: &random)
                let lived = Bool.random(using: &random) ? Int64.random(in: 0...age, using: &random) : nil
                return task(number, age: age, lived: lived, padding: Int.random(in: 0...3000, using: &random))
            }
            let base = try #require(snapshotBase(events))
            for minDuration: Int64 in [0, 1, 500, 5000, 15_000, 30_000] {
                let seen = view(base, minDuration: minDuration)
                let expected = ownSnapshot(events, minDuration: minDuration)
                #expect(seen.bytes == expected.bytes, "round \(round), min_duration \(minDuration) ms")
                #expect(seen.holdBack.heldTaskIDs == expected.held)
            }
        }
    }

    @Test func aReplaysFramesAreSharedAndFilteredFrameByFrame() throws {
        let events = (0..<300).map { task($0, age: $0 % 3 == 0 ? 100 : 600_000, padding: 500) }
        var builder = CatchUpBase.Builder.changes(through: 400)
        for event in events {
            let added = builder.append(event, reserve: { _ in true })
            #expect(added)
        }
        let base = builder.finish()
        #expect(base.highWater == 400)
        let all = view(base, minDuration: 0)
        #expect(all.bytes == events.flatMap { EventFrames.event($0, withID: true) })
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 1000))
        let expected = events.compactMap { event -> [UInt8]? in
            guard case .send = holdBack.offer(event, now: now) else { return nil }
            return EventFrames.event(event, withID: true)
        }.flatMap { $0 }
        let seen = view(base, minDuration: 1000)
        #expect(seen.bytes == expected)
        #expect(seen.holdBack.heldTaskIDs == holdBack.heldTaskIDs)
    }

    /// Each item's bytes are reserved before they are added; the base costs exactly what
    /// was reserved, and a refusal gives the build up.
    @Test func aBuildReservesEveryByteFirstAndStopsAtARefusal() throws {
        let events = (0..<100).map { task($0, age: 600_000, padding: 1000) }
        var reserved = 0
        let base = try #require(snapshotBase(events) { bytes in
            reserved += bytes
            return true
        })
        #expect(base.bytes == reserved)
        #expect(base.bytes >= base.blocks.reduce(0) { $0 + $1.count } + base.head.count + base.tail.count)
        var allowed = 50_000
        #expect(snapshotBase(events) { bytes in
            allowed -= bytes
            return allowed >= 0
        } == nil)

        var copied = 0
        let young = (0..<100).map { task($0, age: 10, padding: 1000) }
        let youngBase = try #require(snapshotBase(young))
        var holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 1000))
        #expect(youngBase.view(holdBack: &holdBack, now: now, reserve: { copied = $0; return false }) != nil)
        #expect(copied == 0, "everything held back: nothing to copy, so nothing asked")
        let mixed = try #require(snapshotBase([task(0, age: 10)] + events))
        holdBack = HoldBack(filter: StreamFilter(minDurationMilliseconds: 1000))
        #expect(mixed.view(holdBack: &holdBack, now: now, reserve: { copied = $0; return false }) == nil)
        #expect(copied > 0, "the copy of the first block was asked for, and refused")
    }
}
