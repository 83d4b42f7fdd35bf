import CMicroHTTPD
import Foundation
import Synchronization

#if !os(Linux)
#error("Headway runs on Linux: its HTTP layer waits on epoll and eventfd.")
#endif

/// An epoll set of its own and the loop that waits on it: for each ready descriptor the
/// loop calls its handler, after each wait its tick, until `requestStop()` (an eventfd in
/// the set wakes it). Descriptors are added and changed with `watch` from any thread
/// (epoll is thread-safe); the set is closed when the loop is released.
final class EpollLoop: Sendable {
    private let epollFD: Int32
    private let wakeFD: Int32
    private let stopRequested = Atomic<Bool>(false)

    init() throws {
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epollFD >= 0, wakeFD >= 0 else {
            if epollFD >= 0 { close(epollFD) }
            if wakeFD >= 0 { close(wakeFD) }
            throw HTTPServerError(description: "cannot create epoll: errno \(errno)")
        }
        _ = watch(wakeFD, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
    }

    deinit {
        close(epollFD)
        close(wakeFD)
    }

    /// Adds (`EPOLL_CTL_ADD`), changes or re-arms (`EPOLL_CTL_MOD`) `fd`; false on failure.
    @discardableResult
    func watch(_ fd: Int32, events: UInt32, operation: Int32) -> Bool {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        return epoll_ctl(epollFD, operation, fd, &event) == 0
    }

    /// Removes `fd` from the set.
    func forget(_ fd: Int32) { _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) }

    /// Runs the loop on the calling thread until a stop is requested: waits up to
    /// `timeout()` milliseconds (-1: until something is ready), hands each ready descriptor
    /// to `handle`, then calls `tick`. The closures run on this thread only.
    func run(timeout: () -> Int32, handle: (Int32) -> Void, tick: () -> Void = {}) {
        run(timeout: timeout, handleEvents: { fd, _ in handle(fd) }, tick: tick)
    }

    /// `run`, handing `handleEvents` each ready descriptor with its ready events
    /// (`EPOLLIN`, `EPOLLRDHUP`, …).
    func run(timeout: () -> Int32, handleEvents: (Int32, UInt32) -> Void, tick: () -> Void = {}) {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let count = epoll_wait(epollFD, &events, Int32(events.count), timeout())
            for event in events.prefix(max(0, Int(count))) {
                if event.data.fd == wakeFD {
                    if stopRequested.load(ordering: .acquiring) { return }
                    var value: UInt64 = 0
                    _ = read(wakeFD, &value, 8)
                    continue
                }
                handleEvents(event.data.fd, event.events)
            }
            tick()
        }
    }

    /// Makes `run` call its tick soon (after the handlers of its current wait, or at once
    /// if it is waiting), whatever its timeout.
    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Makes `run` return after its current handler (or at once, if it has not begun);
    /// later runs return at once too.
    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        wake()
    }
}
