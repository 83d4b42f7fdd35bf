import CCurl
import Dispatch
import Foundation
import HeadwayCore

/// One POST of a delivery, on libcurl (one easy handle per attempt, made and freed on the
/// calling thread): the host is resolved first and, unless private targets are allowed,
/// every address it gives must be public (`IPAddress.isPublic`); the addresses checked are
/// then the ones connected to (`CURLOPT_RESOLVE`), so a name that resolves elsewhere a
/// moment later cannot slip a private address past the check. Redirects are not followed,
/// only `http` and `https` are spoken, proxies from the environment are not used, and the
/// whole attempt, the lookup included (`HostLookup`), ends after `timeoutSeconds`. The
/// reply's body is not read: the attempt ends when it begins.
struct WebhookTransport: Sendable {
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
    /// Where host names are looked up.
    var lookups: HostLookup = .deliveries

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    /// Whether a URL may be posted to now: the addresses checked (all its host resolves
    /// to), or why not.
    enum Check: Sendable, Equatable {
        case allowed([IPAddress])
        /// `final`: the same URL will be refused again (an address that is not public);
        /// otherwise a later lookup may pass (a name that does not resolve yet, a resolver
        /// that did not answer in time).
        case refused(String, final: Bool)
    }

    /// Checks `url`, looking its host up (a DNS lookup for a name) and waiting at most
    /// `seconds` for the answer; calls `then` once with the verdict, on a Dispatch worker
    /// (at once on the caller's thread for an address written out, or a lookup refused).
    /// The check of `POST /v1/webhooks`, with the lookups of checks.
    static func check(_ url: WebhookURL, allowPrivate: Bool, within seconds: Double, lookups: HostLookup,
                      then: @escaping @Sendable (Check) -> Void) {
        if let literal = IPAddress.parse(url.host) {
            return then(verdict(url, .addresses([literal]), within: seconds, lookups: lookups, allowPrivate: allowPrivate))
        }
        lookups.lookUp(url.host, within: seconds) { outcome in
            then(verdict(url, outcome, within: seconds, lookups: lookups, allowPrivate: allowPrivate))
        }
    }

    /// `check` for a caller that may wait: an attempt, on its own thread.
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

    /// The `CURLOPT_RESOLVE` entry that has libcurl connect to `addresses` (in their
    /// order) for `url`'s host and port: `host:port:addr,[v6addr]`.
    static func pinning(_ url: WebhookURL, to addresses: [IPAddress]) -> String {
        let texts = addresses.map { $0.bytes.count == 16 ? "[\($0)]" : "\($0)" }
        return "\(url.host):\(url.port):\(texts.joined(separator: ","))"
    }

    /// Posts `body` to `url` with `headers` (each `Name: value`); blocks until the reply,
    /// a failure or the timeout.
    func post(_ url: WebhookURL, body: String, headers extraHeaders: [String]) -> Outcome {
        _ = Self.globalInit
        let started = DispatchTime.now()
        let addresses: [IPAddress]
        switch Self.check(url, allowPrivate: allowPrivate, within: timeoutSeconds, lookups: lookups) {
        case .allowed(let checked): addresses = checked
        case .refused(let reason, let final): return Outcome(verdict: final ? .fail : .retry, status: nil, error: reason)
        }
        // The lookup's time counts: the attempt as a whole ends after `timeoutSeconds`.
        let lookupSeconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        let remainingMilliseconds = max(1, Int((timeoutSeconds - lookupSeconds) * 1000))
        guard let handle = curl_easy_init() else { return Outcome(verdict: .retry, status: nil, error: "libcurl could not start") }
        defer { curl_easy_cleanup(handle) }
        var headers: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headers) }
        headers = curl_slist_append(headers, "Content-Type: application/json")
        headers = curl_slist_append(headers, "Expect:")
        for line in extraHeaders { headers = curl_slist_append(headers, line) }
        var pinned: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(pinned) }
        if IPAddress.parse(url.host) == nil {
            // A name: connect to the addresses just checked, not to what a second lookup
            // says; all of them, so that libcurl still falls back from one it cannot reach
            // (::1 when the receiver listens on 127.0.0.1 only) to the next.
            pinned = curl_slist_append(pinned, Self.pinning(url, to: addresses))
            headway_curl_set_pointer(handle, CURLOPT_RESOLVE, UnsafeMutableRawPointer(pinned))
        }
        headway_curl_set_string(handle, CURLOPT_URL, url.text)
        headway_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        headway_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        headway_curl_set_string(handle, CURLOPT_PROXY, "")
        headway_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)
        headway_curl_set_long(handle, CURLOPT_TIMEOUT_MS, remainingMilliseconds)
        headway_curl_set_string(handle, CURLOPT_USERAGENT, "headwayd/\(HeadwayVersion.current)")
        headway_curl_set_long(handle, CURLOPT_POST, 1)
        headway_curl_set_long(handle, CURLOPT_POSTFIELDSIZE, body.utf8.count)
        headway_curl_set_string(handle, CURLOPT_COPYPOSTFIELDS, body)
        headway_curl_set_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headers))
        // The answer is the status: the first piece of a body ends the attempt (returning
        // 0 stops the transfer), so a receiver that says yes and then sends an endless or
        // slow body has its delivery delivered, not timed out and sent again.
        headway_curl_set_callback(handle, CURLOPT_WRITEFUNCTION) { _, _, _, _ in 0 }
        let result = curl_easy_perform(handle)
        guard result == CURLE_OK || result == CURLE_WRITE_ERROR else {
            let error = String(cString: curl_easy_strerror(result))
            let final = result == CURLE_UNSUPPORTED_PROTOCOL || result == CURLE_URL_MALFORMAT
            return Outcome(verdict: final ? .fail : .retry, status: nil, error: error)
        }
        var status = 0
        headway_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
        let verdict = WebhookAttemptVerdict.of(status: status)
        let error: String? = switch verdict {
        case .delivered: nil
        case _ where (300...399).contains(status): "redirect not followed (HTTP \(status))"
        default: "HTTP \(status)"
        }
        return Outcome(verdict: verdict, status: status, error: error)
    }
}
