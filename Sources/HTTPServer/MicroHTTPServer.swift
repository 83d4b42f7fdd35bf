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
/// only the library's thread may use the connection's GnuTLS session (docs/internals.md,
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
        /// Set by the stop: from then on a request reaching its handler is refused at once
        /// (its connection is never suspended), so the stop does not wait for requests still
        /// arriving.
        var closing = false
    }

    let configuration: Configuration
    /// Where every request goes, and how the server's own refusals look.
    let pipeline: HTTPPipeline
    /// Receives libmicrohttpd's own messages, and whether one only says that a client
    /// went away (routine for long-lived streams).
    let libraryLog: (@Sendable (_ message: String, _ clientGone: Bool) -> Void)?
    /// Set by `prepare` (the group's thread); read by the accept loop and the stop.
    private let daemons = Locked(Daemons())
    /// Shared by the daemons' threads (requests, streams), the handlers' threads (answers) and the stop.
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

    // MARK: - What the stop counts: requests, answers and streams (libmicrohttpd's threads, handlers)

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

    /// A request's head was read: it counts as in flight until its exchange is over.
    /// Returns whether the server is draining (the request is then refused).
    func requestBegins() -> Bool {
        traffic.withLock { traffic in
            traffic.requestsInFlight += 1
            return traffic.draining
        }
    }

    /// A request's exchange is over (`wasHandedOver`: it was counted by `handingOver`).
    func requestEnds(wasHandedOver: Bool) {
        let drainedNow = traffic.withLock { traffic in
            traffic.requestsInFlight -= 1
            if wasHandedOver { traffic.answersUnsent -= 1 }
            return (traffic.requestsInFlight == 0 && traffic.draining)
                || (wasHandedOver && traffic.answersUnsent == 0 && traffic.closing)
        }
        if drainedNow { drained.ring() }
    }
}
