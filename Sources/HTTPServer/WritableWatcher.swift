import CMicroHTTPD
import Foundation
import Lifecycle
import Synchronization

/// Waits, on a thread of its own, for sockets whose send buffer was full to take bytes
/// again, and then calls the action given for each (once per `watch`).
final class WritableWatcher: Service {
    private let loop: EpollLoop
    private let actions = Mutex<[Int32: @Sendable () -> Void]>([:])

    init() throws {
        loop = try EpollLoop()
    }

    func run() {
        loop.run(timeout: { -1 }, handle: { fd in
            let action = actions.withLock { $0[fd] }
            action?()
        })
    }

    func requestStop() { loop.requestStop() }

    /// Calls `action` once `fd` can be written (or has failed).
    func watch(_ fd: Int32, action: @escaping @Sendable () -> Void) {
        actions.withLock { actions in
            let isNew = actions.updateValue(action, forKey: fd) == nil
            let events = EPOLLOUT.rawValue | EPOLLONESHOT.rawValue
            if !isNew || !loop.watch(fd, events: events, operation: EPOLL_CTL_ADD) {
                loop.watch(fd, events: events, operation: EPOLL_CTL_MOD)
            }
        }
    }

    /// Stops watching `fd` (before it is closed).
    func forget(_ fd: Int32) {
        actions.withLock { actions in
            if actions.removeValue(forKey: fd) != nil { loop.forget(fd) }
        }
    }
}
