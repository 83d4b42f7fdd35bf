import Foundation

extension MicroHTTPServer {
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
}
