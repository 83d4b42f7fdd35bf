import CMicroHTTPD
import Foundation

/// Waits, on a thread of its own, for sockets whose send buffer was full to take bytes
/// again, and then calls the action given for each (once per `watch`).
final class WritableWatcher: @unchecked Sendable {
    private let epollFD: Int32
    private let wakeFD: Int32
    private let lock = NSLock()
    private var actions: [Int32: @Sendable () -> Void] = [:]
    private let finished = DispatchSemaphore(value: 0)

    init() throws {
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epollFD >= 0, wakeFD >= 0 else { throw HTTPServerError(description: "cannot create epoll: errno \(errno)") }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
        let thread = Thread { [self] in
            headway_name_thread("headway-flush")
            run()
        }
        thread.name = "headway.flush"
        thread.start()
    }

    /// Calls `action` once `fd` can be written (or has failed).
    func watch(_ fd: Int32, action: @escaping @Sendable () -> Void) {
        lock.withLock {
            let isNew = actions.updateValue(action, forKey: fd) == nil
            var event = epoll_event()
            event.events = EPOLLOUT.rawValue | EPOLLONESHOT.rawValue
            event.data.fd = fd
            if !isNew || epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
                _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
            }
        }
    }

    /// Stops watching `fd` (before it is closed).
    func forget(_ fd: Int32) {
        lock.withLock {
            if actions.removeValue(forKey: fd) != nil { _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) }
        }
    }

    /// Stops the thread.
    func stop() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
        finished.wait()
        close(epollFD)
        close(wakeFD)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        running: while true {
            let count = epoll_wait(epollFD, &events, Int32(events.count), -1)
            for event in events.prefix(max(0, Int(count))) {
                if event.data.fd == wakeFD { break running }
                let action = lock.withLock { actions[event.data.fd] }
                action?()
            }
        }
        finished.signal()
    }
}
