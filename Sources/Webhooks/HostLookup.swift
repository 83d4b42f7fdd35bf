import Dispatch
import Foundation
import HeadwayCore
import HeadwayStore
import Lifecycle

/// Looks host names up (getaddrinfo) within a time limit. glibc's resolver has no limit of
/// its own to give: an unanswering name server costs up to its timeout times its attempts
/// times the servers listed (10 s with one, 28 s with three, measured), which would
/// stretch a webhook attempt far past `--webhook-timeout`. So each lookup runs on a thread
/// of its own, and whoever asked hears within the time given: the answer, or that it
/// timed out. A lookup given up on runs on to its end and frees what it holds.
///
/// A name already being looked up is not looked up again: whoever asks for it joins the
/// lookup running (each with a time limit of their own). Names being looked up are
/// bounded in number (`maximumUnfinished`); past that, a lookup is refused at once
/// (`busy`). Deliveries and the checks of new webhooks each have a `HostLookup` of their
/// own, so that whoever makes webhooks cannot use up the lookups deliveries need.
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
    }

    /// The lookups of webhook deliveries: one at a time per name, so the webhooks there may
    /// be need at most a tenth of the bound; the rest is for lookups given up on whose
    /// names no webhook has any more (deleted, or changed by their DNS), which keep their
    /// places until glibc gives up on them.
    static let deliveries = HostLookup(maximumUnfinished: 10 * WebhookRepository.maximumWebhooks,
                                       lookup: HostLookup.system)
    /// The lookups of `POST /v1/webhooks`'s checks.
    package static let checks = HostLookup(maximumUnfinished: 8, lookup: HostLookup.system)

    /// How many names may be being looked up at once, those given up on included.
    let maximumUnfinished: Int
    private let lookup: @Sendable (String) -> [IPAddress]
    /// The names being looked up, each with whoever waits for its answer.
    private let unfinished = Locked<[String: [Answer]]>([:])

    /// `lookup` resolves a name (blocking); tests give one that waits on their signal.
    init(maximumUnfinished: Int, lookup: @escaping @Sendable (String) -> [IPAddress]) {
        self.maximumUnfinished = maximumUnfinished
        self.lookup = lookup
    }

    /// How many names are being looked up, those given up on included.
    var running: Int { unfinished.withLock { $0.count } }

    /// Looks `host` up and calls `then` once: on a Dispatch worker with its answer or,
    /// after `seconds`, with `timedOut`; or at once, on the caller's thread, with `busy` or
    /// `noThread`. `then` must not block.
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
            let started = Self.startThread { [lookup, unfinished] in
                nameCurrentThread("headway-lookup")
                let addresses = lookup(host)
                // The name is free again before anyone hears: their next lookup of it is a new one.
                let waiting = unfinished.withLock { $0.removeValue(forKey: host) } ?? []
                // Heard on a Dispatch worker, which lives on, not on this thread, which ends:
                // GnuTLS keeps a random generator per thread that uses one (a new webhook's
                // id and secret) and does not free it when the thread ends (about 200 bytes
                // a thread, measured).
                DispatchQueue.global().async {
                    for answer in waiting { answer.give(addresses.isEmpty ? .unresolved : .addresses(addresses)) }
                }
            }
            guard started else {
                let waiting = unfinished.withLock { $0.removeValue(forKey: host) } ?? []
                for answer in waiting { answer.give(.noThread) }
                return
            }
        }
        answer.giveUp(after: seconds)
    }

    /// The addresses of `host`, waiting at most `seconds` for them (blocks the caller).
    func addresses(of host: String, within seconds: Double) -> Outcome {
        let heard = DispatchSemaphore(value: 0)
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
            var timer: Deadline?
        }
        /// A Dispatch timer, whose `cancel()` may be called from any thread.
        private final class Deadline: @unchecked Sendable {
            let source: any DispatchSourceTimer
            init(_ source: any DispatchSourceTimer) { self.source = source }
        }
        private let waiting: Locked<Waiting>

        init(_ then: @escaping @Sendable (Outcome) -> Void) { waiting = Locked(Waiting(then: then)) }

        func give(_ outcome: Outcome) {
            let (then, timer) = waiting.withLock { waiting in
                defer { waiting = Waiting() }
                return (waiting.then, waiting.timer)
            }
            timer?.source.cancel()
            then?(outcome)
        }

        /// Gives `timedOut` after `seconds`, unless the answer comes first.
        func giveUp(after seconds: Double) {
            let timer = Deadline(DispatchSource.makeTimerSource(queue: .global()))
            timer.source.schedule(deadline: .now() + max(0, seconds))
            timer.source.setEventHandler { [weak self] in self?.give(.timedOut) }
            timer.source.resume()
            let armed = waiting.withLock { waiting in
                guard waiting.then != nil else { return false }
                waiting.timer = timer
                return true
            }
            if !armed { timer.source.cancel() }
        }
    }

    /// Runs `body` on a new detached thread; false when none could be made (the process's
    /// or its cgroup's thread limit), which Foundation's `Thread.start()` would not say.
    private static func startThread(_ body: @escaping @Sendable () -> Void) -> Bool {
        final class Body { let run: @Sendable () -> Void; init(_ run: @escaping @Sendable () -> Void) { self.run = run } }
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return false
        }
        return true
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
