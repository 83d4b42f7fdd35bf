import CCurl
import Dispatch
import Foundation
import HeadwayCore
import Lifecycle

/// One POST of a delivery: the host is resolved first (`HostLookup`, no thread waits) and,
/// unless private targets are allowed, every address it gives must be public
/// (`IPAddress.isPublic`); then the POST is handed to `WebhookTransfers`, which drives it
/// with every other attempt on one thread. The connection goes to the addresses checked
/// and to nothing else, for every URL, a name or an address written out (`Pin`): libcurl
/// never resolves or reads the host as an address on its own, so a name that resolves
/// elsewhere a moment later (DNS rebinding) or a spelling it reads otherwise cannot slip
/// past the check. Redirects are not followed, only `http` and `https` are spoken,
/// proxies from the environment are not used, and the whole attempt, the lookup included,
/// ends after `timeoutSeconds`. The reply's body is not read: the attempt ends when it
/// begins. An e-mail webhook's message goes the same way, through libcurl's SMTP (`smtp`
/// and `smtps` only, the same check and pin): `MAIL FROM`, a `RCPT TO` per recipient, the
/// message uploaded as stored; STARTTLS is required when the URL carries a login (a
/// password never crosses the network in clear), tried otherwise.
package struct WebhookTransport: Sendable {
    /// What one attempt came to.
    struct Outcome: Sendable, Equatable {
        var verdict: WebhookAttemptVerdict
        /// The HTTP status, if a reply came.
        var status: Int?
        /// Why the attempt did not succeed, in a few words (nil when delivered).
        var error: String?
    }

    /// How long an attempt may take, connection included.
    var timeoutSeconds: Double
    /// Whether loopback, private and other non-public addresses may be posted to.
    var allowPrivate: Bool
    /// Where host names are looked up (`HostLookups.deliveries`).
    var lookups: HostLookup

    /// Whether a URL may be posted to now: the addresses checked (all its host resolves
    /// to), or why not.
    package enum Check: Sendable, Equatable {
        case allowed([IPAddress])
        /// `final`: the same URL will be refused again (an address that is not public);
        /// otherwise a later lookup may pass (a name that does not resolve yet, a resolver
        /// that did not answer in time).
        case refused(String, final: Bool)
    }

    /// Checks `url`, looking its host up (a DNS lookup for a name) and waiting at most
    /// `seconds` for the answer; calls `then` once with the verdict, on a Dispatch worker
    /// (at once on the caller's thread for an address written out, or a lookup refused).
    /// The check of `POST /v1/webhooks` (with the lookups of checks) and of every attempt.
    package static func check(_ url: WebhookURL, allowPrivate: Bool, within seconds: Double, lookups: HostLookup,
                              then: @escaping @Sendable (Check) -> Void) {
        if let literal = IPAddress.parse(url.host) {
            return then(verdict(url, .addresses([literal]), within: seconds, lookups: lookups, allowPrivate: allowPrivate))
        }
        lookups.lookUp(url.host, within: seconds) { outcome in
            then(verdict(url, outcome, within: seconds, lookups: lookups, allowPrivate: allowPrivate))
        }
    }

    /// `check` for a caller that may wait (tests).
    static func check(_ url: WebhookURL, allowPrivate: Bool, within seconds: Double, lookups: HostLookup) -> Check {
        let outcome = IPAddress.parse(url.host).map { HostLookup.Outcome.addresses([$0]) }
            ?? lookups.addresses(of: url.host, within: seconds)
        return verdict(url, outcome, within: seconds, lookups: lookups, allowPrivate: allowPrivate)
    }

    /// What the lookup of `url`'s host coming to `outcome` means for posting to it.
    private static func verdict(_ url: WebhookURL, _ outcome: HostLookup.Outcome, within seconds: Double,
                                lookups: HostLookup, allowPrivate: Bool) -> Check {
        let addresses: [IPAddress]
        switch outcome {
        case .addresses(let found): addresses = found
        case .unresolved: return .refused("the host '\(url.host)' could not be resolved", final: false)
        case .timedOut: return .refused("the host '\(url.host)' was not resolved within \(Self.seconds(seconds))", final: false)
        case .busy:
            return .refused("the host '\(url.host)' was not looked up: \(lookups.maximumUnfinished) names are being "
                                + "looked up already", final: false)
        case .noThread:
            return .refused("the host '\(url.host)' was not looked up: no thread could be started for it", final: false)
        case .stopped:
            return .refused("the host '\(url.host)' was not looked up: the daemon is stopping", final: false)
        }
        if allowPrivate { return .allowed(addresses) }
        if let refused = addresses.first(where: { !$0.isPublic }) {
            return .refused("the host '\(url.host)' resolves to \(refused), which is not a public address "
                                + "(loopback, private, link-local and similar ranges are refused unless the daemon runs "
                                + "with --webhook-allow-private)", final: true)
        }
        return .allowed(addresses)
    }

    /// `seconds` as the flag was given: `10 s`, `0.5 s`.
    private static func seconds(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }

    /// How libcurl is made to connect to the addresses checked and to nothing else, while
    /// the URL's own host still names the server (`Host`, TLS's SNI and the certificate's
    /// check): `CURLOPT_CONNECT_TO` sends a connection to any host and port to a name of
    /// the attempt's own (`name`, under `.invalid`, which no resolver answers), and
    /// `CURLOPT_RESOLVE` gives that name the addresses checked, all of them in the
    /// resolver's order, so that libcurl still falls back from one it cannot reach (::1
    /// when the receiver listens on 127.0.0.1 only) to the next.
    struct Pin: Sendable, Equatable {
        /// `::name:port`: any host, any port, to `name` at the URL's port.
        var connectTo: String
        /// `name:port:addr,[v6addr]`.
        var resolve: String
    }

    /// The pin of an attempt to `url` to `addresses`, through the name `name`.
    static func pin(_ url: WebhookURL, to addresses: [IPAddress], name: String) -> Pin {
        let texts = addresses.map { $0.bytes.count == 16 ? "[\($0)]" : "\($0)" }
        return Pin(connectTo: "::\(name):\(url.port)", resolve: "\(name):\(url.port):\(texts.joined(separator: ","))")
    }

    /// Posts `body` to `url` with `headers` (each `Name: value`) through `transfers`, as an
    /// attempt of the webhook `owner` (or, with `mail`, sends `body` as a message over
    /// SMTP: the headers are then the message's own);
    /// calls `then` once with the outcome: on the transfers' thread, on a Dispatch worker
    /// (a refusal after a lookup) or at once on the caller's thread (an address refused).
    /// Not called at all when the transfers stop first (the delivery, still pending, is
    /// sent again after a restart).
    func post(_ url: WebhookURL, body: String, headers: [String], mail: WebhookTransfers.MailEnvelope? = nil, owner: String,
              through transfers: WebhookTransfers, then: @escaping @Sendable (Outcome) -> Void) {
        let deadline = DispatchTime.now() + timeoutSeconds
        Self.check(url, allowPrivate: allowPrivate, within: timeoutSeconds, lookups: lookups) { check in
            switch check {
            case .refused(let reason, let final):
                then(Outcome(verdict: final ? .fail : .retry, status: nil, error: reason))
            case .allowed(let addresses):
                transfers.add(WebhookTransfers.Request(owner: owner, url: url, addresses: addresses, body: body,
                                                       headers: headers, mail: mail, deadline: deadline), then: then)
            }
        }
    }

    /// What a finished SMTP transfer came to: its result code, and the server's last reply
    /// code. A 5xx reply (a recipient or sender refused for good), a refused login, a
    /// server that will not start TLS for a login is final; anything else (a 4xx, a
    /// connection refused or lost, a timeout) is retried.
    static func mailOutcome(of result: CURLcode, status: Int) -> Outcome {
        if result == CURLE_OK { return Outcome(verdict: .delivered, status: status, error: nil) }
        let error = String(cString: curl_easy_strerror(result))
        let final = (500...599).contains(status) || result == CURLE_LOGIN_DENIED || result == CURLE_USE_SSL_FAILED
            || result == CURLE_UNSUPPORTED_PROTOCOL || result == CURLE_URL_MALFORMAT
        return Outcome(verdict: final ? .fail : .retry, status: status == 0 ? nil : status,
                       error: status == 0 ? error : "SMTP \(status): \(error)")
    }

    /// What a finished transfer came to: its result code, and the status when a reply came.
    static func outcome(of result: CURLcode, status: Int) -> Outcome {
        guard result == CURLE_OK || result == CURLE_WRITE_ERROR else {
            let error = String(cString: curl_easy_strerror(result))
            let final = result == CURLE_UNSUPPORTED_PROTOCOL || result == CURLE_URL_MALFORMAT
            return Outcome(verdict: final ? .fail : .retry, status: nil, error: error)
        }
        let verdict = WebhookAttemptVerdict.of(status: status)
        let error: String? = switch verdict {
        case .delivered: nil
        case _ where (300...399).contains(status): "redirect not followed (HTTP \(status))"
        default: "HTTP \(status)"
        }
        return Outcome(verdict: verdict, status: status, error: error)
    }
}

/// Every webhook attempt's POST, driven by libcurl's multi interface on one thread
/// (`run`, the thread `headway-webhook`): an attempt whose receiver never answers holds
/// a socket and a few kilobytes until its timeout, not a thread, so each webhook has its
/// attempt in flight whatever the others' receivers do (100 hanging at once cost about
/// what one does). Attempts come from any thread (`add`: queued, and the thread woken
/// with `curl_multi_wakeup`); each ends with its outcome, given on this thread, or when
/// the thread stops (then dropped, its connection closed, no outcome given). An attempt
/// whose webhook was deleted is ended at once (`cancel`): left to its timeout, a webhook
/// made and deleted in a loop would hold a socket per round, without bound.
///
/// `@unchecked Sendable`: the multi handle and `running` are the run thread's alone, but
/// for `curl_multi_wakeup`, which libcurl lets any thread call, here under `state`'s lock
/// and only until `run` frees the handle.
package final class WebhookTransfers: Service, @unchecked Sendable {
    /// Who an e-mail is from and to (`MAIL FROM`, `RCPT TO`).
    struct MailEnvelope: Sendable, Equatable {
        var from: String
        var to: [String]
    }

    /// A POST (or an e-mail) ready to be made: its host checked.
    struct Request: Sendable {
        /// The webhook whose attempt this is (`cancel` ends it).
        var owner: String
        var url: WebhookURL
        /// The addresses checked, connected to in this order.
        var addresses: [IPAddress]
        var body: String
        /// Extra header lines (`Name: value`).
        var headers: [String]
        /// For an e-mail: its envelope (the body is then the message, sent over SMTP).
        var mail: MailEnvelope?
        /// When the attempt, its lookup included, ends.
        var deadline: DispatchTime
    }

    private struct Queued {
        var request: Request
        var then: @Sendable (WebhookTransport.Outcome) -> Void
    }

    private struct State {
        var queued: [Queued] = []
        /// Set by `run` as it ends: nothing more is queued, the multi handle is gone.
        var closed = false
        var stopping = false
        /// Webhooks whose attempts are to end now (`cancel`).
        var cancelled: Set<String> = []
        /// How many transfers are in flight (`running.count`, for tests and metrics).
        var inFlight = 0
    }

    /// An e-mail's bytes, read by libcurl as it uploads them (`CURLOPT_READFUNCTION`).
    private final class Upload {
        let bytes: [UInt8]
        var offset = 0

        init(_ text: String) { bytes = Array(text.utf8) }

        /// Copies the next bytes into `buffer` (at most `capacity`); 0 once all were read.
        func read(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
            let count = min(capacity, bytes.count - offset)
            guard count > 0 else { return 0 }
            bytes.withUnsafeBufferPointer { source in
                UnsafeMutableRawPointer(buffer).copyMemory(from: source.baseAddress! + offset, byteCount: count)
            }
            offset += count
            return count
        }
    }

    /// One POST in flight: its easy handle and what the handle points to, freed together.
    private final class Transfer {
        let handle: UnsafeMutableRawPointer
        /// The webhook whose attempt this is.
        let owner: String
        /// Whether this is an e-mail (its outcome is read as SMTP's).
        var isMail = false
        /// An e-mail's bytes, which the handle reads until `free`.
        var upload: Upload?
        let then: @Sendable (WebhookTransport.Outcome) -> Void
        /// A DNS cache of the transfer's own, holding its pin's name alone (an entry of
        /// `CURLOPT_RESOLVE` is never dropped from the cache it lands in: in the multi
        /// handle's shared one, each attempt would leave one behind for good).
        let share: UnsafeMutableRawPointer
        var lists: [UnsafeMutablePointer<curl_slist>?] = []

        init(handle: UnsafeMutableRawPointer, owner: String, share: UnsafeMutableRawPointer,
             then: @escaping @Sendable (WebhookTransport.Outcome) -> Void) {
            self.handle = handle
            self.owner = owner
            self.share = share
            self.then = then
        }

        /// `lines` as a list the handle points to until `free`.
        func list(_ lines: [String]) -> UnsafeMutableRawPointer? {
            var list: UnsafeMutablePointer<curl_slist>?
            for line in lines { list = curl_slist_append(list, line) }
            lists.append(list)
            return UnsafeMutableRawPointer(list)
        }

        func free() {
            curl_easy_cleanup(handle)
            curl_share_cleanup(share)
            for list in lists { curl_slist_free_all(list) }
        }
    }

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    private let multi: UnsafeMutableRawPointer
    /// Shared by whoever adds or cancels an attempt (the dispatcher, a Dispatch worker) and the transfers' thread.
    private let state = Locked(State())
    /// The transfers in flight, by easy handle (the run thread's only).
    private var running: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Numbers the pins' names, so no two transfers share a name.
    private var pinsMade = 0
    /// How long the thread sleeps when nothing happens (libcurl wakes it sooner for a
    /// timeout of its own, `add` and `requestStop` at once).
    private let idleMilliseconds: Int32 = 1000

    init() {
        _ = Self.globalInit
        multi = curl_multi_init()
    }

    deinit {
        // A thread never run leaves the handle to be freed here.
        if !state.withLock({ $0.closed }) { curl_multi_cleanup(multi) }
    }

    /// How many transfers are in flight.
    var inFlight: Int { state.withLock { $0.inFlight } }

    /// Queues `request` and wakes the thread; `then` gets its outcome once, on the thread.
    /// Dropped when the thread has stopped.
    func add(_ request: Request, then: @escaping @Sendable (WebhookTransport.Outcome) -> Void) {
        state.withLock { state in
            guard !state.closed && !state.stopping else { return }
            state.queued.append(Queued(request: request, then: then))
            curl_multi_wakeup(multi)
        }
    }

    /// Ends the attempts of the webhooks `owners` (deleted), queued or in flight, each with
    /// the outcome `cancelledOutcome`. An attempt added later (its lookup still running)
    /// is not: the caller asks again. May be called from any thread.
    func cancel(_ owners: Set<String>) {
        state.withLock { state in
            guard !state.closed && !state.stopping else { return }
            state.cancelled.formUnion(owners)
            curl_multi_wakeup(multi)
        }
    }

    /// The outcome of an attempt ended by `cancel`.
    static let cancelledOutcome = WebhookTransport.Outcome(verdict: .retry, status: nil, error: "the webhook was deleted")

    /// Drives the transfers until `requestStop`; then drops those in flight or queued.
    package func run() {
        while true {
            let (queued, cancelled, stopping) = state.withLock { state in
                defer {
                    state.queued = []
                    state.cancelled = []
                }
                return (state.queued, state.cancelled, state.stopping)
            }
            if stopping { break }
            for item in queued {
                if cancelled.contains(item.request.owner) {
                    item.then(Self.cancelledOutcome)
                } else {
                    start(item)
                }
            }
            if !cancelled.isEmpty { end(running.values.filter { cancelled.contains($0.owner) }) }
            var active: Int32 = 0
            curl_multi_perform(multi, &active)
            finishDone()
            curl_multi_poll(multi, nil, 0, idleMilliseconds, nil)
        }
        state.withLock { state in
            state.closed = true
            state.queued = []
        }
        for transfer in running.values {
            curl_multi_remove_handle(multi, transfer.handle)
            transfer.free()
        }
        running = [:]
        state.withLock { $0.inFlight = 0 }
        curl_multi_cleanup(multi)
    }

    /// Makes `run` return soon, dropping the transfers in flight. May be called from any thread.
    package func requestStop() {
        state.withLock { state in
            guard !state.closed else { return }
            state.stopping = true
            curl_multi_wakeup(multi)
        }
    }

    /// Makes an easy handle for `item` and adds it to the multi handle.
    private func start(_ item: Queued) {
        let request = item.request
        let now = DispatchTime.now()
        let remaining = request.deadline > now ? request.deadline.uptimeNanoseconds - now.uptimeNanoseconds : 0
        guard let handle = curl_easy_init() else {
            return item.then(WebhookTransport.Outcome(verdict: .retry, status: nil, error: "libcurl could not start"))
        }
        guard let share = curl_share_init() else {
            curl_easy_cleanup(handle)
            return item.then(WebhookTransport.Outcome(verdict: .retry, status: nil, error: "libcurl could not start"))
        }
        headway_curl_share_set_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_DNS.rawValue))
        let transfer = Transfer(handle: handle, owner: request.owner, share: share, then: item.then)
        pinsMade += 1
        let pin = WebhookTransport.pin(request.url, to: request.addresses, name: "attempt-\(pinsMade).headway.invalid")
        headway_curl_set_pointer(handle, CURLOPT_SHARE, share)
        headway_curl_set_pointer(handle, CURLOPT_CONNECT_TO, transfer.list([pin.connectTo]))
        headway_curl_set_pointer(handle, CURLOPT_RESOLVE, transfer.list([pin.resolve]))
        headway_curl_set_string(handle, CURLOPT_URL, request.url.text)
        headway_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        headway_curl_set_string(handle, CURLOPT_PROXY, "")
        headway_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)
        // A connection of its own, closed after: the pin's name is the attempt's alone.
        headway_curl_set_long(handle, CURLOPT_FORBID_REUSE, 1)
        headway_curl_set_long(handle, CURLOPT_FRESH_CONNECT, 1)
        headway_curl_set_long(handle, CURLOPT_TIMEOUT_MS, max(1, Int(remaining / 1_000_000)))
        headway_curl_set_string(handle, CURLOPT_USERAGENT, "headwayd/\(HeadwayVersion.current)")
        if let mail = request.mail {
            Self.setMail(mail, request, on: transfer)
        } else {
            headway_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
            headway_curl_set_long(handle, CURLOPT_POST, 1)
            headway_curl_set_long(handle, CURLOPT_POSTFIELDSIZE, request.body.utf8.count)
            headway_curl_set_string(handle, CURLOPT_COPYPOSTFIELDS, request.body)
            headway_curl_set_pointer(handle, CURLOPT_HTTPHEADER,
                                     transfer.list(["Content-Type: application/json", "Expect:"] + request.headers))
            // The answer is the status: the first piece of a body ends the attempt (returning
            // 0 stops the transfer), so a receiver that says yes and then sends an endless or
            // slow body has its delivery delivered, not timed out and sent again.
            headway_curl_set_callback(handle, CURLOPT_WRITEFUNCTION) { _, _, _, _ in 0 }
        }
        guard curl_multi_add_handle(multi, handle) == CURLM_OK else {
            transfer.free()
            return item.then(WebhookTransport.Outcome(verdict: .retry, status: nil, error: "libcurl could not start"))
        }
        running[handle] = transfer
        state.withLock { [count = running.count] in $0.inFlight = count }
    }

    /// Makes `transfer`'s handle send `request.body` as an e-mail over SMTP: the envelope,
    /// the upload, and TLS (STARTTLS required for a login on `smtp://`, tried otherwise;
    /// `smtps://` is TLS from the start).
    private static func setMail(_ mail: MailEnvelope, _ request: Request, on transfer: Transfer) {
        let handle = transfer.handle
        transfer.isMail = true
        let upload = Upload(request.body)
        transfer.upload = upload
        headway_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "smtp,smtps")
        headway_curl_set_string(handle, CURLOPT_MAIL_FROM, "<\(mail.from)>")
        headway_curl_set_pointer(handle, CURLOPT_MAIL_RCPT, transfer.list(mail.to.map { "<\($0)>" }))
        headway_curl_set_long(handle, CURLOPT_UPLOAD, 1)
        headway_curl_set_long(handle, CURLOPT_INFILESIZE, upload.bytes.count)
        headway_curl_set_pointer(handle, CURLOPT_READDATA, Unmanaged.passUnretained(upload).toOpaque())
        headway_curl_set_callback(handle, CURLOPT_READFUNCTION) { buffer, size, count, context in
            guard let buffer, let context else { return 0 }
            return Unmanaged<Upload>.fromOpaque(context).takeUnretainedValue().read(into: buffer, capacity: size * count)
        }
        if request.url.scheme == "smtp" {
            let level = request.url.hasUserInfo ? CURLUSESSL_ALL : CURLUSESSL_TRY
            headway_curl_set_long(handle, CURLOPT_USE_SSL, Int(level.rawValue))
        }
    }

    /// Ends `transfers` before libcurl is done with them (their connections closed), each
    /// with `cancelledOutcome`.
    private func end(_ transfers: [Transfer]) {
        for transfer in transfers {
            running[transfer.handle] = nil
            curl_multi_remove_handle(multi, transfer.handle)
            transfer.free()
        }
        state.withLock { [count = running.count] in $0.inFlight = count }
        for transfer in transfers { transfer.then(Self.cancelledOutcome) }
    }

    /// Gives the outcome of each transfer libcurl says is done, and frees it.
    private func finishDone() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                  let transfer = running.removeValue(forKey: handle) else { continue }
            let result = message.pointee.data.result
            var status = 0
            headway_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
            curl_multi_remove_handle(multi, handle)
            transfer.free()
            state.withLock { [count = running.count] in $0.inFlight = count }
            transfer.then(transfer.isMail ? WebhookTransport.mailOutcome(of: result, status: status)
                                          : WebhookTransport.outcome(of: result, status: status))
        }
    }
}
