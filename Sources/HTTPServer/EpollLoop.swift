import CMicroHTTPD
import Foundation

#if !os(Linux)
#error("Headway runs on Linux: its HTTP layer waits on epoll and eventfd.")
#endif

/// A thread waiting on an epoll set of its own: for each ready descriptor it calls the
/// handler, after each wait the tick, until `stop()` (an eventfd in the set wakes it).
/// Descriptors are added and changed with `watch` from any thread (epoll is thread-safe).
final class EpollLoop: @unchecked Sendable {
    private let epollFD: Int32
    private let wakeFD: Int32
    private let finished = DispatchSemaphore(value: 0)

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

    /// Starts the thread: waits up to `timeout()` milliseconds (-1: until something is
    /// ready), hands each ready descriptor to `handle`, then calls `tick`.
    /// The closures run on the loop's thread only.
    func start(threadName: String, timeout: @escaping @Sendable () -> Int32, handle: @escaping @Sendable (Int32) -> Void,
               tick: @escaping @Sendable () -> Void = {}) {
        let thread = Thread { [self] in
            headway_name_thread(threadName)
            var events = [epoll_event](repeating: epoll_event(), count: 64)
            running: while true {
                let count = epoll_wait(epollFD, &events, Int32(events.count), timeout())
                for event in events.prefix(max(0, Int(count))) {
                    if event.data.fd == wakeFD { break running }
                    handle(event.data.fd)
                }
                tick()
            }
            finished.signal()
        }
        thread.start()
    }

    /// Ends the thread (after its current handler) and closes the set; the caller then
    /// owns what was in it.
    func stop() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
        finished.wait()
        close(epollFD)
        close(wakeFD)
    }
}
