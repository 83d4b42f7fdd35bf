import CMicroHTTPD
import Foundation

/// What libmicrohttpd's threads call: a request's head, its body and its completion, the
/// check of its raw target, its connection's opening and closing, and the library's messages.
extension MicroHTTPServer {
    /// Every call of the library for one request: the first begins its exchange (`begin`),
    /// the next ones hand over its body's pieces, then dispatch it or queue its answer.
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
        let isDraining = requestBegins()
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
        requestEnds(wasHandedOver: exchange.wasHandedOver)  // read first: an exchange's lock is never taken under `traffic`
        exchange.complete()
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

/// The C entry points, as global closures (`MicroHTTPServer.prepare` hands them to each
/// daemon): nothing in them is actor-isolated, so libmicrohttpd may call them from its own threads.
let accessHandlerCallback: MHD_AccessHandlerCallback = { cls, connection, url, method, version, uploadData, uploadSize, context in
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

let libraryLogCallback: headway_log_sink = { context, message in
    guard let context, let message else { return }
    let server = Unmanaged<MicroHTTPServer>.fromOpaque(context).takeUnretainedValue()
    let text = String(cString: message)
    server.libraryLog?(text, MicroHTTPServer.saysClientGone(text))
}

let targetCheckCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?)
    -> UnsafeMutableRawPointer? = { cls, target, _ in
    guard let cls, let target else { return nil }
    return Unmanaged<MicroHTTPServer>.fromOpaque(cls)._withUnsafeGuaranteedRef { $0.checkTarget(target) }
}

/// A connection opens in a daemon: it waits for its first head. It closes: it waits no
/// more, and its address may open another.
let connectionNotifyCallback: MHD_NotifyConnectionCallback = { cls, connection, socketContext, event in
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

let requestCompletedCallback: MHD_RequestCompletedCallback = { cls, connection, context, termination in
    guard let cls else { return }
    Unmanaged<MicroHTTPServer>.fromOpaque(cls)._withUnsafeGuaranteedRef { $0.completed(connection, context, termination) }
}
