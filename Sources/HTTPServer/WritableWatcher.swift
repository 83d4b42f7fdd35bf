import CMicroHTTPD
import Foundation

/// Waits, on a thread of its own, for sockets whose send buffer was full to take bytes
/// again, and then calls the action given for each (once per `watch`).
final class WritableWatcher: @unchecked Sendable {
    private let loop: EpollLoop
    private let lock = NSLock()
    private var actions: [Int32: @Sendable () -> Void] = [:]

    init() throws {
        loop = try EpollLoop()
        loop.start(threadName: "headway-flush", timeout: { -1 }, handle: { [self] fd in
            let action = lock.withLock { actions[fd] }
            action?()
        })
    }

    /// Calls `action` once `fd` can be written (or has failed).
    func watch(_ fd: Int32, action: @escaping @Sendable () -> Void) {
        lock.withLock {
            let isNew = actions.updateValue(action, forKey: fd) == nil
            let events = EPOLLOUT.rawValue | EPOLLONESHOT.rawValue
            if !isNew || !loop.watch(fd, events: events, operation: EPOLL_CTL_ADD) {
                loop.watch(fd, events: events, operation: EPOLL_CTL_MOD)
            }
        }
    }

    /// Stops watching `fd` (before it is closed).
    func forget(_ fd: Int32) {
        lock.withLock {
            if actions.removeValue(forKey: fd) != nil { loop.forget(fd) }
        }
    }

    /// Stops the thread.
    func stop() { loop.stop() }
}
