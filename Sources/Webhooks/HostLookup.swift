import Dispatch
import Foundation
import HeadwayCore
import HeadwayStore
import Lifecycle

/// Looks host names up (getaddrinfo) within a time limit. glibc's resolver has no limit of
/// its own to give: an unanswering name server costs up to its timeout times its attempts
/// times the servers listed (10 s with one, 28 s with three, measured), which would
/// stretch a webhook attempt far past `--webhook-timeout`. So each lookup runs on a thread
/// of a bounded pool (`LookupThreads`), and whoever asked hears within the time given: the
/// answer, or that it timed out. A lookup given up on runs on to its end and frees what it
/// holds; one still queued when all who asked have given up is dropped, not run.
///
/// A name already being looked up is not looked up again: whoever asks for it joins the
/// lookup running (each with a time limit of their own). Names being looked up are
/// bounded in number (`maximumUnfinished`); past that, a lookup is refused at once
/// (`busy`). Deliveries and the checks of new webhooks each have a `HostLookup` of their
/// own (`HostLookups`), so that whoever makes webhooks cannot use up the names deliveries need.
package final class HostLookup: Sendable {
    /// What a lookup came to.
    enum Outcome: Sendable, Equatable {
        /// The addresses the name resolves to, in the resolver's order (never empty).
        case addresses([IPAddress])
        /// The resolver answered with no address (no such name, or a failure it reports).
        case unresolved
        /// No answer within the time given.
        case timedOut
        /// As many names as allowed are being looked up (a resolver that does not answer).
        case busy
        /// No thread could be started for the lookup (the process's or its cgroup's limit).
        case noThread
        /// The daemon is stopping: the lookup was not run.
        case stopped
    }

    /// How many names may be being looked up at once, those given up on included.
    let maximumUnfinished: Int
    private let lookup: @Sendable (String) -> [IPAddress]
    /// Where the lookups run.
    let threads: LookupThreads
    /// The names being looked up, each with whoever waits for its answer: shared by the
    /// askers (any thread) and the lookup threads.
    private let unfinished = Locked<[String: [Answer]]>([:])

    /// `lookup` resolves a name (blocking) on one of `threads`; tests give one that waits
    /// on their signal.
    init(maximumUnfinished: Int, threads: LookupThreads, lookup: @escaping @Sendable (String) -> [IPAddress]) {
        self.maximumUnfinished = maximumUnfinished
        self.threads = threads
        self.lookup = lookup
    }

    /// How many names are being looked up, those given up on included.
    var running: Int { unfinished.withLock { $0.count } }

    /// Looks `host` up and calls `then` once: on a Dispatch worker with its answer or,
    /// after `seconds`, with `timedOut`; or at once, on the caller's thread, with `busy`,
    /// `noThread` or `stopped`. `then` must not block.
    func lookUp(_ host: String, within seconds: Double, then: @escaping @Sendable (Outcome) -> Void) {
        let answer = Answer(then)
        enum Step { case joined, start, busy }
        let step: Step = unfinished.withLock { running in
            if running[host] != nil {
                running[host]!.append(answer)
                return .joined
            }
            guard running.count < maximumUnfinished else { return .busy }
            running[host] = [answer]
            return .start
        }
        switch step {
        case .busy: return answer.give(.busy)
        case .joined: break
        case .start:
            threads.submit { [lookup, unfinished] refusal in
                // Nobody waits any more (all gave up while it was queued): not looked up.
                let abandoned = refusal == nil && unfinished.withLock { running in
                    guard running[host]?.allSatisfy(\.isGiven) ?? true else { return false }
                    running[host] = nil
                    return true
                }
                if abandoned { return }
                let addresses = refusal != nil ? [] : lookup(host)
                // The name is free again before anyone hears: their next lookup of it is a new one.
                let waiting = unfinished.withLock { $0.removeValue(forKey: host) } ?? []
                switch refusal {
                case .stopped?: return waiting.forEach { $0.give(.stopped) }
                case .noThread?: return waiting.forEach { $0.give(.noThread) }
                case nil: break
                }
                // Heard on a Dispatch worker, not on the lookup's thread, which ends when idle:
                // GnuTLS keeps a random generator per thread that uses one (a new webhook's
                // id and secret) and does not free it when the thread ends (about 200 bytes
                // a thread, measured).
                DispatchQueue.global().async {
                    for answer in waiting { answer.give(addresses.isEmpty ? .unresolved : .addresses(addresses)) }
                }
            }
        }
        answer.giveUp(after: seconds)
    }

    /// The addresses of `host`, waiting at most `seconds` for them (blocks the caller).
    func addresses(of host: String, within seconds: Double) -> Outcome {
        let heard = DispatchSemaphore(value: 0)
        // Set by whoever gives the outcome, read here once `heard` is signalled.
        let outcome = Locked<Outcome>(.busy)
        lookUp(host, within: seconds) { answer in
            outcome.withLock { $0 = answer }
            heard.signal()
        }
        heard.wait()
        return outcome.withLock { $0 }
    }

    /// Whoever waits for one lookup: told once, by the first of the answer and its timer;
    /// the timer ends with the answer, so a check answered at once keeps nothing for the
    /// rest of its time.
    private final class Answer: Sendable {
        private struct Waiting {
            var then: (@Sendable (Outcome) -> Void)?
            /// A Dispatch timer: its `cancel()` may be called from any thread.
            var timer: (any DispatchSourceTimer)?
        }
        /// Shared by the one who asked, the lookup's thread and the timer.
        private let waiting: Locked<Waiting>

        init(_ then: @escaping @Sendable (Outcome) -> Void) { waiting = Locked(Waiting(then: then)) }

        /// Whether the outcome was given (the answer, or that it timed out).
        var isGiven: Bool { waiting.withLock { $0.then == nil } }

        func give(_ outcome: Outcome) {
            let then = waiting.withLock { waiting in
                defer { waiting = Waiting() }
                waiting.timer?.cancel()
                return waiting.then
            }
            then?(outcome)
        }

        /// Gives `timedOut` after `seconds`, unless the answer comes first.
        func giveUp(after seconds: Double) {
            waiting.withLock { waiting in
                guard waiting.then != nil else { return }
                let timer = DispatchSource.makeTimerSource(queue: .global())
                timer.schedule(deadline: .now() + max(0, seconds))
                timer.setEventHandler { [weak self] in self?.give(.timedOut) }
                waiting.timer = timer
                timer.resume()
            }
        }
    }

    /// The addresses `host` resolves to (getaddrinfo, any family), in the resolver's order
    /// without repeats; none when it fails.
    static func system(_ host: String) -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0 else { return [] }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var entry = list
        while let current = entry {
            if let socketAddress = current.pointee.ai_addr {
                if current.pointee.ai_family == AF_INET {
                    socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                        let raw = withUnsafeBytes(of: v4.pointee.sin_addr) { Array($0) }
                        if let address = IPAddress(bytes: raw), !addresses.contains(address) { addresses.append(address) }
                    }
                } else if current.pointee.ai_family == AF_INET6 {
                    socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                        let raw = withUnsafeBytes(of: v6.pointee.sin6_addr) { Array($0) }
                        if let address = IPAddress(bytes: raw), !addresses.contains(address) { addresses.append(address) }
                    }
                }
            }
            entry = current.pointee.ai_next
        }
        return addresses
    }
}

/// The two lookups of a daemon's webhooks, on one pool of threads (`LookupThreads`, a
/// service of the daemon's group): each has its own bound of names, so that whoever makes
/// webhooks cannot use up the lookups deliveries need.
package struct HostLookups: Sendable {
    /// At most 16 threads look names up at once; the checks hold at most 8 of them.
    static let maximumThreads = 16

    /// The threads both lookups run on.
    package let threads: LookupThreads
    /// The lookups of webhook deliveries: one at a time per name, so the webhooks there may
    /// be need at most a tenth of the bound; the rest is for lookups given up on whose
    /// names no webhook has any more (deleted, or changed by their DNS), which keep their
    /// places until glibc gives up on them.
    let deliveries: HostLookup
    /// The lookups of `POST /v1/webhooks`'s checks.
    package let checks: HostLookup

    /// Lookups through `lookup` (the system's resolver unless a test gives another).
    package init(threads: LookupThreads = LookupThreads(maximumThreads: maximumThreads),
         lookup: @escaping @Sendable (String) -> [IPAddress] = HostLookup.system) {
        self.threads = threads
        deliveries = HostLookup(maximumUnfinished: 10 * WebhookRepository.maximumWebhooks, threads: threads, lookup: lookup)
        checks = HostLookup(maximumUnfinished: 8, threads: threads, lookup: lookup)
    }
}
