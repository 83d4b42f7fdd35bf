import Dispatch
import HeadwayCore
import Lifecycle
@testable import EventStream

/// An event sink without a socket: it records every write, and its peer reads nothing
/// until told (`fill`, `peerRead`), so a test decides when the stream is full.
final class FakeEventSink: EventSink {
    private struct State {
        var writes: [[[UInt8]]] = []
        var buffered = 0
        /// Of `buffered`, bytes written shared.
        var sharedBuffered = 0
        var isOpen = true
        var stalled = false
        var aborted = false
        var finished = false
        /// Whether written bytes stay buffered (the peer does not read).
        var peerStalled = false
        var closeHandlers: [@Sendable () -> Void] = []
        var drainHandler: (@Sendable () -> Void)?
        /// Whether the next write waits for `letHeldWriteGo`.
        var holdsNextWrite = false
    }

    private let state = Locked(State())
    /// Signalled once per accepted write.
    private let written = DispatchSemaphore(value: 0)

    /// Signalled when a held write has begun, and by the test to let it go.
    private let writeHeld = DispatchSemaphore(value: 0)
    private let heldWriteMayGo = DispatchSemaphore(value: 0)

    /// Whether each accepted write was shared.
    private let sharedFlags = Locked<[Bool]>([])

    /// Every accepted write, each as its pieces.
    var writes: [[[UInt8]]] { state.withLock { $0.writes } }

    /// Every accepted write, its pieces joined as text.
    var writtenTexts: [String] { writes.map { String(decoding: $0.joined(), as: UTF8.self) } }

    /// Whether each accepted write was shared (a catch-up), in order.
    var sharedWrites: [Bool] { sharedFlags.withLock { $0 } }

    /// Whether the stream was closed at once.
    var wasAborted: Bool { state.withLock { $0.aborted } }

    /// Whether the stream was ended cleanly.
    var wasFinished: Bool { state.withLock { $0.finished } }

    /// From now on, the peer reads nothing and `bytes` are already waiting.
    func fill(_ bytes: Int) {
        state.withLock {
            $0.peerStalled = true
            $0.buffered = bytes
        }
    }

    /// The peer reads everything waiting and keeps reading; the drain handler runs.
    func peerRead() {
        let drained = state.withLock { state in
            state.peerStalled = false
            state.buffered = 0
            state.sharedBuffered = 0
            return state.drainHandler
        }
        drained?()
    }

    /// The peer goes away: the sink closes and its close handlers run.
    func close() {
        let handlers = state.withLock { state in
            state.isOpen = false
            defer { state.closeHandlers = [] }
            return state.closeHandlers
        }
        handlers.forEach { $0() }
    }

    /// The peer took nothing for the stall timeout: the stream is closed and its close
    /// handlers run, as the HTTP layer does.
    func stall() {
        state.withLock { $0.stalled = true }
        close()
    }

    /// Makes the next write wait, in the writing thread, until `letHeldWriteGo`.
    func holdNextWrite() { state.withLock { $0.holdsNextWrite = true } }

    /// Waits until a held write has begun (false if none does within 10 s).
    func waitForHeldWrite() -> Bool { writeHeld.wait(timeout: .now() + 10) == .success }

    /// Lets the held write go on.
    func letHeldWriteGo() { heldWriteMayGo.signal() }

    /// Waits until `count` more writes have been accepted; false if they do not come
    /// within `seconds` (a broken broker, not a slow one: the writes need no time).
    func waitForWrites(_ count: Int, seconds: Double = 10) -> Bool {
        (0..<count).allSatisfy { _ in written.wait(timeout: .now() + seconds) == .success }
    }

    // MARK: - EventSink

    func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int) -> Bool {
        append(pieces, unlessMoreThan: limit, shared: false)
    }

    func writeShared(contentsOf pieces: [[UInt8]]) -> Bool { append(pieces, unlessMoreThan: .max, shared: true) }

    private func append(_ pieces: [[UInt8]], unlessMoreThan limit: Int, shared: Bool) -> Bool {
        let held = state.withLock { state in
            defer { state.holdsNextWrite = false }
            return state.holdsNextWrite
        }
        if held {
            writeHeld.signal()
            _ = heldWriteMayGo.wait(timeout: .now() + 10)
        }
        let accepted = state.withLock { state in
            guard state.isOpen, state.buffered <= limit else { return false }
            state.writes.append(pieces)
            sharedFlags.withLock { $0.append(shared) }
            if state.peerStalled {
                let count = pieces.reduce(0) { $0 + $1.count }
                state.buffered += count
                if shared { state.sharedBuffered += count }
            }
            return true
        }
        if accepted { written.signal() }
        return accepted
    }

    var bufferedBytes: Int { state.withLock { $0.buffered } }

    var ownedBytes: Int { state.withLock { $0.buffered - $0.sharedBuffered } }

    var sharedBytes: Int { state.withLock { $0.sharedBuffered } }

    var hasStalled: Bool { state.withLock { $0.stalled } }

    var isOpen: Bool { state.withLock { $0.isOpen } }

    func abort() {
        state.withLock {
            $0.isOpen = false
            $0.aborted = true
        }
    }

    func finish() {
        state.withLock {
            $0.isOpen = false
            $0.finished = true
        }
    }

    func onClose(_ handler: @escaping @Sendable () -> Void) { state.withLock { $0.closeHandlers.append(handler) } }

    func onDrain(atOrBelow lowWaterBytes: Int, _ handler: @escaping @Sendable () -> Void) {
        state.withLock { $0.drainHandler = handler }
    }
}

/// Events for tests of the event stream's parts.
enum TestEvents {
    /// A change of `task` numbered `seq`; its data names both.
    static func event(_ seq: Int64, _ task: String = "t", parent: String? = nil, kind: TaskEventKind = .updated,
                      createdAt: EpochMilliseconds = 0) -> TaskEvent {
        TaskEvent(changeNumber: seq, kind: kind, taskID: task, parentID: parent, createdAt: createdAt, finishedAt: nil,
                  data: #"{"id":"\#(task)","seq":\#(seq)}"#)
    }

    /// The frame of `event` as a subscriber receives it live (with its id).
    static func frame(_ event: TaskEvent, withID: Bool = true) -> String {
        String(decoding: EventFrames.event(event, withID: withID), as: UTF8.self)
    }

    /// The frame of `event` ending a `min_duration` release at `time` on a stream handed
    /// every change up to `change` (its id `LastEventID.release`).
    static func releaseFrame(_ event: TaskEvent, handedThrough change: Int64, at time: EpochMilliseconds) -> String {
        String(decoding: EventFrames.event(event, id: LastEventID.release(change: change, at: time)), as: UTF8.self)
    }
}
