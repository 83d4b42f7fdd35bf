import CMicroHTTPD
import Foundation
import Lifecycle
import Synchronization

/// Why the server could not start.
public struct HTTPServerError: Error, CustomStringConvertible {
    public var description: String
}

/// An HTTP/1.1 server on libmicrohttpd: request bodies collected up to a limit, and
/// handlers that may answer later from any thread (on plain HTTP the request waits and the
/// answer wakes the loop that drives its daemon, `RequestDaemonLoop`; under TLS the
/// connection is suspended meanwhile and resumed by the answer).
///
/// Two daemons share the work: connections that open with a request for one of
/// `streamPaths` (long-lived event streams) go to one, an epoll thread of libmicrohttpd's,
/// all others to the other, driven by `RequestDaemonLoop` on a thread of ours
/// (`ConnectionSorter` explains the split). As a `Service`, `prepare()` binds
/// and starts the daemons, `run()` is the accept loop, and a requested stop drains: no new
/// connections, new requests on open ones get 503, streams are ended, requests still
/// arriving are waited for (up to `shutdownTimeoutSeconds`), every answer under way is
/// awaited (however long its handler takes) and then sent (up to
/// `answerSendingGraceSeconds`: a client that does not read cannot hold the stop), then
/// the daemons stop.
///
/// HTTPS (`Configuration.tls`) goes through libmicrohttpd's own GnuTLS support, with the
/// certificate handed out per handshake (`TLSCertificates`, reloadable), TLS 1.2 and 1.3
/// with forward-secret AEAD ciphers only (`TLSCertificates.priorities`), and its daemon
/// waiting in poll(2), not epoll (whose loop spins while a handshake waits: `shim.h`). A TLS connection
/// begins with a ClientHello, so the accept loop cannot see which route it will ask for:
/// one daemon (with the request daemon's memory) serves every connection, and event
/// streams stay library-driven — suspended while idle, resumed for each write — because
/// only the library's thread may use the connection's GnuTLS session (ARCHITECTURE.md,
/// "HTTPS", gives the measurements behind this).
///
/// libmicrohttpd aborts the process if a daemon is stopped while one of its connections is
/// suspended (`MHD_stop_daemon`). A connection is suspended while its request waits for
/// its handler's answer (under TLS), and while a stream has nothing to send; so the stop counts the
/// requests handed to a handler and not yet answered, refuses at once (503) any request
/// that would reach a handler after it has given up waiting, and stops the daemons only
/// when none is left. Streams are ended first, which resumes their connections for good.
/// A connection resumed but not yet served again is fine: `MHD_stop_daemon` serves it.
public final class MicroHTTPServer: Service {
    /// Settings of the listening daemon.
    public struct Configuration: Sendable {
        /// An IPv4 or IPv6 literal, or `localhost`.
        public var host = "127.0.0.1"
        /// 0 picks a free port; `port` tells which after `prepare()`.
        public var port = 8080
        /// A listening socket handed over by whoever started the daemon (systemd's socket
        /// activation), served instead of binding `host:port`.
        public var inheritedListenFD: Int32?
        /// Connections at once, all kinds.
        public var connectionLimit = 10_240
        /// Connections of the request daemon are closed after this many seconds without
        /// any byte read or sent (and sooner while a response waits: the send stall timeout).
        public var connectionTimeoutSeconds = 60
        /// The send stall timeout: a response whose socket takes nothing for this long while
        /// bytes wait is closed — a direct stream by the writable watcher, any other by the
        /// library's timeout (whole seconds, at least 1), which is then no longer than this.
        public var streamStallTimeoutSeconds = 30.0
        /// Per-connection buffer memory of libmicrohttpd.
        public var connectionMemoryLimit = 32 * 1024
        /// Paths of long-lived streams: a connection whose first request is `GET` one of
        /// them is served by the stream daemon.
        public var streamPaths: [String] = []
        /// Per-connection buffer memory of the stream daemon's connections.
        public var streamConnectionMemoryLimit = 32 * 1024
        /// A stream request whose head is larger goes to the request daemon (whose
        /// connections have room for it).
        public var maximumStreamHeadBytes = 16 * 1024
        /// A stream request with more query parameters goes to the request daemon too (the
        /// library keeps each parameter in the connection's memory).
        public var maximumStreamQueryParameters = 8
        /// Larger request bodies are refused with 413.
        public var maximumBodyBytes = 64 * 1024
        /// Paths (exactly as routed) whose request bodies may be larger than
        /// `maximumBodyBytes`, with the most bytes each may take: a batch route's.
        public var bodyLimitsByPath: [String: Int] = [:]
        /// Whether a request (its head) may send the larger body of its path: one that will
        /// be refused anyway (no token that allows the route) is held to `maximumBodyBytes`,
        /// so it cannot make the server hold the larger body for each of its connections.
        public var mayTakeLargerBody: @Sendable (HTTPRequest) -> Bool = { _ in true }
        /// The reply bytes a request that may send its path's larger body reserves of
        /// `unreadReplies` from its head, given the body length it announces (nil: chunked),
        /// before any of its body is read: the most its reply may take (0: none). A client
        /// whose share, or everyone's, has no room for them is refused 503
        /// (`HTTPRefusal.repliesUnread`) from its head: its body is dropped as it comes,
        /// never kept or handed to a handler, and the refusal answered once it is whole,
        /// on a connection that stays open. An admitted request carries its reservation to
        /// its handler (`HTTPRequest.replyReservation`). Under a flood of large batches
        /// from one client, the server so keeps and the parser parses only the batches the
        /// client's share admits, not every body sent.
        public var largerBodyReplyBytes: @Sendable (_ announcedBodyBytes: Int?) -> Int = { _ in 0 }
        /// How long after its body has come a request refused from its head
        /// (`largerBodyReplyBytes`) is answered, at most: its `Retry-After`; each waits
        /// between half of it and all of it, at random, so that refusals whose bodies came
        /// together are not answered, and sent again, together. A client that sends again
        /// at once, whatever its refusal says, so sends at most about one body a second on
        /// each connection, and a flood of them keeps the request thread little busier,
        /// where answered at once each would come back at once and keep the thread
        /// reading and dropping bodies (and every other request waiting for its turn).
        public var refusalFromHeadDelaySeconds = 1.0
        /// Requests with more query parameters are refused with 431. Each parameter the
        /// library keeps takes about 50 bytes of the connection's memory.
        public var maximumQueryParameters = 100
        /// Longer request targets are refused with 414.
        public var maximumTargetBytes = 8 * 1024
        /// How long a stop waits for requests still arriving (a body not all sent yet) and
        /// streams still sending; answers under way are waited for however long they take.
        public var shutdownTimeoutSeconds = 10.0
        /// How long a stop waits, once every answer has come, for libmicrohttpd to send
        /// them (a connection the stop closes loses its answer).
        public var answerSendingGraceSeconds = 5.0
        // Connection floods (`ConnectionSorter`).
        /// A connection that has not sent a whole request head this long after its opening or
        /// its previous response is closed.
        public var headTimeoutNanoseconds: UInt64 = 10_000_000_000
        /// A request whose announced body is not whole this long after its head is closed.
        public var bodyTimeoutNanoseconds: UInt64 = 30_000_000_000
        /// Connections waiting for their first head at once; past it the oldest is closed.
        public var maximumWaitingConnections = 1024
        /// Connections open at once from one client address; more are closed at once.
        public var maximumConnectionsPerAddress = 1000
        /// Where the replies of the request daemon's connections are counted until their
        /// clients take them (`--max-unsent-reply-bytes`; nil: nowhere).
        public var unreadReplies: UnreadReplies?
        /// Told the connections closed unserved, counted by reason, at most once a second.
        public var connectionsRefused: @Sendable ([ConnectionRefusal: Int]) -> Void = { _ in }
        /// The monotonic clock of the head timeout, in nanoseconds (tests move their own).
        public var sortingClock: @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }
        /// Serve HTTPS with this certificate and key (nil: plain HTTP). Under TLS there is
        /// one daemon (`MicroHTTPServer` explains why).
        public var tls: TLSCertificateFiles?
        /// Runs on the daemon's thread just before a request resumed by its answer queues
        /// it (tests hold the thread there).
        var beforeQueueingAResumedAnswer: @Sendable () -> Void = {}
        /// The longest the request daemon's loop sleeps when the library names no sooner
        /// time, and while requests only wait for answers (tests make them long, so that
        /// only a wake-up can move the loop).
        var requestLoopLongestSleepMilliseconds: Int32 = 1000
        var requestLoopIdleSleepMilliseconds: Int32 = 20

        public init() {}
    }

    /// The libmicrohttpd handles, set by `prepare()` and cleared when the daemons stop.
    private struct Daemons: @unchecked Sendable {  // libmicrohttpd's daemon handles; used under `daemons` only
        var request: OpaquePointer?
        var stream: OpaquePointer?
        var logTargets: [UnsafeMutableRawPointer] = []
        var sorter: ConnectionSorter?
        /// How the accept loop wakes the epoll daemons (`EpollDaemonNudge`).
        var nudges: [EpollDaemonNudge] = []
    }

    /// What requests and streams share between libmicrohttpd's threads and the stop.
    private struct Traffic {
        var requestsInFlight = 0
        var draining = false
        var openStreams: [ObjectIdentifier: ResponseStream] = [:]
        /// Requests handed to their handler and not yet answered: each keeps its connection
        /// waiting (suspended under TLS) until its answer comes.
        var answersUnderWay = 0
        /// Requests handed to their handler (or refused at that point) whose exchange has
        /// not completed: their answer is still to come or to be sent.
        var answersUnsent = 0
        /// The stop waits for the answers that have come to be sent (for tests).
        var awaitingSends = false
        /// The stop no longer waits for requests still arriving: one that reaches the point
        /// of being handed to its handler is refused at once instead (its connection is
        /// never suspended).
        var closing = false
    }

    let configuration: Configuration
    /// Where every request goes, and how the server's own refusals look.
    let pipeline: HTTPPipeline
    /// Receives libmicrohttpd's own messages, and whether one only says that a client
    /// went away (routine for long-lived streams).
    let libraryLog: (@Sendable (_ message: String, _ clientGone: Bool) -> Void)?
    private let daemons = Locked(Daemons())
    private let traffic = Locked(Traffic())
    /// Rung when the last request under way is answered while draining, or the last answer
    /// under way comes while closing.
    private let drained = Doorbell()
    /// Sends what streams could not send at once, when their sockets take bytes again.
    let writableWatcher: WritableWatcher
    /// Runs the writable watcher's thread while the server runs.
    private let helpers: ServiceGroup
    /// The port bound, 0 before `prepare()`: a part of its own that others may hold (a
    /// middleware that needs the port) instead of holding the server weakly. A weak
    /// reference gives an object a side table, and every count of its references then goes
    /// through that table.
    public let boundPort = BoundPort()
    /// Open connections per client address, from acceptance to close.
    let connectionsPerAddress: ConnectionsPerAddress
    /// The deadline of every request head after a connection's first (checked by the sorter).
    let requestDeadlines: RequestDeadlines
    /// The certificate handed out under TLS (nil: plain HTTP).
    let certificates: TLSCertificates?
    /// Plain HTTP: the loop that drives the request daemon (`RequestDaemonLoop`), and the
    /// group that runs it on a thread of its own (nil under TLS).
    let requestLoop: RequestDaemonLoop?
    private let requestLoopGroup: ServiceGroup?
    /// The idle timeout of the request daemon's connections, in seconds: a request waiting
    /// for its answer on the loop's daemon is exempt meanwhile (`Exchange`).
    private(set) var requestTimeoutSeconds: UInt32 {
        get { UInt32(requestTimeout.load(ordering: .relaxed)) }
        set { requestTimeout.store(Int(newValue), ordering: .relaxed) }
    }
    private let requestTimeout = Atomic<Int>(0)

    /// A server for `configuration`, not yet listening.
    public init(configuration: Configuration, pipeline: HTTPPipeline,
                libraryLog: (@Sendable (_ message: String, _ clientGone: Bool) -> Void)? = nil) throws {
        self.configuration = configuration
        self.pipeline = pipeline
        self.libraryLog = libraryLog
        connectionsPerAddress = ConnectionsPerAddress(limit: configuration.maximumConnectionsPerAddress)
        requestDeadlines = RequestDeadlines(headTimeoutNanoseconds: configuration.headTimeoutNanoseconds,
                                            bodyTimeoutNanoseconds: configuration.bodyTimeoutNanoseconds,
                                      now: configuration.sortingClock)
        writableWatcher = try WritableWatcher(
            stallTimeoutNanoseconds: UInt64(configuration.streamStallTimeoutSeconds * 1_000_000_000))
        helpers = ServiceGroup([ServiceGroup.Member("headway-flush", writableWatcher)])
        // A handshake ends, or its connection is closed, within the head timeout.
        certificates = try configuration.tls.map {
            try TLSCertificates(files: $0, retentionNanoseconds: max(60_000_000_000, 2 * configuration.headTimeoutNanoseconds),
                                now: configuration.sortingClock)
        }
        let connectionsPerAddress = connectionsPerAddress
        requestLoop = configuration.tls == nil
            ? try RequestDaemonLoop(longestSleepMilliseconds: configuration.requestLoopLongestSleepMilliseconds,
                                    idleSleepMilliseconds: configuration.requestLoopIdleSleepMilliseconds,
                                    connectionLimit: configuration.connectionLimit,
                                    refused: { connectionsPerAddress.release($0) })
            : nil
        requestLoopGroup = requestLoop.map { ServiceGroup([ServiceGroup.Member("headway-http", $0)]) }
    }

    /// Whether the server speaks HTTPS.
    public var isTLS: Bool { certificates != nil }

    /// The SHA-256 fingerprint of the certificate handed out now (nil: plain HTTP).
    public var certificateFingerprint: String? { certificates?.fingerprint }

    /// When the certificate handed out now is valid (nil: plain HTTP).
    public var certificateValidity: TLSCertificateValidity? { certificates?.validity }

    /// Reads the certificate and key files again; new connections get the new certificate,
    /// open ones keep going. Returns its SHA-256 fingerprint. Throws, keeping the current
    /// one, if the files cannot serve; nil without TLS.
    public func reloadCertificate() throws -> String? {
        try certificates?.reload()
    }

    /// The port the server listens on (known after `prepare()`).
    public var port: Int { boundPort.value }

    /// Binds, and starts the daemons and the writable watcher.
    public func prepare() throws {
        let context = Unmanaged.passUnretained(self).toOpaque()
        func startDaemon(memoryLimit: Int, timeoutSeconds: Int, externalLoop: Bool) throws -> OpaquePointer {
            var logTarget: UnsafeMutableRawPointer?
            guard let daemon = headway_mhd_start(
                accessHandlerCallback, context, requestCompletedCallback, context, libraryLogCallback, context, &logTarget,
                targetCheckCallback, context,
                connectionNotifyCallback, context,
                externalLoop ? 1 : 0,
                UInt32(configuration.connectionLimit), UInt32(timeoutSeconds), memoryLimit,
                certificates == nil ? nil : unsafeBitCast(tlsCertificateCallback, to: UnsafeMutableRawPointer.self),
                TLSCertificates.priorities)
            else { throw HTTPServerError(description: "cannot start libmicrohttpd") }
            if let logTarget { daemons.withLock { $0.logTargets.append(logTarget) } }
            return daemon
        }
        // The library's timeout counts from the last byte read or sent: while a response
        // waits for its client to read, that is the time its socket has taken nothing.
        let sendStallSeconds = max(1, Int(configuration.streamStallTimeoutSeconds.rounded(.up)))
        let listenFD = try configuration.inheritedListenFD.map(SocketAddress.adopt)
            ?? SocketAddress.listen(host: configuration.host, port: configuration.port)
        boundPort.value = SocketAddress.boundPort(fd: listenFD) ?? configuration.port
        do {
            try helpers.start()
            requestTimeoutSeconds = UInt32(min(configuration.connectionTimeoutSeconds, sendStallSeconds))
            let requestDaemon = try startDaemon(memoryLimit: configuration.connectionMemoryLimit,
                                                timeoutSeconds: Int(requestTimeoutSeconds),
                                                externalLoop: requestLoop != nil)
            daemons.withLock { $0.request = requestDaemon }
            if let requestLoop, let requestLoopGroup {
                try requestLoop.attach(requestDaemon)
                try requestLoopGroup.start()
            }
            // Under TLS the first bytes are a ClientHello: nothing tells a stream apart before
            // the library has decrypted its request, so one daemon serves all.
            let streamDaemon = configuration.streamPaths.isEmpty || certificates != nil
                ? requestDaemon
                : try startDaemon(memoryLimit: configuration.streamConnectionMemoryLimit,
                                  // A stream not yet direct stalls on the library's timeout.
                                  timeoutSeconds: sendStallSeconds, externalLoop: false)
            daemons.withLock { daemons in
                daemons.stream = streamDaemon
                // The loop's daemon waits in no epoll_wait of its own: only a threaded one needs nudges.
                daemons.nudges = Set([requestDaemon, streamDaemon]).subtracting([requestLoop?.daemon].compactMap { $0 })
                    .compactMap(EpollDaemonNudge.init(daemon:))
            }
            var limits = ConnectionSorter.Limits()
            limits.streamPaths = configuration.streamPaths
            limits.maximumStreamHead = configuration.maximumStreamHeadBytes
            limits.maximumStreamQueryParameters = configuration.maximumStreamQueryParameters
            limits.maximumHead = configuration.connectionMemoryLimit
            limits.maximumWaiting = configuration.maximumWaitingConnections
            limits.headTimeoutNanoseconds = configuration.headTimeoutNanoseconds
            limits.expectsTLS = certificates != nil
            if certificates == nil {
                // A head the library would answer with a page of its own is refused by the accept loop.
                limits.screen = HeadScreen(
                    memoryLimit: configuration.connectionMemoryLimit, maximumTargetBytes: configuration.maximumTargetBytes,
                    maximumBodyBytes: max(configuration.maximumBodyBytes, configuration.bodyLimitsByPath.values.max() ?? 0),
                    maximumQueryParameters: configuration.maximumQueryParameters)
                limits.maximumStreamWeight = configuration.streamConnectionMemoryLimit - HeadScreen.reserve
            }
            let sorter = try ConnectionSorter(
                listenFD: listenFD, limits: limits, connectionsPerAddress: connectionsPerAddress, requestDeadlines: requestDeadlines,
                monotonicNow: configuration.sortingClock, reportRefusals: configuration.connectionsRefused,
                nudgeDaemons: { [unowned self] in daemons.withLock { $0.nudges }.forEach { $0.nudge() } },
                renderRefusal: { [pipeline] refusal, method, path in Self.closingReply(to: refusal, method: method, path: path, pipeline) }
            ) { [unowned self] fd, route, address, length in
                let daemon = daemons.withLock { route == .stream ? $0.stream : $0.request }
                if let requestLoop, daemon == requestLoop.daemon {
                    // Only the loop's thread may add a connection to its daemon.
                    requestLoop.add(fd, address: address, length: length)
                // libmicrohttpd closes the socket if it cannot take it (at its connection limit).
                } else if MHD_add_connection(daemon, fd, address, length) != MHD_Result.YES {
                    connectionsPerAddress.release(fd)
                }
            }
            daemons.withLock { $0.sorter = sorter }
        } catch {
            close(listenFD)
            stopDaemons()
            throw error
        }
    }

    /// Accepts connections until a stop is requested, then drains (see the type) and
    /// returns once the daemons have stopped.
    public func run() {
        guard let sorter = daemons.withLock({ $0.sorter }) else { return }
        sorter.run()
        let streams = traffic.withLock { traffic in
            traffic.draining = true
            return Array(traffic.openStreams.values)
        }
        // A suspended connection would make MHD_stop_daemon abort: end (and so resume) them all.
        streams.forEach { $0.finish() }
        let deadline = DispatchTime.now() + configuration.shutdownTimeoutSeconds
        while traffic.withLock({ $0.requestsInFlight > 0 }) && drained.wait(until: deadline) {}
        // A stream whose client stopped reading cannot finish: close it.
        streams.forEach { $0.abort() }
        awaitAnswersUnderWay()
        awaitAnswersSent()
        stopDaemons()
    }

    /// Waits (up to `answerSendingGraceSeconds`) until libmicrohttpd has sent every answer
    /// that has come: an answer resumes its connection, but the daemon's thread sends it
    /// later, and `MHD_stop_daemon` would close the connection first.
    private func awaitAnswersSent() {
        let deadline = DispatchTime.now() + configuration.answerSendingGraceSeconds
        traffic.withLock { $0.awaitingSends = true }
        while traffic.withLock({ $0.answersUnsent > 0 }) && drained.wait(until: deadline) {}
    }

    /// Whether the stop is waiting for answers to be sent (for tests).
    var isAwaitingAnswersSent: Bool { traffic.withLock { $0.awaitingSends } }

    /// Refuses from now on every request not yet handed to its handler, then waits for
    /// the answers still under way, as long as they take (a writer behind a slow disk):
    /// afterwards no connection is suspended, nor can one be.
    private func awaitAnswersUnderWay() {
        let waiting = traffic.withLock { traffic in
            traffic.closing = true
            return traffic.answersUnderWay
        }
        if waiting > 0 {
            libraryLog?("stop waits for \(waiting) answer\(waiting == 1 ? "" : "s") still under way", false)
        }
        while traffic.withLock({ $0.answersUnderWay > 0 }) { drained.wait() }
    }

    /// Starts draining: new requests get 503 at once, and the accept loop ends.
    public func requestStop() {
        traffic.withLock { $0.draining = true }
        if let sorter = daemons.withLock({ $0.sorter }) {
            sorter.requestStop()
        }
    }

    /// The whole reply to a request refused before any daemon read it (`HeadScreen`): the
    /// pipeline's answer to `refusal`, with `Date`, its `X-Request-Id` (if the pipeline gives
    /// ids), `Content-Length` and `Connection: close`.
    static func closingReply(to refusal: HTTPRefusal, method: String, path: String, _ pipeline: HTTPPipeline) -> [UInt8] {
        var request = HTTPRequest(method: method, path: path)
        request.isRefused = true
        if let requestIDs = pipeline.requestIDs { request.requestID = requestIDs.id(for: request) }
        let response = pipeline.response(for: refusal, request)
        var head = "HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\nDate: \(httpDate())\r\n"
        for field in response.headers where !["connection", "content-length"].contains(field.name.lowercased()) {
            head += "\(field.name): \(field.value)\r\n"
        }
        if !request.requestID.isEmpty { head += "X-Request-Id: \(request.requestID)\r\n" }
        head += "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + response.body
    }

    /// The reason phrase of a status the server sends by itself.
    private static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 431: "Request Header Fields Too Large"
        case 505: "HTTP Version Not Supported"
        default: "Error"
        }
    }

    /// Now as an HTTP date (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`).
    private static func httpDate() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Whether a message of libmicrohttpd's reports only what clients do routinely, once per
    /// connection (so a client decides how many there are): it went away, or its stream
    /// was cut off by the server (the stream's reader ends with an error, which the
    /// library reports as its application's).
    static func saysClientGone(_ message: String) -> Bool {
        ["closed by remote peer", "closed by remote side with incomplete request", "no longer available",
         "has been disconnected when reading request", "socket is not connected",
         "Connection reset", "Broken pipe", "detected connection closure", "shut down for writing or no longer connected",
         "application error generating response", "application reported error generating data"].contains { message.contains($0) }
    }

    /// Connections accepted and not yet sorted (for tests).
    var connectionsBeingSorted: Int { daemons.withLock { $0.sorter }?.waitingCount ?? 0 }

    /// The accept loop (for tests).
    var sorter: ConnectionSorter? { daemons.withLock { $0.sorter } }

    private func stopDaemons() {
        let stopped = daemons.withLock { daemons in
            defer { daemons = Daemons() }
            return daemons
        }
        if let stream = stopped.stream, stream != stopped.request { MHD_stop_daemon(stream) }
        // The loop must have left MHD_run before its daemon stops.
        requestLoopGroup?.stop()
        if let request = stopped.request { MHD_stop_daemon(request) }
        // No handshake runs any more.
        if stopped.request != nil { certificates?.releaseSuperseded() }
        stopped.logTargets.forEach(headway_mhd_free_log_target)
        helpers.stop()
    }

    // MARK: - Called on the libmicrohttpd thread

    func access(_ connection: OpaquePointer, url: UnsafePointer<CChar>, method: UnsafePointer<CChar>,
                version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
                uploadSize: UnsafeMutablePointer<Int>, context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        // Woken by a resume, a daemon thread should not preempt the writer that is resuming
        // a whole committed batch: it answers the batch in one pass once the writer is done,
        // instead of switching back and forth once per request.
        headway_schedule_as_batch_once()
        // The first call of a request finds no context, or the refusal of its target.
        guard let existing = context.pointee,
              let exchange = Unmanaged<AnyObject>.fromOpaque(existing).takeUnretainedValue() as? Exchange
        else {
            let note = context.pointee.map { Unmanaged<TargetNote>.fromOpaque($0).takeRetainedValue() }
            context.pointee = nil
            // The target and method become strings here only: later calls of the same
            // request (its body, its dispatch, its answer) do not need them.
            return begin(connection, url: String(cString: url), method: String(cString: method), methodStart: method,
                         isHTTP11: version.map { strcmp($0, MHD_HTTP_VERSION_1_1) == 0 } ?? false,
                         refusal: note?.refusal, pathAsSent: note?.pathAsSent, context: context)
        }
        if uploadSize.pointee > 0 {
            exchange.loop?.noteProgress()
            exchange.receive(UnsafeRawBufferPointer(start: uploadData, count: uploadSize.pointee))
            uploadSize.pointee = 0
            // A client that goes on sending long after the limit is cut off.
            return exchange.discardedBytes > 64 * exchange.bodyLimit ? MHD_Result.NO : MHD_Result.YES
        }
        if exchange.bodyTooLarge {
            return exchange.dispatchOrQueue { pipeline.refuse(.bodyTooLarge(limit: exchange.bodyLimit), $0, $1) }
        }
        if let refusal = exchange.refusedFromHead {
            let delay = configuration.refusalFromHeadDelaySeconds * Double.random(in: 0.5...1)
            exchange.suspendsWhileWaiting = true
            return exchange.dispatchOrQueue { pipeline.refuse(refusal, $0, DelayedResponder(base: $1, seconds: delay)) }
        }
        return exchange.dispatchOrQueue(pipeline.handle)
    }

    /// Checks a request's raw target before the library parses it (and percent-decodes its
    /// path in place): a refused one keeps no query parameters. What the request's first
    /// context (`access`) then holds: the refusal, if any, and the path as sent, if the
    /// decoded one would not show it (`TargetNote`).
    func checkTarget(_ target: UnsafePointer<CChar>) -> UnsafeMutableRawPointer? {
        let check = TargetCheck(maximumQueryParameters: configuration.maximumQueryParameters,
                                maximumTargetBytes: configuration.maximumTargetBytes)
        let bytes = UnsafeRawBufferPointer(start: target, count: strlen(target))
        let hasRawNUL = headway_target_has_raw_nul(target) != 0
        let refusal = hasRawNUL ? .nulInTarget : check.refusal(for: bytes)
        let pathAsSent = TargetCheck.pathAsSent(bytes, cutByNUL: hasRawNUL)
        guard refusal != nil || pathAsSent != nil else { return nil }
        if refusal != nil { headway_drop_query(target) }
        return Unmanaged.passRetained(TargetNote(refusal: refusal, pathAsSent: pathAsSent)).toOpaque()
    }

    private func begin(_ connection: OpaquePointer, url: String, method: String, methodStart: UnsafePointer<CChar>,
                       isHTTP11: Bool, refusal: HTTPRefusal?,
                       pathAsSent: String?, context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        // Checked first, before the body is read or anything answered: a head a proxy in
        // front could read otherwise is refused, and its connection closed.
        let fields = Self.headFields(connection, method: methodStart)
        let headRefusal = HeadCheck.refusal(for: fields, isHTTP11: isHTTP11)
        let headers = fields.map(Self.header)
        let query = Self.queryArguments(connection)
        let isDraining = traffic.withLock { traffic in
            traffic.requestsInFlight += 1
            return traffic.draining
        }
        var request = HTTPRequest(method: method, path: url, query: query, headers: headers)
        if let address = headway_connection_client_address(connection) {
            request.clientAddress = ConnectionsPerAddress.Address(address)?.hashValue ?? 0
            request.client = request.clientAddress
        }
        // A handful of paths at most: compared (lengths first), not hashed, for each request.
        let urlLength = url.utf8.count
        let largerLimit = configuration.bodyLimitsByPath.first { $0.key.utf8.count == urlLength && $0.key == url }
            .flatMap { configuration.mayTakeLargerBody(request) ? $0.value : nil }
        let loop = requestLoop.flatMap { headway_connection_daemon(connection) == $0.daemon ? $0 : nil }
        loop?.noteProgress()
        let exchange = Exchange(connection: connection, request: request, server: self,
                                bodyLimit: largerLimit ?? configuration.maximumBodyBytes, loop: loop)
        exchange.pathAsSent = pathAsSent
        // A stream's body is then sent in chunks, which its writer may send itself.
        exchange.isChunkedKeepAlive = isHTTP11 && request.header("connection")?.lowercased() != "close"
        context.pointee = Unmanaged.passRetained(exchange).toOpaque()
        // The head is whole: a body announced now has its own deadline, until dispatched.
        let contentLength = request.header("content-length").flatMap(UInt64.init)
        exchange.awaitsBody = (contentLength ?? 0) > 0 || request.header("transfer-encoding") != nil
        if exchange.awaitsBody {
            requestDeadlines.startWaitingForBody(headway_connection_fd(connection))
        } else {
            requestDeadlines.stopWaiting(headway_connection_fd(connection))
        }
        if let headRefusal {
            exchange.closesConnection = true
            return exchange.dispatchOrQueue { pipeline.refuse(headRefusal, $0, $1) }
        }
        if isDraining {
            return exchange.dispatchOrQueue { pipeline.refuse(.shuttingDown, $0, $1) }
        }
        if let refusal {
            return exchange.dispatchOrQueue { pipeline.refuse(refusal, $0, $1) }
        }
        if let length = contentLength, length > exchange.bodyLimit {
            return exchange.dispatchOrQueue { pipeline.refuse(.bodyTooLarge(limit: exchange.bodyLimit), $0, $1) }
        }
        if largerLimit != nil, let unreadReplies = configuration.unreadReplies {
            let bytes = configuration.largerBodyReplyBytes(contentLength.map { Int(clamping: $0) })
            if bytes > 0 {
                let (reservation, clientBytes, totalBytes) = unreadReplies.reservation(bytes, client: request.clientAddress)
                guard let reservation else {
                    // Answered once the body has come, each piece dropped as it comes: answered
                    // now, the connection would have to close (its body unread), and a client
                    // sending batches again at once would open a connection for each, which
                    // costs the server more than dropping the body.
                    exchange.refuseFromHead(.repliesUnread(clientBytes: clientBytes, totalBytes: totalBytes))
                    return MHD_Result.YES
                }
                exchange.hold(reservation)
            }
        }
        return MHD_Result.YES
    }

    /// Requests whose head was read and whose exchange is not over (for tests).
    var requestsUnderWay: Int { traffic.withLock { $0.requestsInFlight } }

    func streamOpened(_ stream: ResponseStream) -> Bool {
        traffic.withLock { traffic in
            guard !traffic.draining else { return false }
            traffic.openStreams[ObjectIdentifier(stream)] = stream
            return true
        }
    }

    func streamClosed(_ stream: ResponseStream) {
        _ = traffic.withLock { $0.openStreams.removeValue(forKey: ObjectIdentifier(stream)) }
    }

    /// A request is about to be handed to its handler: it counts as under way until
    /// answered. Returns false once the stop has closed (see `awaitAnswersUnderWay`): the
    /// request must then be refused at once.
    func handingOver() -> Bool {
        traffic.withLock { traffic in
            traffic.answersUnderWay += 1
            traffic.answersUnsent += 1
            return !traffic.closing
        }
    }

    /// The answer of a request counted by `handingOver` has come.
    func answered() {
        let lastWhileClosing = traffic.withLock { traffic in
            traffic.answersUnderWay -= 1
            return traffic.answersUnderWay == 0 && traffic.closing
        }
        if lastWhileClosing { drained.ring() }
    }

    /// A request is over: a connection kept alive now waits for its next head (one closing
    /// is forgotten by its close notice).
    func completed(_ connection: OpaquePointer?, _ context: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                   _ termination: MHD_RequestTerminationCode) {
        if let connection, termination == .REQUEST_TERMINATED_COMPLETED_OK {
            let fd = headway_connection_fd(connection)
            requestDeadlines.startWaiting(fd)
            configuration.unreadReplies?.written(on: fd)
        }
        guard let context, let pointer = context.pointee else { return }
        context.pointee = nil
        // A target's note whose request never began (the connection closed first, or the library
        // refused the head itself) is only released.
        guard let exchange = Unmanaged<AnyObject>.fromOpaque(pointer).takeRetainedValue() as? Exchange else { return }
        exchange.loop?.noteProgress()
        let wasHandedOver = exchange.wasHandedOver  // read first: an exchange's lock is never taken under `traffic`
        let drainedNow = traffic.withLock { traffic in
            traffic.requestsInFlight -= 1
            if wasHandedOver { traffic.answersUnsent -= 1 }
            return (traffic.requestsInFlight == 0 && traffic.draining)
                || (wasHandedOver && traffic.answersUnsent == 0 && traffic.closing)
        }
        if drainedNow { drained.ring() }
        exchange.complete()
    }

    /// The request's header lines as the library gave them, names in lower case. libmicrohttpd
    /// 0.9.75 parses a line in place (`name\0` then optional whitespace then the value), but
    /// appends a line folded onto it (obs-fold: a line that begins with a space or a tab)
    /// to its *name*, in a copy elsewhere in the connection's memory: a field whose value
    /// does not follow its name, its NUL and only spaces or tabs, was folded. A NUL in a
    /// value ends it for the library (its length too), but not the line: the bytes from a
    /// value's end to the next line's name (or, for the last, to the end of the head, from
    /// `method`, which begins it, `headway_connection_head_size` bytes on) are the NULs the
    /// library wrote over the line ends, and anything else came after a NUL of the value
    /// (one at the very end of a value cannot be told from a line end: it hides nothing).
    /// The lines are gathered into an array reserved at their count (the library counts
    /// them when given no callback): one allocation a request.
    private static func headFields(_ connection: OpaquePointer, method: UnsafePointer<CChar>) -> [HeadCheck.Field] {
        struct Gathered {
            var fields: [HeadCheck.Field] = []
            /// Where the last field's value ends, if its line lies in place.
            var valueEnd: UnsafePointer<CChar>?

            /// Marks the last field if anything but NULs lies between its value's end and `next`.
            mutating func checkLineEnd(before next: UnsafePointer<CChar>) {
                guard let valueEnd, !fields.isEmpty else { return }
                let gap = valueEnd.distance(to: next)
                // Both lie in the connection's memory; a gap beyond it is no gap of one line end.
                if (1...16 * 1024).contains(gap) && !(0..<gap).allSatisfy({ valueEnd[$0] == 0 }) {
                    fields[fields.count - 1].controlInValue = true
                }
            }
        }
        var gathered = Gathered()
        gathered.fields.reserveCapacity(Int(MHD_get_connection_values(connection, .HEADER_KIND, nil, nil)))
        _ = withUnsafeMutablePointer(to: &gathered) { gathered in
            MHD_get_connection_values(connection, .HEADER_KIND, { cls, _, key, value in
                guard let cls, let key else { return MHD_Result.YES }
                let gathered = cls.assumingMemoryBound(to: Gathered.self)
                gathered.pointee.checkLineEnd(before: key)
                gathered.pointee.valueEnd = nil
                var field = HeadCheck.Field(name: String(lowercasingASCII: key), value: value.map { String(cString: $0) } ?? "")
                if let value {
                    let length = strlen(value)
                    field.controlInValue = HeadCheck.hasControlCharacter(UnsafeRawBufferPointer(start: value, count: length))
                    let afterName = key + strlen(key) + 1
                    let gap = afterName.distance(to: value)
                    // Both lie in the connection's memory; a gap beyond it is no gap of one line.
                    field.folded = !(0...16 * 1024).contains(gap)
                        || !(0..<gap).allSatisfy { afterName[$0] == 0x20 || afterName[$0] == 0x09 }
                    if !field.folded { gathered.pointee.valueEnd = value + length }
                }
                gathered.pointee.fields.append(field)
                return MHD_Result.YES
            }, gathered)
        }
        let headSize = headway_connection_head_size(connection)
        if headSize > 0 { gathered.checkLineEnd(before: method + headSize) }
        return gathered.fields
    }

    /// A header line as handlers see it: the name in lower case, the value without the
    /// spaces and tabs around it (RFC 9110 §5.5; the library drops those before it only).
    private static func header(_ field: HeadCheck.Field) -> HTTPField {
        var value = field.value
        if let last = value.utf8.last, last == 0x20 || last == 0x09 {
            value = String(decoding: value.utf8.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed(), as: UTF8.self)
        }
        return HTTPField(field.name, value)
    }

    /// The request's query arguments, names and values as the library decoded them (none
    /// allocates nothing; like `headFields`, one array reserved at their count).
    private static func queryArguments(_ connection: OpaquePointer) -> [HTTPField] {
        let count = Int(MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, nil, nil))
        guard count > 0 else { return [] }
        var fields: [HTTPField] = []
        fields.reserveCapacity(count)
        _ = withUnsafeMutablePointer(to: &fields) { fields in
            MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, { cls, _, key, value in
                guard let cls, let key else { return MHD_Result.YES }
                cls.assumingMemoryBound(to: [HTTPField].self).pointee
                    .append(HTTPField(String(cString: key), value.map { String(cString: $0) } ?? ""))
                return MHD_Result.YES
            }, fields)
        }
        return fields
    }
}

/// One request on one connection, from its headers to its completion. Its mutex orders the
/// handler's answer (any thread) against suspension (libmicrohttpd's thread), so a
/// connection is resumed only when it is really suspended; on a loop's daemon, against
/// the wait, so an answer that comes after the request began to wait wakes the loop.
final class Exchange: Responder, RouteNote, @unchecked Sendable {  // libmicrohttpd's connection handle; `request` and the body counts are used on the daemon's thread only
    /// What the answer (any thread) and the daemon's thread share.
    private struct Answer {
        var dispatched = false
        var suspended = false
        /// Waiting for the answer without being suspended (a `RequestDaemonLoop`'s daemon
        /// calls the handler again at each run).
        var waiting = false
        var pending: HTTPResponse?
        var sentStatus: Int?
        var completionHandlers: [@Sendable (HTTPCompletion) -> Void] = []
    }

    private let answer = Locked(Answer())
    /// `Answer.waiting` while no answer has come, readable without the lock (the loop's
    /// daemon asks at every run).
    private let waitsWithoutAnswer = Atomic<Bool>(false)
    private let connection: OpaquePointer
    /// Held strongly (one count at the start and one at the end of the exchange): an
    /// `unowned` reference costs an atomic check that the server lives at every use.
    private let server: MicroHTTPServer
    private(set) var request: HTTPRequest
    private(set) var bodyTooLarge = false
    /// The refusal decided from the head (`MicroHTTPServer.Configuration.largerBodyReplyBytes`):
    /// the body is dropped as it comes, and the refusal answered once it is whole.
    private(set) var refusedFromHead: HTTPRefusal?
    private(set) var discardedBytes = 0
    /// An HTTP/1.1 request not asking to close: a body of unknown length goes out chunked.
    var isChunkedKeepAlive = false
    /// The answer closes the connection (`Connection: close`), whatever it says: nothing
    /// after this request on it is read (a head refused by `HeadCheck`).
    var closesConnection = false
    /// Its head announced a body: the connection has the body deadline until the request is
    /// dispatched (`RequestDeadlines`).
    var awaitsBody = false
    /// On a loop's daemon too, the connection is suspended while the request waits for its
    /// answer, so that the library leaves it alone at each run (a refusal answered late:
    /// `MicroHTTPServer.Configuration.refusalFromHeadDelaySeconds`; hundreds may wait at once).
    var suspendsWhileWaiting = false
    /// The path as the client sent it, escaped, when the decoded `request.path` would not
    /// show it (`TargetCheck.pathAsSent`): what the exchange's record names.
    var pathAsSent: String?
    private let started = DispatchTime.now().uptimeNanoseconds
    /// The route the request matched, noted by the router when the pipeline observes exchanges.
    private let matchedRoute = NotedRoute()
    /// The most bytes the request's body may take (its path's limit).
    let bodyLimit: Int
    /// The loop that drives the connection's daemon, if one does: the request then waits for
    /// its answer without being suspended, and the answer wakes the loop.
    let loop: RequestDaemonLoop?
    /// The number of the client's address (`HTTPRequest.clientAddress`), kept apart from
    /// `request`, whose fields are let go once it is handed over.
    private let clientAddress: Int
    /// Reply bytes reserved for the request from its head: released when it is answered or,
    /// unanswered, when the exchange ends.
    private var replyReservation: ReplyReservation?

    init(connection: OpaquePointer, request: HTTPRequest, server: MicroHTTPServer, bodyLimit: Int,
         loop: RequestDaemonLoop? = nil) {
        self.connection = connection
        self.request = request
        clientAddress = request.clientAddress
        if let requestIDs = server.pipeline.requestIDs { self.request.requestID = requestIDs.id(for: request) }
        self.server = server
        self.bodyLimit = bodyLimit
        self.loop = loop
    }

    /// Holds `reservation` for the request (daemon's thread, before the request is handed
    /// over), which its handler finds in `HTTPRequest.replyReservation`.
    func hold(_ reservation: ReplyReservation) {
        replyReservation = reservation
        request.replyReservation = reservation
    }

    /// Refuses the request with `refusal` once its body is whole; the body is not kept.
    func refuseFromHead(_ refusal: HTTPRefusal) {
        refusedFromHead = refusal
    }

    /// Keeps a piece of the body, or, once the body passes `bodyLimit`, counts and drops it
    /// (a request refused from its head keeps none).
    func receive(_ chunk: UnsafeRawBufferPointer) {
        if refusedFromHead != nil {
            discardedBytes += chunk.count
        } else if bodyTooLarge || request.body.count + chunk.count > bodyLimit {
            bodyTooLarge = true
            discardedBytes += chunk.count
            request.body = []
        } else {
            request.body.append(contentsOf: chunk)
        }
    }

    /// First time: hands the request to `handler`; queues its answer if it came at once,
    /// else suspends (or, on a loop's daemon, waits to be called again). After a resume, or
    /// when called again: queues the answer that came.
    func dispatchOrQueue(_ handler: HTTPHandler) -> MHD_Result {
        enum Step { case queue(HTTPResponse), dispatch, wait }
        let step = answer.withLock { answer -> Step in
            if let response = answer.pending { return .queue(response) }
            if answer.dispatched { return .wait }
            answer.dispatched = true
            return .dispatch
        }
        switch step {
        case .queue(let response):
            loop?.noteProgress()
            server.configuration.beforeQueueingAResumedAnswer()
            return queue(response)
        case .dispatch:
            if awaitsBody { server.requestDeadlines.stopWaiting(headway_connection_fd(connection)) }
            // Only the request line is kept from now on (a long-lived stream should not keep
            // its headers and body): the whole request is swapped out into a local the
            // handler borrows, where lending the stored property would copy it.
            var handed = HTTPRequest(method: request.method, path: request.path, requestID: request.requestID)
            swap(&handed, &request)
            if server.pipeline.observeExchange != nil { handed.routeNote = self }
            if server.handingOver() {
                handler(handed, self)
            } else {
                server.pipeline.refuse(.shuttingDown, handed, self)
            }
        case .wait:
            // Called again by the loop's daemon, still without an answer: nothing moved.
            if loop != nil { return MHD_Result.YES }
        }
        loop?.noteProgress()
        return answer.withLock { answer in
            if let response = answer.pending { return queue(response, &answer) }
            if let loop, !suspendsWhileWaiting {
                answer.waiting = true
                loop.requestWaits(true)
                waitsWithoutAnswer.store(true, ordering: .sequentiallyConsistent)
                // Not suspended, the connection would count as idle since its last byte and
                // be closed by the library's timeout while its request waits (a commit behind
                // a slow disk or a locked database): no timeout until the answer is queued.
                headway_connection_set_timeout(connection, 0)
            } else {
                answer.suspended = true
                MHD_suspend_connection(connection)
            }
            return MHD_Result.YES
        }
    }

    /// Takes the first answer (later ones are ignored) and resumes the connection if it
    /// waits for it.
    func respond(_ response: consuming HTTPResponse) {
        // The reply counts from now on as it is queued (`UnreadReplies.queued`), in place of
        // what was reserved for it.
        replyReservation?.release()
        let (first, wakeLoop) = answer.withLock { answer in
            guard answer.pending == nil else { return (false, false) }
            answer.pending = response
            if answer.waiting { waitsWithoutAnswer.store(false, ordering: .sequentiallyConsistent) }
            // A resume wakes no loop by itself.
            let resumed = answer.suspended
            if answer.suspended {
                answer.suspended = false
                MHD_resume_connection(connection)
            }
            return (true, answer.waiting || resumed)
        }
        if wakeLoop { loop?.wake() }
        if first { server.answered() }
    }

    /// Whether the request, on a loop's daemon, waits for an answer that has not come.
    var isWaitingForAnswer: Bool { waitsWithoutAnswer.load(ordering: .sequentiallyConsistent) }

    /// Whether the request was handed to its handler (or refused at that point): counted
    /// by `MicroHTTPServer.handingOver`.
    var wasHandedOver: Bool { answer.withLock { $0.dispatched } }

    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) {
        answer.withLock { $0.completionHandlers.append(handler) }
    }

    func note(_ route: RoutePattern) { matchedRoute.note(route) }

    /// The exchange is over: tells the pipeline's observer (if the request was handed to the
    /// pipeline: one cut off before, by its client, a deadline or the library, is not an
    /// exchange the pipeline saw) and those who asked what was sent.
    func complete() {
        replyReservation?.release()
        let (status, handlers, dispatched) = answer.withLock { answer in
            if answer.waiting {  // the connection closed while its request waited
                answer.waiting = false
                loop?.requestWaits(false)
            }
            return (answer.sentStatus, answer.completionHandlers, answer.dispatched)
        }
        let completion = HTTPCompletion(status: status,
                                        durationMicroseconds: Int64((DispatchTime.now().uptimeNanoseconds - started) / 1000))
        if dispatched, let observe = server.pipeline.observeExchange {
            observe(ExchangeRecord(requestID: request.requestID, method: request.method, path: pathAsSent ?? request.path,
                                   route: matchedRoute.route, status: status,
                                   durationMicroseconds: completion.durationMicroseconds))
        }
        handlers.forEach { $0(completion) }
    }

    private func queue(_ response: HTTPResponse) -> MHD_Result {
        answer.withLock { queue(response, &$0) }
    }

    private func queue(_ response: HTTPResponse, _ answer: inout Answer) -> MHD_Result {
        guard answer.sentStatus == nil else { return MHD_Result.YES }
        if answer.waiting {
            answer.waiting = false
            loop?.requestWaits(false)
            // The library's timeout again: it is now the time the client may take to read.
            headway_connection_set_timeout(connection, server.requestTimeoutSeconds)
        }
        let mhdResponse: OpaquePointer?
        if let stream = response.stream {
            guard server.streamOpened(stream) else {
                // The server began to stop after the handler answered: the stream never starts.
                stream.connectionClosed()
                var refusal = server.pipeline.response(for: .shuttingDown, request)
                refusal.headers += response.headers.filter { field in
                    !field.name.lowercased().hasPrefix("content-")
                        && !refusal.headers.contains { $0.name.lowercased() == field.name.lowercased() }
                }
                return queue(refusal, &answer)
            }
            // Under TLS only the library may write the socket (its GnuTLS session): the
            // stream stays library-driven.
            let writesDirectly = isChunkedKeepAlive && !server.isTLS
            stream.attach(connection, directSocket: writesDirectly ? headway_connection_fd(connection) : -1,
                          watcher: server.writableWatcher, loop: loop)
            stream.onClose { [server] in server.streamClosed(stream) }
            // The block is the library's buffer for a body sent without chunks (HTTP/1.0, or a
            // client closing after it): a chunked body is read into the connection's own
            // memory instead, so a chunked stream keeps only a token block, not 2 KiB each.
            let readerBlock = isChunkedKeepAlive ? 256 : 2048
            mhdResponse = MHD_create_response_from_callback(UInt64.max, readerBlock, streamReaderCallback,
                                                            Unmanaged.passRetained(stream).toOpaque(), streamFreeCallback)
        } else {
            mhdResponse = response.body.withUnsafeBytes { raw in
                MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress),
                                                .RESPMEM_MUST_COPY)
            }
            if mhdResponse != nil, let unreadReplies = server.configuration.unreadReplies {
                unreadReplies.queued(response.body.count, on: headway_connection_fd(connection), client: clientAddress)
            }
        }
        guard let mhdResponse else { return MHD_Result.NO }
        defer { MHD_destroy_response(mhdResponse) }
        // The library has its own copy: the answer kept (it says one came) keeps no body, or a
        // reply its client does not read would be held twice until the connection closes.
        answer.pending?.body = []
        for field in response.headers where !(closesConnection && field.name.lowercased() == "connection") {
            // `withCString` lends the text's own bytes; a String passed as a C pointer would
            // be copied into a new array first, twice a header.
            field.name.withCString { name in
                _ = field.value.withCString { value in MHD_add_response_header(mhdResponse, name, value) }
            }
        }
        if closesConnection { MHD_add_response_header(mhdResponse, "Connection", "close") }
        if server.pipeline.requestIDs != nil {
            request.requestID.withCString { _ = MHD_add_response_header(mhdResponse, "X-Request-Id", $0) }
        }
        answer.sentStatus = response.status
        return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    }
}

/// Passes each answer on `seconds` later, from a Dispatch worker (a refusal from a request's
/// head: `MicroHTTPServer.Configuration.refusalFromHeadDelaySeconds`).
private struct DelayedResponder: Responder {
    let base: any Responder
    let seconds: Double

    func respond(_ response: consuming HTTPResponse) {
        let response = response
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [base] in base.respond(response) }
    }

    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { base.onComplete(handler) }
}

/// What the check of a request's raw target found, before its exchange begins: its
/// refusal, and the path as sent when the library's decoded path would not show it
/// (`TargetCheck.pathAsSent`). Made only for the few targets that need one.
final class TargetNote {
    let refusal: HTTPRefusal?
    let pathAsSent: String?

    init(refusal: HTTPRefusal?, pathAsSent: String?) {
        self.refusal = refusal
        self.pathAsSent = pathAsSent
    }
}

/// The C entry points, as global closures: nothing in them is actor-isolated, so
/// libmicrohttpd may call them from its own threads.
private let accessHandlerCallback: MHD_AccessHandlerCallback = { cls, connection, url, method, version, uploadData, uploadSize, context in
    guard let cls, let connection, let url, let method, let uploadSize, let context else { return MHD_Result.NO }
    // A loop's daemon calls again, at every run, a request that waits for its answer: answered
    // here while none has come, before any text is copied.
    if uploadSize.pointee == 0, let existing = context.pointee,
       let exchange = Unmanaged<AnyObject>.fromOpaque(existing).takeUnretainedValue() as? Exchange,
       exchange.isWaitingForAnswer {
        return MHD_Result.YES
    }
    // The server outlives its daemons: lent without a retain and a release per call.
    return Unmanaged<MicroHTTPServer>.fromOpaque(cls)._withUnsafeGuaranteedRef { server in
        server.access(connection, url: url, method: method, version: version,
                      uploadData: uploadData, uploadSize: uploadSize, context: context)
    }
}

private let libraryLogCallback: headway_log_sink = { context, message in
    guard let context, let message else { return }
    let server = Unmanaged<MicroHTTPServer>.fromOpaque(context).takeUnretainedValue()
    let text = String(cString: message)
    server.libraryLog?(text, MicroHTTPServer.saysClientGone(text))
}

private let targetCheckCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?)
    -> UnsafeMutableRawPointer? = { cls, target, _ in
    guard let cls, let target else { return nil }
    return Unmanaged<MicroHTTPServer>.fromOpaque(cls)._withUnsafeGuaranteedRef { $0.checkTarget(target) }
}

/// A connection opens in a daemon: it waits for its first head. It closes: it waits no
/// more, and its address may open another.
private let connectionNotifyCallback: MHD_NotifyConnectionCallback = { cls, connection, socketContext, event in
    guard let cls, let connection else { return }
    let server = Unmanaged<MicroHTTPServer>.fromOpaque(cls).takeUnretainedValue()
    let fd = headway_connection_fd(connection)
    switch event {
    case .CONNECTION_NOTIFY_STARTED:
        server.requestDeadlines.startWaiting(fd)
        // Before its handshake: where `tlsCertificateCallback` finds the certificate.
        if let certificates = server.certificates {
            socketContext?.pointee = Unmanaged.passUnretained(certificates).toOpaque()
        }
    case .CONNECTION_NOTIFY_CLOSED:
        server.requestDeadlines.stopWaiting(fd)
        server.configuration.unreadReplies?.forget(fd)
        server.connectionsPerAddress.release(fd)
    default: break
    }
}

private let requestCompletedCallback: MHD_RequestCompletedCallback = { cls, connection, context, termination in
    guard let cls else { return }
    Unmanaged<MicroHTTPServer>.fromOpaque(cls)._withUnsafeGuaranteedRef { $0.completed(connection, context, termination) }
}

/// The port a server has bound (0 until it has).
public final class BoundPort: Sendable {
    private let port = Atomic<Int>(0)

    public var value: Int {
        get { port.load(ordering: .acquiring) }
        set { port.store(newValue, ordering: .releasing) }
    }
}

/// Turning `host:port` into a socket address.
enum SocketAddress {
    static func resolve(host: String, port: Int) throws -> (sockaddr_storage, ipv6: Bool) {
        var storage = sockaddr_storage()
        let name = host == "localhost" ? "127.0.0.1" : host
        guard (0...65535).contains(port) else { throw HTTPServerError(description: "port \(port) is out of range") }
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, name, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: v4) { target.copyMemory(from: $0) } }
            return (storage, false)
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, name, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: v6) { target.copyMemory(from: $0) } }
            return (storage, true)
        }
        throw HTTPServerError(description: "'\(host)' is not an IPv4 or IPv6 address")
    }

    /// A non-blocking socket bound to `host:port` and listening.
    static func listen(host: String, port: Int) throws -> Int32 {
        let (storage, ipv6) = try resolve(host: host, port: port)
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServerError(description: "cannot create a socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if ipv6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let length = socklen_t(ipv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeBytes(of: storage) { raw in
            bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) == 0
        }
        guard bound, Glibc.listen(fd, SOMAXCONN) == 0 else {
            close(fd)
            throw HTTPServerError(description: "cannot listen on \(host):\(port) (address in use, or not permitted)")
        }
        return fd
    }

    /// `fd`, a socket handed over already listening, made ready to serve: checked to be
    /// a listening TCP socket, made non-blocking and closed on exec.
    static func adopt(_ fd: Int32) throws -> Int32 {
        var listening: Int32 = 0, type: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 1,
              getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) == 0, type == Int32(SOCK_STREAM.rawValue) else {
            throw HTTPServerError(description: "the inherited file descriptor \(fd) is not a listening TCP socket")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return fd
    }

    /// The address a socket is bound to: host (IPv4 or IPv6 literal) and port.
    static func boundAddress(fd: Int32) -> (host: String, port: Int)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        return withUnsafeBytes(of: storage) { raw -> (String, Int)? in
            if Int32(storage.ss_family) == AF_INET6 {
                var address = raw.load(as: sockaddr_in6.self)
                guard inet_ntop(AF_INET6, &address.sin6_addr, &text, socklen_t(text.count)) != nil else { return nil }
                return (Self.text(text), Int(UInt16(bigEndian: address.sin6_port)))
            }
            guard Int32(storage.ss_family) == AF_INET else { return nil }
            var address = raw.load(as: sockaddr_in.self)
            guard inet_ntop(AF_INET, &address.sin_addr, &text, socklen_t(text.count)) != nil else { return nil }
            return (Self.text(text), Int(UInt16(bigEndian: address.sin_port)))
        }
    }

    /// The characters of a NUL-terminated C buffer.
    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func boundPort(fd: Int32) -> Int? {
        guard fd >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        return withUnsafeBytes(of: storage) { raw -> Int in
            if Int32(storage.ss_family) == AF_INET6 {
                return Int(UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port))
            }
            return Int(UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port))
        }
    }
}
