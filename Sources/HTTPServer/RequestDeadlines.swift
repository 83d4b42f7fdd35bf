import CMicroHTTPD
import Foundation
import Lifecycle

/// The deadlines of the requests the daemons are reading:
/// - a head: from the moment a connection is handed to a daemon, or its last request has
///   completed (a kept-alive connection, idle), its next request head must be whole within
///   `headTimeoutNanoseconds`;
/// - a body: from the moment a head announcing a body (`Content-Length` above 0, or
///   `Transfer-Encoding`) has been read, that body must be whole within
///   `bodyTimeoutNanoseconds`.
///
/// Past either, the connection is closed. A connection whose request is under way (its
/// answer awaited, its response or event stream being sent) waits for nothing and has no
/// deadline.
///
/// Without them a connection could send a head one line every few seconds, or a body one
/// byte a second, for ever (libmicrohttpd's idle timeout restarts with every byte). Each
/// kind has one duration, so each queue is in the order of its deadlines
/// (`DeadlineQueue`). The daemons' threads start and stop the waits; the accept loop
/// closes the late (`closeLate`).
final class RequestDeadlines: Sendable {
    /// Time from the start of a wait to a whole head.
    let headTimeoutNanoseconds: UInt64
    /// Time from a whole head to a whole body.
    let bodyTimeoutNanoseconds: UInt64
    /// Monotonic nanoseconds (injected by tests).
    private let now: @Sendable () -> UInt64

    private struct Waits {
        var heads = DeadlineQueue<Void>()
        var bodies = DeadlineQueue<Void>()
    }

    /// A socket stays here only while its connection is open: the daemon's close notice
    /// removes it before the socket is closed, so `closeLate` never touches a reused number.
    /// Shared by the daemons' threads (a wait starts or stops) and the accept loop (closes the late).
    private let waits = Locked(Waits())

    init(headTimeoutNanoseconds: UInt64, bodyTimeoutNanoseconds: UInt64, now: @escaping @Sendable () -> UInt64) {
        self.headTimeoutNanoseconds = headTimeoutNanoseconds
        self.bodyTimeoutNanoseconds = bodyTimeoutNanoseconds
        self.now = now
    }

    /// The connection of `fd` waits for a request head from now on.
    func startWaiting(_ fd: Int32) {
        guard fd >= 0 else { return }
        let deadline = now() &+ headTimeoutNanoseconds
        waits.withLock { $0.heads.insert(fd, (), deadline: deadline) }
    }

    /// The connection of `fd` has a whole head and waits for its body from now on.
    func startWaitingForBody(_ fd: Int32) {
        guard fd >= 0 else { return }
        let deadline = now() &+ bodyTimeoutNanoseconds
        waits.withLock { waits in
            waits.heads.remove(fd)
            waits.bodies.insert(fd, (), deadline: deadline)
        }
    }

    /// The connection of `fd` has a whole head (with no body to come), a whole body, or
    /// is closing.
    func stopWaiting(_ fd: Int32) {
        guard fd >= 0 else { return }
        waits.withLock { waits in
            if waits.heads.remove(fd) == nil { waits.bodies.remove(fd) }
        }
    }

    /// The earliest deadline, if a connection waits.
    var nextDeadline: UInt64? {
        waits.withLock { waits in
            switch (waits.heads.first()?.entry.deadline, waits.bodies.first()?.entry.deadline) {
            case let (head?, body?): min(head, body)
            case let (head, body): head ?? body
            }
        }
    }

    /// Shuts down the sockets of the connections past their deadline (their daemon then
    /// closes them); returns how many, of each kind.
    func closeLate() -> (heads: Int, bodies: Int) {
        let time = now()
        return waits.withLock { waits in
            let heads = waits.heads.removeExpired(now: time), bodies = waits.bodies.removeExpired(now: time)
            for connection in heads + bodies { shutdown(connection.fd, Int32(SHUT_RDWR)) }
            return (heads.count, bodies.count)
        }
    }

    /// Connections waiting for a head or a body (for tests).
    var count: Int { waits.withLock { $0.heads.count + $0.bodies.count } }

    /// Connections waiting for a body (for tests).
    var bodiesAwaited: Int { waits.withLock { $0.bodies.count } }
}
