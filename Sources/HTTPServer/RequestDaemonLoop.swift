import CMicroHTTPD
import Foundation
import Lifecycle
import Synchronization

/// The thread of the plain-HTTP request daemon: libmicrohttpd without a thread of its own
/// (its external-loop mode), driven by `MHD_run` from this loop.
///
/// Why: an answer that comes later (a progress update, answered once its batch has
/// committed) is queued without suspending and resuming its connection. In this mode
/// libmicrohttpd hands a request left without an answer to the access handler again at
/// every `MHD_run`, so the answer is simply queued then: no `epoll_ctl` to take the socket out of
/// the library's epoll set and put it back, and no write to the library's eventfd for each
/// answer. Whoever answers sets the answer and wakes this loop (`wake()`), once for all the
/// answers that come while it runs; it queues them all in its next `MHD_run`.
/// `bench/mhd-floor.sh` measures what that saves on this machine.
///
/// Facts of libmicrohttpd 0.9.75 that shape the loop:
/// - `MHD_add_connection` may only be called from the thread that runs `MHD_run`: the accept
///   loop hands sockets over through `add(_:address:length:)`.
/// - A resume (`MHD_resume_connection`, a stream's) wakes no one in this mode: whoever
///   resumes also calls `wake()`.
/// - A request waiting unsuspended counts as idle: its connection's timeout is off until
///   its answer is queued (`Exchange`).
/// - `MHD_get_timeout` says 0 while a request waits for its answer (the library would call
///   the handler again at once), so a loop that trusted it would spin. While some request
///   waits (`requestWaits`), after two runs in a row in which nothing moved — no request
///   began, read, was answered or completed, no stream block was handed over
///   (`noteProgress()`) — the loop sleeps in epoll anyway until a socket stirs, an answer or
///   a connection comes (`wake()`), or 20 ms pass. Two, because the library takes some
///   steps without calling us (it sends an answer, then reads a pipelined request already
///   in its buffer at the next run).
final class RequestDaemonLoop: Service, @unchecked Sendable {  // `daemon` is set before the loop's thread starts, then only read
    /// A socket the accept loop handed over, with its peer's address.
    private struct Handover {
        var fd: Int32
        var address: sockaddr_storage
        var length: socklen_t
    }

    /// The daemon driven (`attach`), set once before the loop runs.
    private(set) var daemon: OpaquePointer?
    /// Releases the socket's count in the per-address limit when the library cannot take it.
    private let refused: @Sendable (Int32) -> Void
    private let epollFD: Int32
    private let wakeFD: Int32
    /// Sockets handed over and not yet added; `closed` once the loop has ended (a socket
    /// handed over then is closed at once).
    /// Shared by the accept loop (hands sockets over) and the loop's thread (adds them).
    private let handovers = Locked<(sockets: [Handover], closed: Bool)>(([], false))
    /// The library's limit of connections at once: a socket past it is refused here, its
    /// count released before it is closed (`ConnectionsPerAddress`), rather than closed by
    /// `MHD_add_connection` on this thread while the accept loop may take its number again.
    private let connectionLimit: Int
    /// Requests of this daemon waiting for their answers (`Exchange`): while there are none,
    /// the library's "work now" is always believed.
    private let waitingRequests = Atomic<Int>(0)
    /// Set by the first `wake()` since the loop last looked: later ones write nothing.
    private let wakeRequested = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    /// Counts what moved in the library (see the type).
    private let progress = Atomic<Int>(0)
    /// How many times the loop has run the library (for tests).
    let runs = Atomic<Int>(0)
    /// The longest sleep while requests only wait for their answers: a bound, should the
    /// library have work that shows in none of the signs above.
    private let idleSleepMilliseconds: Int32
    /// How many runs in a row must move nothing before the loop sleeps while the library
    /// says it has work.
    static let runsBeforeSleeping = 2

    /// The longest sleep when the library names no sooner time: a bound on what a missed
    /// wake-up could cost.
    private let longestSleepMilliseconds: Int32

    /// A loop with nothing to drive yet.
    init(longestSleepMilliseconds: Int32 = 1000, idleSleepMilliseconds: Int32 = 20, connectionLimit: Int,
         refused: @escaping @Sendable (Int32) -> Void) throws {
        self.connectionLimit = connectionLimit
        self.longestSleepMilliseconds = longestSleepMilliseconds
        self.idleSleepMilliseconds = idleSleepMilliseconds
        self.refused = refused
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epollFD >= 0, wakeFD >= 0, Self.watch(wakeFD, in: epollFD) else {
            if epollFD >= 0 { close(epollFD) }
            if wakeFD >= 0 { close(wakeFD) }
            throw HTTPServerError(description: "cannot set up the request daemon's loop")
        }
    }

    /// Drives `daemon`, started in libmicrohttpd's external-loop mode (no thread of its
    /// own); before `run()`.
    func attach(_ daemon: OpaquePointer) throws {
        guard Self.watch(headway_mhd_epoll_fd(daemon), in: epollFD) else {
            throw HTTPServerError(description: "cannot wait for the request daemon's sockets")
        }
        self.daemon = daemon
    }

    private static func watch(_ fd: Int32, in epollFD: Int32) -> Bool {
        guard fd >= 0 else { return false }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = fd
        return epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0
    }

    deinit {
        close(epollFD)
        close(wakeFD)
    }

    /// Hands an accepted socket to the daemon (any thread); the loop adds it.
    func add(_ fd: Int32, address: UnsafePointer<sockaddr>, length: socklen_t) {
        var handover = Handover(fd: fd, address: sockaddr_storage(), length: length)
        withUnsafeMutableBytes(of: &handover.address) { storage in
            storage.copyMemory(from: UnsafeRawBufferPointer(start: address, count: min(Int(length), storage.count)))
        }
        let accepted = handovers.withLock { handovers in
            if !handovers.closed { handovers.sockets.append(handover) }
            return !handovers.closed
        }
        guard accepted else {
            refused(fd)
            close(fd)
            return
        }
        wake()
    }

    /// Makes the loop run the library again soon (any thread): an answer came.
    func wake() {
        guard !wakeRequested.exchange(true, ordering: .sequentiallyConsistent) else { return }
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Something moved in the library: the loop runs it again before it sleeps.
    func noteProgress() {
        progress.add(1, ordering: .relaxed)
    }

    /// A request of this daemon began (`true`) or stopped (`false`) waiting for its answer.
    func requestWaits(_ waits: Bool) {
        waitingRequests.add(waits ? 1 : -1, ordering: .relaxed)
    }

    func run() {
        guard let daemon else { return }
        var ready = [epoll_event](repeating: epoll_event(), count: 4)
        // Runs in a row in which nothing moved while the library said it had work.
        var stillRuns = 0
        while !stopping.load(ordering: .acquiring) {
            // Cleared before the run: an answer set after the run looked at its request
            // writes the eventfd, so the sleep below ends at once.
            wakeRequested.store(false, ordering: .sequentiallyConsistent)
            addHandedOverConnections(to: daemon)
            let before = progress.load(ordering: .relaxed)
            MHD_run(daemon)
            runs.add(1, ordering: .relaxed)
            var timeout = longestSleepMilliseconds
            var libraryTimeout: UInt64 = 0
            if MHD_get_timeout(daemon, &libraryTimeout) == MHD_Result.YES {
                timeout = Int32(min(libraryTimeout, UInt64(longestSleepMilliseconds)))
            }
            if timeout == 0 && progress.load(ordering: .relaxed) == before
                && waitingRequests.load(ordering: .relaxed) > 0 {
                // The library takes some steps without calling us (it sends an answer, then
                // reads a pipelined request already in its buffer at the next run): it gets
                // one more run at once before the loop believes only waiting requests remain.
                stillRuns += 1
                if stillRuns >= Self.runsBeforeSleeping { timeout = min(idleSleepMilliseconds, longestSleepMilliseconds) }
            } else {
                stillRuns = 0
            }
            let count = epoll_wait(epollFD, &ready, Int32(ready.count), timeout)
            // Whatever woke the loop gets its two runs before the next sleep.
            if count > 0 { stillRuns = 0 }
            if count > 0, ready[0..<Int(count)].contains(where: { $0.data.fd == wakeFD }) {
                var value: UInt64 = 0
                _ = read(wakeFD, &value, 8)
            }
        }
        // A socket handed over meanwhile is added, so that stopping the daemon closes it.
        handovers.withLock { $0.closed = true }
        addHandedOverConnections(to: daemon)
    }

    func requestStop() {
        stopping.store(true, ordering: .releasing)
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    private func addHandedOverConnections(to daemon: OpaquePointer) {
        // Taken only when there are some: emptying a shared array allocates a new one.
        let waiting = handovers.withLock { handovers -> [Handover] in
            guard !handovers.sockets.isEmpty else { return [] }
            defer { handovers.sockets = [] }
            return handovers.sockets
        }
        for var handover in waiting {
            noteProgress()
            guard headway_mhd_connection_count(daemon) < connectionLimit else {
                refused(handover.fd)
                close(handover.fd)
                continue
            }
            let added = withUnsafePointer(to: &handover.address) { storage in
                storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    MHD_add_connection(daemon, handover.fd, address, handover.length)
                }
            }
            // libmicrohttpd closed the socket (out of memory): released after the close, so
            // in the meantime the accept loop may have counted another socket under its number
            // (the count of that one connection is then lost; ConnectionsPerAddress).
            if added != MHD_Result.YES { refused(handover.fd) }
        }
    }
}
