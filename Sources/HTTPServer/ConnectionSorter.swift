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

    /// Decides by the first bytes a client sent (peeked, not consumed), once they hold its
    /// whole first request head: a request `GET <stream path>` (followed by a space or `?`)
    /// whose head has at most `maximumStreamHead` bytes and weighs at most
    /// `maximumStreamWeight` (`HeadScreen.weight`: its header lines and query parameters
    /// take memory too) is a stream (the stream daemon's connections have small buffers),
    /// anything else a request. More than `maximumHead`
    /// bytes without the head's end are a request (a head too large, which `HeadScreen`
    /// refuses), and so is a first line that is no request line, at once.
    /// `nil` while the head is incomplete.
    ///
    /// `searchedBefore`: how many of the first bytes an earlier call already found no end
    /// of head in (the bytes of a waiting connection only grow), so that a head sent a
    /// byte at a time is searched once in all, not once per byte.
    static func classify(_ bytes: some Collection<UInt8>, searchedBefore: Int = 0, streamPaths: [String],
                         maximumStreamHead: Int = 1024, maximumStreamQueryParameters: Int = 8,
                         maximumStreamWeight: Int = .max, maximumHead: Int = 8 * 1024) -> ConnectionRoute? {
        let classified = bytes.withContiguousStorageIfAvailable {
            classify(buffer: $0, searchedBefore: searchedBefore, streamPaths: streamPaths,
                     maximumStreamHead: maximumStreamHead, maximumStreamQueryParameters: maximumStreamQueryParameters,
                     maximumStreamWeight: maximumStreamWeight, maximumHead: maximumHead)
        }
        if let classified { return classified }
        return Array(bytes).withUnsafeBufferPointer {
            classify(buffer: $0, searchedBefore: searchedBefore, streamPaths: streamPaths,
                     maximumStreamHead: maximumStreamHead, maximumStreamQueryParameters: maximumStreamQueryParameters,
                     maximumStreamWeight: maximumStreamWeight, maximumHead: maximumHead)
        }
    }

    /// `classify` on the bytes in place, without bounds checks or copies: a waiting
    /// connection's bytes are looked at again at each arrival (up to the largest head).
    private static func classify(buffer bytes: UnsafeBufferPointer<UInt8>, searchedBefore: Int, streamPaths: [String],
                                 maximumStreamHead: Int, maximumStreamQueryParameters: Int, maximumStreamWeight: Int,
                                 maximumHead: Int) -> ConnectionRoute? {
        guard let headEnd = endOfHead(bytes, searchedBefore: searchedBefore) else {
            return bytes.count > maximumHead || beginsWithMalformedRequestLine(bytes) ? .request : nil
        }
        let parameters = queryParameterCount(bytes)
        guard headEnd <= maximumStreamHead, parameters <= maximumStreamQueryParameters else {
            return .request
        }
        let isStream = streamPaths.contains { path in
            let target = Array("GET \(path)".utf8)
            return bytes.count > target.count && bytes.starts(with: target)
                && (bytes[target.count] == UInt8(ascii: " ") || bytes[target.count] == UInt8(ascii: "?"))
        }
        guard isStream else { return .request }
        if maximumStreamWeight < .max {
            // Every line end but the request line's and the empty line's ends a header line.
            let lines = bytes[..<headEnd].reduce(0) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 } - 2
            guard HeadScreen.weight(bytes: headEnd, lines: lines, parameters: parameters) <= maximumStreamWeight else {
                return .request
            }
        }
        return .stream
    }

    /// How many query parameters the first line's target carries (`?a=1&b=2` is 2): the
    /// library keeps each in the connection's memory, which is small on the stream daemon.
    static func queryParameterCount(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer(queryParameterCount)
    }

    static func queryParameterCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        let lineEnd = index(of: UInt8(ascii: "\n"), in: bytes, from: 0) ?? bytes.count
        let line = bytes[..<lineEnd]
        guard let question = line.firstIndex(of: UInt8(ascii: "?")) else { return 0 }
        let query = line[(question + 1)...].prefix { $0 != UInt8(ascii: " ") }
        return query.split(separator: UInt8(ascii: "&")).count
    }

    /// Whether the first line is whole and is not `METHOD SP target SP HTTP/…` (an empty
    /// first line may precede a request: RFC 9112 §2.2).
    static func beginsWithMalformedRequestLine(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer(beginsWithMalformedRequestLine)
    }

    private static func beginsWithMalformedRequestLine(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard var lineEnd = index(of: UInt8(ascii: "\n"), in: bytes, from: 0) else { return false }
        if lineEnd > 0 && bytes[lineEnd - 1] == UInt8(ascii: "\r") { lineEnd -= 1 }
        guard lineEnd > 0 else { return false }
        let line = UnsafeBufferPointer(rebasing: bytes[..<lineEnd])
        let space = UInt8(ascii: " ")
        // Exactly two spaces: a method of token characters, a target, a version.
        guard let first = index(of: space, in: line, from: 0), let second = index(of: space, in: line, from: first + 1),
              index(of: space, in: line, from: second + 1) == nil
        else { return true }
        let version = Array("HTTP/".utf8)
        return first == 0 || !line[..<first].allSatisfy(isTokenCharacter) || second == first + 1
            || !line[(second + 1)...].starts(with: version)
    }

    /// Whether `byte` may be part of a token (RFC 9110 §5.6.2: a method, a header name).
    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: ","), UInt8(ascii: "/"),
             UInt8(ascii: ":"), UInt8(ascii: ";"), UInt8(ascii: "<"), UInt8(ascii: "="), UInt8(ascii: ">"),
             UInt8(ascii: "?"), UInt8(ascii: "@"), UInt8(ascii: "["), UInt8(ascii: "\\"), UInt8(ascii: "]"),
             UInt8(ascii: "{"), UInt8(ascii: "}"):
            false
        default:
            (0x21...0x7e).contains(byte)
        }
    }

    /// The index of the first `byte` in `bytes` at `start` or after (`memchr`).
    private static func index(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard let base = bytes.baseAddress, start < bytes.count,
              let found = memchr(base + start, Int32(byte), bytes.count - start)
        else { return nil }
        return UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
    }

    /// What the first bytes of a connection to an HTTPS server are: `nil` while the first
    /// TLS record (the ClientHello) is not whole and fits in `maximumBytes`; `.request` once
    /// it is whole (or fills `maximumBytes`; the library then reads the rest); `.notTLS`
    /// when they cannot begin a TLS handshake record (content type 22, protocol major
    /// version 3) — a plain HTTP request, say.
    static func classifyTLSOpening(_ bytes: some Collection<UInt8>, maximumBytes: Int) -> TLSOpening? {
        let header = Array(bytes.prefix(5))
        guard let contentType = header.first else { return nil }
        guard contentType == 22, header.count < 2 || header[1] == 3 else { return .notTLS }
        guard header.count == 5 else { return nil }
        let recordLength = Int(header[3]) << 8 | Int(header[4])
        return bytes.count >= min(5 + recordLength, maximumBytes) ? .clientHello : nil
    }

    /// Where the request head ends (just after its empty line), if `bytes` hold all of it.
    /// Lines end with CRLF or a bare LF (RFC 9112 §2.2 lets a server accept either).
    /// `searchedBefore`: the first bytes hold no end (an earlier call said so).
    static func endOfHead(_ bytes: [UInt8], searchedBefore: Int = 0) -> Int? {
        bytes.withUnsafeBufferPointer { endOfHead($0, searchedBefore: searchedBefore) }
    }

    /// A plain loop over the bytes not searched yet (an end found now may begin up to two
    /// bytes before them): one pass costs about a cycle a byte whatever the bytes are, where
    /// a `memchr` per line end would cost a call per short line.
    private static func endOfHead(_ bytes: UnsafeBufferPointer<UInt8>, searchedBefore: Int) -> Int? {
        let lineFeed = UInt8(ascii: "\n"), carriageReturn = UInt8(ascii: "\r")
        guard let base = bytes.baseAddress, bytes.count >= 2 else { return nil }
        var index = max(1, min(searchedBefore, bytes.count) - 2)
        while index < bytes.count {
            if base[index] == lineFeed {
                if base[index - 1] == lineFeed { return index + 1 }
                if index >= 2 && base[index - 1] == carriageReturn && base[index - 2] == lineFeed { return index + 1 }
            }
            index += 1
        }
        return nil
    }
}

/// How a connection to an HTTPS server opens (`ConnectionRoute.classifyTLSOpening`).
enum TLSOpening: Equatable, Sendable {
    /// A whole first TLS record: the handshake may begin.
    case clientHello
    /// Bytes that begin no TLS handshake.
    case notTLS
}

/// Why the accept loop closed a connection without handing it to a daemon, or closed one
/// a daemon had kept alive.
public enum ConnectionRefusal: String, CaseIterable, Sendable {
    /// Its client address already had as many connections open as allowed.
    case tooManyFromAddress = "per_address"
    /// The set of connections waiting to be sorted was full: the oldest gave way.
    case waitingFull = "waiting_full"
    /// It had not sent a whole request head when its time was up (its first, while being
    /// sorted, or a later one, in a daemon: `RequestDeadlines`).
    case headTimeout = "head_timeout"
    /// Its request body was not whole when its time was up (`RequestDeadlines`).
    case bodyTimeout = "body_timeout"
    /// It sent plain HTTP (or anything but a TLS handshake) to an HTTPS server; it got a
    /// plain-text 400 saying so.
    case notTLS = "not_tls"
    /// Its first request head was one libmicrohttpd would have answered with a page of its
    /// own (`HeadScreen`); it got the problem document instead.
    case malformedHead = "malformed_head"
}

/// Owns the listening socket: accepts connections and hands each to the daemon its first
/// request calls for (`ConnectionRoute`), once its whole first request head has arrived.
/// Its `run()` is the server's accept loop.
///
/// Why two daemons: libmicrohttpd walks its whole list of suspended connections whenever
/// any connection is resumed. Idle event streams stay suspended; an ordinary request is
/// suspended while its change commits. In one daemon every commit would walk every idle
/// stream (with 10,000 subscribers, updates/s fell 6×); apart, each walk is short.
/// A keep-alive connection stays with the daemon that got it, which serves every route;
/// the sorting only decides where the work is cheapest.
///
/// Hostile clients: a waiting connection costs nothing until it sends more (edge-triggered
/// epoll: its unread bytes are peeked again only when new ones arrive); one that has not
/// sent a whole head by its deadline is closed (slowloris); the waiting set is bounded
/// (when full, the oldest waiting connection is closed for the newest); connections per
/// client address are capped for their whole life. Refusals are reported as counts at
/// most once per `reportIntervalNanoseconds`. The head deadline here covers a
/// connection's first request; later heads (on a kept-alive connection) have the same
/// deadline (`RequestDeadlines`), which this loop checks too.
///
/// Under TLS (`Limits.expectsTLS`) the first bytes are a ClientHello, encrypted requests
/// follow: the sorter cannot tell streams apart and hands every connection to the one
/// daemon once its whole first TLS record has arrived (with the same deadline, waiting
/// set and cap per address); bytes that begin no TLS handshake get a plain-text 400 and
/// are closed. The handshake and the first request head then have the daemon's head
/// deadline (`RequestDeadlines`, from the connection's start).
final class ConnectionSorter: Service {
    /// The bounds of the sorting.
    struct Limits: Sendable {
        /// Paths of long-lived streams (`ConnectionRoute`).
        var streamPaths: [String] = []
        /// A stream request with a larger head, more query parameters, or a head weighing
        /// more (`HeadScreen.weight`), goes to the request daemon.
        var maximumStreamHead = 1024
        var maximumStreamQueryParameters = 8
        var maximumStreamWeight = Int.max
        /// What first heads are refused for here, before the request daemon reads them
        /// (nil: none; under TLS the heads are encrypted).
        var screen: HeadScreen?
        /// Bytes looked at for the end of the head; a larger head is handed over unfinished.
        var maximumHead = 8 * 1024
        /// Connections waiting to be sorted at once.
        var maximumWaiting = 1024
        /// Time from acceptance to a whole request head.
        var headTimeoutNanoseconds: UInt64 = 10_000_000_000
        /// Least time between two reports of refusals.
        var reportIntervalNanoseconds: UInt64 = 1_000_000_000
        /// Connections begin with a TLS handshake: waited for until its first record is
        /// whole, then handed to the request daemon (the only one).
        var expectsTLS = false
        /// While connections are open, the daemons are nudged this often (real time, not
        /// the injected clock): the longest a connection can wait on libmicrohttpd's
        /// second `epoll_wait` (`EpollDaemonNudge`).
        var nudgeIntervalNanoseconds: UInt64 = 50_000_000
    }

    /// Accepted connections still waiting for their whole first head.
    private struct Waiting {
        /// Where a connection came from.
        struct Peer {
            var address: sockaddr_storage
            var length: socklen_t
            /// The bytes it had sent when last peeked at (0: never).
            var peekedBytes = 0
        }

        /// By deadline, so by order of arrival.
        var connections = DeadlineQueue<Peer>()
        /// Where the bytes of a connection are peeked.
        var peekBuffer: [UInt8]
        /// Refusals not yet reported, and when the last report was made.
        var refused: [ConnectionRefusal: Int] = [:]
        var lastReport: UInt64?
        /// When the daemons were last nudged (real monotonic nanoseconds).
        var lastNudge: UInt64 = 0

        init(peekBytes: Int) { peekBuffer = [UInt8](repeating: 0, count: peekBytes) }
    }

    private let listenFD: Int32
    private let loop: EpollLoop
    private let limits: Limits
    private let connectionsPerAddress: ConnectionsPerAddress
    /// The head deadlines of the connections the daemons serve, checked by this loop.
    private let requestDeadlines: RequestDeadlines?
    /// Monotonic nanoseconds (injected by tests).
    private let monotonicNow: @Sendable () -> UInt64
    private let handOff: @Sendable (Int32, ConnectionRoute, UnsafePointer<sockaddr>, socklen_t) -> Void
    private let reportRefusals: @Sendable ([ConnectionRefusal: Int]) -> Void
    private let nudgeDaemons: @Sendable () -> Void
    private let renderRefusal: @Sendable (HTTPRefusal, _ method: String, _ path: String) -> [UInt8]
    /// The size of `Waiting.peekBuffer`.
    private let peekBytes: Int
    /// How many connections wait (`Waiting.connections.count`, which only the accept loop
    /// touches), as of the loop's last pass: for tests.
    private let waitingGauge = Atomic<Int>(0)
    private let peeks = Atomic<Int>(0)
    private let passes = Atomic<Int>(0)

    /// Sorts the connections of `listenFD` (a bound, listening, non-blocking socket, which
    /// the sorter closes when its loop ends) once `run()` is called. Each connection is
    /// admitted by `connectionsPerAddress`; the sorter releases those it closes, the
    /// receiver of `handOff` those it is handed. The loop also closes the daemons'
    /// connections late for a head or a body (`requestDeadlines`), counted as `headTimeout`
    /// and `bodyTimeout` refusals,
    /// and, while any connection is open, calls `nudgeDaemons` every
    /// `limits.nudgeIntervalNanoseconds` (`EpollDaemonNudge`). A first head that
    /// `limits.screen` refuses gets the whole reply `renderRefusal` makes of its refusal
    /// (given the request line's method and path), and its connection is closed.
    init(listenFD: Int32, limits: Limits, connectionsPerAddress: ConnectionsPerAddress,
         requestDeadlines: RequestDeadlines? = nil,
         monotonicNow: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds },
         reportRefusals: @escaping @Sendable ([ConnectionRefusal: Int]) -> Void = { _ in },
         nudgeDaemons: @escaping @Sendable () -> Void = {},
         renderRefusal: @escaping @Sendable (HTTPRefusal, _ method: String, _ path: String) -> [UInt8] = { _, _, _ in [] },
         handOff: @escaping @Sendable (Int32, ConnectionRoute, UnsafePointer<sockaddr>, socklen_t) -> Void) throws {
        self.listenFD = listenFD
        self.limits = limits
        self.connectionsPerAddress = connectionsPerAddress
        self.requestDeadlines = requestDeadlines
        self.monotonicNow = monotonicNow
        self.reportRefusals = reportRefusals
        self.nudgeDaemons = nudgeDaemons
        self.renderRefusal = renderRefusal
        self.handOff = handOff
        peekBytes = max(limits.maximumHead, limits.maximumStreamHead) + 1
        loop = try EpollLoop()
        loop.watch(listenFD, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
    }

    /// Accepts and sorts until a stop is requested; then closes the listening socket and
    /// the connections not yet handed over. The connections waiting are this thread's
    /// alone: a local, lent to each step.
    func run() {
        var waiting = Waiting(peekBytes: peekBytes)
        loop.run(timeout: {
            millisecondsToNextDuty(&waiting)
        }, handleEvents: { fd, events in
            if fd == listenFD { acceptAll(&waiting) } else { sort(fd, events: events, &waiting) }
            waitingGauge.store(waiting.connections.count, ordering: .relaxed)
        }, tick: {
            closeLate(&waiting)
            if let closed = requestDeadlines?.closeLate() {
                if closed.heads > 0 { waiting.refused[.headTimeout, default: 0] += closed.heads }
                if closed.bodies > 0 { waiting.refused[.bodyTimeout, default: 0] += closed.bodies }
            }
            reportIfDue(&waiting)
            nudgeIfDue(&waiting)
            waitingGauge.store(waiting.connections.count, ordering: .relaxed)
            passes.add(1, ordering: .releasing)
        })
        for fd in waiting.connections.sockets { drop(fd, nil, &waiting) }
        if !waiting.refused.isEmpty { reportRefusals(waiting.refused) }
        waitingGauge.store(0, ordering: .relaxed)
        close(listenFD)
    }

    /// Stops accepting (the loop ends after the connection it is looking at).
    func requestStop() { loop.requestStop() }

    /// Makes the loop look at its deadlines now (tests that move the clock call it).
    func wake() { loop.wake() }

    /// Connections accepted and not yet handed over (for tests).
    var waitingCount: Int { waitingGauge.load(ordering: .relaxed) }

    /// How many times the bytes of a waiting connection were peeked (for tests).
    var peekCount: Int { peeks.load(ordering: .relaxed) }

    /// How many times the loop has waited and done its duties (for tests).
    var loopPasses: Int { passes.load(ordering: .acquiring) }

    /// The loop's wait: until the oldest head's deadline or the next report, if any. With
    /// daemons' request deadlines, at most a tenth of the shorter timeout: a wait may begin
    /// at any time (a body's before a head's due later), and its daemon's thread does not
    /// wake this loop.
    private func millisecondsToNextDuty(_ waiting: inout Waiting) -> Int32 {
        let now = monotonicNow()
        var next = waiting.connections.first()?.entry.deadline
        if !waiting.refused.isEmpty {
            let report = (waiting.lastReport ?? 0) &+ limits.reportIntervalNanoseconds
            next = min(next ?? report, report)
        }
        if let requestDeadlines {
            let shortest = min(requestDeadlines.headTimeoutNanoseconds, requestDeadlines.bodyTimeoutNanoseconds)
            let soon = now &+ max(shortest / 10, 1_000_000)
            let daemons = min(requestDeadlines.nextDeadline ?? soon, soon)
            next = min(next ?? daemons, daemons)
        }
        var milliseconds: Int32 = -1
        if let next { milliseconds = next > now ? Int32(clamping: (next - now + 999_999) / 1_000_000) : 0 }
        if let nudge = millisecondsToNextNudge(waiting) {
            milliseconds = milliseconds < 0 ? nudge : min(milliseconds, nudge)
        }
        return milliseconds
    }

    /// The time to the daemons' next nudge, while any connection is open.
    private func millisecondsToNextNudge(_ waiting: Waiting) -> Int32? {
        guard connectionsPerAddress.openCount > 0 else { return nil }
        let due = waiting.lastNudge &+ limits.nudgeIntervalNanoseconds
        let now = DispatchTime.now().uptimeNanoseconds
        return due > now ? Int32(clamping: (due - now + 999_999) / 1_000_000) : 0
    }

    private func nudgeIfDue(_ waiting: inout Waiting) {
        guard millisecondsToNextNudge(waiting) == 0 else { return }
        waiting.lastNudge = DispatchTime.now().uptimeNanoseconds
        nudgeDaemons()
    }

    /// Connections accepted in one pass of the loop at most: the rest wait in the backlog
    /// (the listening socket is level-triggered) while the loop reads what the waiting
    /// connections sent and does its duties — under a flood the backlog never empties, and
    /// without a bound deadlines, reports, nudges and the stop would wait for it.
    static let acceptsPerPass = 64

    /// Accepts up to `acceptsPerPass` of what the backlog holds; each newcomer finding the
    /// waiting set full makes room (`makeRoom`).
    private func acceptAll(_ waiting: inout Waiting) {
        for _ in 0..<Self.acceptsPerPass {
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
            let admitted = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connectionsPerAddress.admit(fd, from: $0) }
            }
            guard admitted else {
                close(fd)
                waiting.refused[.tooManyFromAddress, default: 0] += 1
                continue
            }
            if waiting.connections.count >= limits.maximumWaiting { makeRoom(&waiting) }
            waiting.connections.insert(fd, Waiting.Peer(address: address, length: length),
                                       deadline: monotonicNow() &+ limits.headTimeoutNanoseconds)
            // Edge-triggered: woken once now if bytes are already there, then once per arrival of more.
            loop.watch(fd, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue, operation: EPOLL_CTL_ADD)
        }
    }

    /// Makes room in the full waiting set: its oldest connection gives way. If it has sent
    /// bytes since it was last peeked at (in a burst, the wake-up of a whole head may not
    /// have been read yet), it is sorted first, and handed over if its head is whole; a
    /// half-sent head that has sent nothing new costs only the `FIONREAD` that says so. A
    /// burst of honest connections larger than the set so loses none of them, and a flood
    /// of half-sent heads is evicted as fast as it arrives.
    private func makeRoom(_ waiting: inout Waiting) {
        guard let oldest = waiting.connections.first() else { return }
        if headway_unread_bytes(oldest.fd) != oldest.entry.value.peekedBytes { sort(oldest.fd, events: 0, &waiting) }
        if waiting.connections.contains(oldest.fd) { drop(oldest.fd, .waitingFull, &waiting) }
    }

    /// Peeks at what `fd` sent so far and hands it over once its whole head is there.
    private func sort(_ fd: Int32, events: UInt32, _ waiting: inout Waiting) {
        guard waiting.connections.contains(fd) else { return }
        peeks.add(1, ordering: .relaxed)
        let count = recv(fd, &waiting.peekBuffer, waiting.peekBuffer.count, Int32(MSG_PEEK | MSG_DONTWAIT))
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            drop(fd, nil, &waiting)
            return
        }
        guard count > 0 else { return }  // nothing yet: the next arrival wakes the loop again
        var searchedBefore = 0
        waiting.connections.modifyValue(of: fd) { peer in
            searchedBefore = peer.peekedBytes
            peer.peekedBytes = count
        }
        if limits.expectsTLS {
            switch ConnectionRoute.classifyTLSOpening(waiting.peekBuffer.prefix(count), maximumBytes: waiting.peekBuffer.count) {
            case .clientHello: hand(fd, .request, &waiting)
            case .notTLS: refuseAsNotTLS(fd, &waiting)
            case nil:
                if events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 { drop(fd, nil, &waiting) }
            }
            return
        }
        if let route = ConnectionRoute.classify(waiting.peekBuffer.prefix(count), searchedBefore: searchedBefore,
                                                streamPaths: limits.streamPaths,
                                                maximumStreamHead: limits.maximumStreamHead,
                                                maximumStreamQueryParameters: limits.maximumStreamQueryParameters,
                                                maximumStreamWeight: limits.maximumStreamWeight,
                                                maximumHead: limits.maximumHead) {
            let refusal = limits.screen.flatMap { screen in
                waiting.peekBuffer.withUnsafeBufferPointer {
                    screen.refusal(for: UnsafeBufferPointer(rebasing: $0[..<count]), maximumHead: limits.maximumHead)
                }
            }
            if let refusal { refuseHead(fd, refusal, count, &waiting) } else { hand(fd, route, &waiting) }
        } else if events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            drop(fd, nil, &waiting)  // the client stopped sending before its head was whole
        }
    }

    /// Closes the connections whose head is not whole by their deadline.
    private func closeLate(_ waiting: inout Waiting) {
        let now = monotonicNow()
        while let first = waiting.connections.first(), first.entry.deadline <= now {
            drop(first.fd, .headTimeout, &waiting)
        }
    }

    private func reportIfDue(_ waiting: inout Waiting) {
        guard !waiting.refused.isEmpty else { return }
        let now = monotonicNow()
        if let last = waiting.lastReport, now &- last < limits.reportIntervalNanoseconds { return }
        reportRefusals(waiting.refused)
        waiting.refused = [:]
        waiting.lastReport = now
    }

    private func hand(_ fd: Int32, _ route: ConnectionRoute, _ waiting: inout Waiting) {
        guard var peer = forget(fd, &waiting) else { return }
        withUnsafePointer(to: &peer.address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { handOff(fd, route, $0, peer.length) }
        }
    }

    /// The reply to plain HTTP on an HTTPS server.
    private static let notTLSReply = Array(("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 42\r\n"
        + "Connection: close\r\n\r\nThis server speaks HTTPS, not plain HTTP.\n").utf8)

    /// Answers a connection that began with something else than a TLS handshake with a
    /// plain-text 400 (what it sent so far is read first, so that the close does not reset
    /// the connection under the reply), then closes it.
    private func refuseAsNotTLS(_ fd: Int32, _ waiting: inout Waiting) {
        _ = recv(fd, &waiting.peekBuffer, waiting.peekBuffer.count, Int32(MSG_DONTWAIT))
        _ = Self.notTLSReply.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        drop(fd, .notTLS, &waiting)
    }

    /// Answers a connection whose first head `limits.screen` refused with the reply made of
    /// its refusal, then closes it. What it sent so far is read first (as much as has come),
    /// so that the close does not reset the connection under the reply; bytes arriving
    /// later may still (its body, say, sent slowly).
    private func refuseHead(_ fd: Int32, _ refusal: HTTPRefusal, _ count: Int, _ waiting: inout Waiting) {
        let (method, path) = Self.methodAndPath(waiting.peekBuffer.prefix(count))
        let reply = renderRefusal(refusal, method, path)
        var reads = 0
        while reads < 64 && recv(fd, &waiting.peekBuffer, waiting.peekBuffer.count, Int32(MSG_DONTWAIT)) > 0 { reads += 1 }
        _ = reply.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        shutdown(fd, Int32(SHUT_WR))
        drop(fd, .malformedHead, &waiting)
    }

    /// The method and path of a request line, as far as they can be told (for a refusal's
    /// request id and text only).
    private static func methodAndPath(_ bytes: ArraySlice<UInt8>) -> (String, String) {
        let line = bytes.drop { $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\n") }
            .prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
        let parts = line.split(separator: UInt8(ascii: " "), maxSplits: 2)
        let method = parts.first.map { String(decoding: $0.prefix(32), as: UTF8.self) } ?? ""
        let path = parts.count > 1 ? String(decoding: parts[1].prefix { $0 != UInt8(ascii: "?") }.prefix(1024), as: UTF8.self) : ""
        return (method, path)
    }

    /// Closes a waiting connection, counting the refusal if it is one.
    private func drop(_ fd: Int32, _ refusal: ConnectionRefusal?, _ waiting: inout Waiting) {
        guard forget(fd, &waiting) != nil else { return }
        connectionsPerAddress.release(fd)
        close(fd)
        if let refusal { waiting.refused[refusal, default: 0] += 1 }
    }

    @discardableResult
    private func forget(_ fd: Int32, _ waiting: inout Waiting) -> Waiting.Peer? {
        loop.forget(fd)
        return waiting.connections.remove(fd)?.value
    }
}
