import CMicroHTTPD
import Foundation
import Lifecycle

/// Waits, on a thread of its own, for the sockets of direct streams whose send buffer was
/// full to take bytes again, and then has each stream send more (once per `watch`); and,
/// on every direct stream's socket, for its peer's hang-up (`EPOLLRDHUP`), which closes
/// the stream at once: a suspended connection would notice it only at its next write.
///
/// It also closes stalled streams: about four times per stall timeout it asks every
/// stream it watches whether bytes have waited that long without its socket taking any
/// (`ResponseStream.closeIfStalled`); a peer that stopped reading is cut off that way, as
/// suspended connections get no timeout from the library.
final class WritableWatcher: Service {
    /// A watched stream, held weakly: the stream owns the watch, not the other way round.
    private struct Watched {
        weak var stream: ResponseStream?
    }

    private let loop: EpollLoop
    /// Shared by the streams' threads (a watch armed or dropped) and this watcher's thread.
    private let watched = Locked<[Int32: Watched]>([:])
    /// How long bytes may wait without the socket taking any, in nanoseconds.
    let stallTimeoutNanoseconds: UInt64
    /// The monotonic clock, in nanoseconds (tests move their own).
    let now: @Sendable () -> UInt64
    /// When the watcher was made: the stall checks count from then.
    private let madeAt: UInt64

    init(stallTimeoutNanoseconds: UInt64 = 30_000_000_000,
         now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }) throws {
        loop = try EpollLoop()
        self.stallTimeoutNanoseconds = stallTimeoutNanoseconds
        self.now = now
        madeAt = now()
    }

    /// How often the thread looks for stalled streams: a quarter of the timeout, from
    /// 10 ms to 1 s.
    var stallCheckIntervalNanoseconds: UInt64 { min(max(stallTimeoutNanoseconds / 4, 10_000_000), 1_000_000_000) }

    func run() {
        let intervalMilliseconds = Int32(stallCheckIntervalNanoseconds / 1_000_000)
        // When this thread last looked for stalled streams: its own.
        var lastStallCheck = madeAt
        loop.run(timeout: { intervalMilliseconds }, handleEvents: { fd, events in
            let stream = watched.withLock { $0[fd]?.stream }
            stream?.socketIsReady(events)
        }, tick: {
            let time = now()
            guard time &- lastStallCheck >= stallCheckIntervalNanoseconds else { return }
            lastStallCheck = time
            closeStalledStreams(now: time)
        })
    }

    func requestStop() { loop.requestStop() }

    /// Tells `stream` (`socketIsReady`, once: the stream arms the watch again) when its
    /// peer hangs up on `fd` or `fd` fails — and, when `writable`, when `fd` can be written.
    func watch(_ fd: Int32, _ stream: ResponseStream, writable: Bool) {
        watched.withLock { watched in
            let isNew = watched.updateValue(Watched(stream: stream), forKey: fd) == nil
            let events = EPOLLRDHUP.rawValue | EPOLLONESHOT.rawValue | (writable ? EPOLLOUT.rawValue : 0)
            if !isNew || !loop.watch(fd, events: events, operation: EPOLL_CTL_ADD) {
                loop.watch(fd, events: events, operation: EPOLL_CTL_MOD)
            }
        }
    }

    /// Stops watching `fd` (before it is closed).
    func forget(_ fd: Int32) {
        watched.withLock { watched in
            if watched.removeValue(forKey: fd) != nil { loop.forget(fd) }
        }
    }

    /// Closes every watched stream whose bytes have waited the stall timeout at `now`
    /// without its socket taking any; returns how many it closed.
    @discardableResult
    func closeStalledStreams(now: UInt64) -> Int {
        // Streams are asked outside the lock: a stream calls `watch` under its own.
        let streams = watched.withLock { $0.values.compactMap(\.stream) }
        return streams.filter { $0.closeIfStalled(now: now, timeout: stallTimeoutNanoseconds) }.count
    }
}
