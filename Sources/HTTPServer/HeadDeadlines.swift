import CMicroHTTPD
import Foundation
import Lifecycle

/// The request-head deadline of the connections the daemons serve: from the moment a
/// connection is handed to a daemon, or its last request has completed (a kept-alive
/// connection, idle), its next request head must be whole within `timeoutNanoseconds`;
/// past it, the connection is closed. A connection whose request is under way (its answer
/// awaited, its response or event stream being sent) waits for no head and has no deadline.
///
/// Without it a kept-alive connection could send a later head one line every few seconds
/// for ever (libmicrohttpd's idle timeout restarts with every byte). The daemons' threads
/// start and stop the waits; the accept loop closes the late (`closeLate`).
final class HeadDeadlines: Sendable {
    /// Time from the start of a wait to a whole head.
    let timeoutNanoseconds: UInt64
    /// Monotonic nanoseconds (injected by tests).
    private let now: @Sendable () -> UInt64
    /// A socket stays here only while its connection is open: the daemon's close notice
    /// removes it before the socket is closed, so `closeLate` never touches a reused number.
    private let waiting = Locked(DeadlineQueue<Void>())

    init(timeoutNanoseconds: UInt64, now: @escaping @Sendable () -> UInt64) {
        self.timeoutNanoseconds = timeoutNanoseconds
        self.now = now
    }

    /// The connection of `fd` waits for a request head from now on.
    func startWaiting(_ fd: Int32) {
        guard fd >= 0 else { return }
        let deadline = now() &+ timeoutNanoseconds
        waiting.withLock { $0.insert(fd, (), deadline: deadline) }
    }

    /// The connection of `fd` has a whole head, or is closing.
    func stopWaiting(_ fd: Int32) {
        guard fd >= 0 else { return }
        waiting.withLock { _ = $0.remove(fd) }
    }

    /// The earliest deadline, if a connection waits.
    var nextDeadline: UInt64? { waiting.withLock { $0.first()?.entry.deadline } }

    /// Shuts down the sockets of the connections past their deadline (their daemon then
    /// closes them); returns how many.
    func closeLate() -> Int {
        let time = now()
        return waiting.withLock { waiting in
            let late = waiting.removeExpired(now: time)
            for connection in late { shutdown(connection.fd, Int32(SHUT_RDWR)) }
            return late.count
        }
    }

    /// Connections waiting for a head (for tests).
    var count: Int { waiting.withLock { $0.count } }
}
