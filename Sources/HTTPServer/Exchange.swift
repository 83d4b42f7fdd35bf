import CMicroHTTPD
import Foundation
import Lifecycle
import Synchronization

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

    /// Shared by the daemon's thread and the thread that answers.
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
struct DelayedResponder: Responder {
    let base: any Responder
    let seconds: Double

    func respond(_ response: consuming HTTPResponse) {
        let response = response
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [base] in base.respond(response) }
    }

    func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) { base.onComplete(handler) }
}
