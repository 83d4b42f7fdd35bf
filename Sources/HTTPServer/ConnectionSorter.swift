import CMicroHTTPD
import Foundation
import Lifecycle
import Synchronization

/// Which of the server's two daemons serves a connection.
enum ConnectionRoute: Equatable, Sendable {
    /// Long-lived streams (event streams): idle most of the time, suspended meanwhile.
    case stream
    /// Everything else: short requests, suspended only while their answer is prepared.
    case request

    /// Decides by the first bytes a client sent (peeked, not consumed): a connection whose
    /// first request is `GET <stream path>` (followed by a space or `?`) with a head of at
    /// most `maximumStreamHead` bytes is a stream (the stream daemon's connections have
    /// small buffers; a larger head is served by the request daemon); `nil` while those
    /// bytes could still become one.
    static func classify(_ bytes: some Collection<UInt8>, streamPaths: [String], maximumStreamHead: Int = 1024) -> ConnectionRoute? {
        let bytes = Array(bytes)
        var undecided = false
        for path in streamPaths {
            let target = Array("GET \(path)".utf8)
            if bytes.count <= target.count {
                if target.starts(with: bytes) { undecided = true }
                continue
            }
            guard bytes.starts(with: target), bytes[target.count] == UInt8(ascii: " ") || bytes[target.count] == UInt8(ascii: "?")
            else { continue }
            if let headEnd = endOfHead(bytes) { return headEnd <= maximumStreamHead ? .stream : .request }
            return bytes.count < maximumStreamHead ? nil : .request
        }
        return undecided ? nil : .request
    }

    /// Where the request head ends (just after its blank line), if `bytes` hold all of it.
    private static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 3..<bytes.count
        where bytes[index] == 10 && bytes[index - 1] == 13 && bytes[index - 2] == 10 && bytes[index - 3] == 13 {
            return index + 1
        }
        return nil
    }
}

/// Owns the listening socket: accepts connections and hands each to the daemon its first
/// request line calls for (`ConnectionRoute`). Its `run()` is the server's accept loop.
///
/// Why two daemons: libmicrohttpd walks its whole list of suspended connections whenever
/// any connection is resumed. Idle event streams stay suspended; an ordinary request is
/// suspended while its change commits. In one daemon every commit would walk every idle
/// stream (with 10,000 subscribers, updates/s fell 6×); apart, each walk is short.
/// A keep-alive connection stays with the daemon that got it, which serves every route;
/// the sorting only decides where the work is cheapest.
final class ConnectionSorter: Service {
    /// A client that has sent too little to decide after this long goes to the request
    /// daemon, whose own timeout then applies.
    static let decisionTimeoutNanoseconds: UInt64 = 10_000_000_000

    /// Accepted connections still waiting for enough bytes to be sorted.
    private struct Waiting {
        struct Entry {
            var address: sockaddr_storage
            var length: socklen_t
            var since: UInt64
        }

        var connections: [Int32: Entry] = [:]
        /// Connections that sent too little to decide: looked at again every 10 ms (their
        /// bytes stay unread, so waiting for readability would wake at once, again and again).
        var incomplete: Set<Int32> = []
    }

    private let listenFD: Int32
    private let loop: EpollLoop
    private let streamPaths: [String]
    private let maximumStreamHead: Int
    /// Connections waiting to be sorted beyond this are closed at once.
    private let maximumWaiting: Int
    private let decisionTimeoutNanoseconds: UInt64
    /// Monotonic nanoseconds (injected by tests).
    private let monotonicNow: @Sendable () -> UInt64
    private let handOff: @Sendable (Int32, ConnectionRoute, UnsafePointer<sockaddr>, socklen_t) -> Void
    /// Used by the accept loop only; in a mutex so that nothing but the type system's
    /// word is needed for it (the lock is never contended).
    private let waiting = Mutex(Waiting())

    /// Sorts the connections of `listenFD` (a bound, listening, non-blocking socket, which
    /// the sorter closes when its loop ends) once `run()` is called.
    init(listenFD: Int32, streamPaths: [String], maximumStreamHead: Int, maximumWaiting: Int,
         decisionTimeoutNanoseconds: UInt64 = ConnectionSorter.decisionTimeoutNanoseconds,
         monotonicNow: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds },
         handOff: @escaping @Sendable (Int32, ConnectionRoute, UnsafePointer<sockaddr>, socklen_t) -> Void) throws {
        self.listenFD = listenFD
        self.streamPaths = streamPaths
        self.maximumStreamHead = maximumStreamHead
        self.maximumWaiting = maximumWaiting
        self.decisionTimeoutNanoseconds = decisionTimeoutNanoseconds
        self.monotonicNow = monotonicNow
        self.handOff = handOff
        loop = try EpollLoop()
        loop.watch(listenFD, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
    }

    /// Accepts and sorts until a stop is requested; then closes the listening socket and
    /// the connections not yet handed over.
    func run() {
        loop.run(timeout: {
            waiting.withLock { !$0.incomplete.isEmpty ? 10 : $0.connections.isEmpty ? -1 : 1000 }
        }, handle: { fd in
            waiting.withLock { waiting in
                if fd == listenFD { acceptAll(&waiting) } else { sort(fd, &waiting) }
            }
        }, tick: {
            waiting.withLock { waiting in
                for fd in waiting.incomplete {
                    waiting.incomplete.remove(fd)
                    sort(fd, &waiting)
                }
                handOverLate(&waiting)
            }
        })
        waiting.withLock { waiting in
            for fd in waiting.connections.keys { close(fd) }
            waiting = Waiting()
        }
        close(listenFD)
    }

    /// Stops accepting (the loop ends after the connection it is looking at).
    func requestStop() { loop.requestStop() }

    /// Connections accepted and not yet handed over (for tests).
    var waitingCount: Int { waiting.withLock { $0.connections.count } }

    private func acceptAll(_ waiting: inout Waiting) {
        while true {
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    headway_accept(listenFD, $0, &length)
                }
            }
            if fd < 0 {
                // Out of descriptors: the listening socket stays readable, so pause rather than spin.
                if errno == EMFILE || errno == ENFILE { usleep(50_000) }
                return
            }
            guard waiting.connections.count < maximumWaiting else {
                close(fd)
                continue
            }
            waiting.connections[fd] = Waiting.Entry(address: address, length: length, since: monotonicNow())
            loop.watch(fd, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLONESHOT.rawValue, operation: EPOLL_CTL_ADD)
        }
    }

    /// Peeks at what `fd` sent so far and hands it over once that decides its route.
    private func sort(_ fd: Int32, _ waiting: inout Waiting) {
        var buffer = [UInt8](repeating: 0, count: maximumStreamHead + 1)
        let count = recv(fd, &buffer, buffer.count, Int32(MSG_PEEK | MSG_DONTWAIT))
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            forget(fd, &waiting)
            close(fd)
            return
        }
        guard count > 0 else {
            // Nothing to read after all: wait for readability again.
            loop.watch(fd, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLONESHOT.rawValue, operation: EPOLL_CTL_MOD)
            return
        }
        if let route = ConnectionRoute.classify(buffer.prefix(count), streamPaths: streamPaths,
                                                maximumStreamHead: maximumStreamHead) {
            hand(fd, route, &waiting)
        } else {
            waiting.incomplete.insert(fd)
        }
    }

    private func handOverLate(_ waiting: inout Waiting) {
        let now = monotonicNow()
        for (fd, entry) in waiting.connections where now &- entry.since > decisionTimeoutNanoseconds {
            hand(fd, .request, &waiting)
        }
    }

    private func hand(_ fd: Int32, _ route: ConnectionRoute, _ waiting: inout Waiting) {
        guard var entry = forget(fd, &waiting) else { return }
        withUnsafePointer(to: &entry.address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { handOff(fd, route, $0, entry.length) }
        }
    }

    @discardableResult
    private func forget(_ fd: Int32, _ waiting: inout Waiting) -> Waiting.Entry? {
        waiting.incomplete.remove(fd)
        loop.forget(fd)
        return waiting.connections.removeValue(forKey: fd)
    }
}
