import Dispatch
import Foundation
import HeadwayCore
import Lifecycle

/// Looks a host name up (getaddrinfo) within a time limit. glibc's resolver has no limit
/// of its own to give: an unanswering name server costs up to its timeout times its
/// attempts times the servers listed (30 s with the defaults), which would stretch a
/// webhook attempt far past `--webhook-timeout`. So each lookup runs on a thread of its
/// own and the caller waits for it only as long as it may; a lookup given up on runs on to
/// its end and frees what it holds. Lookups not yet finished are bounded in number, so
/// a resolver that never answers costs a few parked threads, not a thread per attempt.
final class HostLookup: Sendable {
    /// What a lookup came to.
    enum Outcome: Sendable, Equatable {
        /// The addresses the name resolves to, in the resolver's order (never empty).
        case addresses([IPAddress])
        /// The resolver answered with no address (no such name, or a failure it reports).
        case unresolved
        /// No answer within the time given.
        case timedOut
        /// As many lookups as allowed are still running (a resolver that does not answer).
        case busy
    }

    /// The lookups of the process: webhook deliveries and `POST /v1/webhooks` checks.
    static let shared = HostLookup(maximumUnfinished: 8, lookup: HostLookup.system)

    /// How many lookups may be running at once, those given up on included.
    let maximumUnfinished: Int
    private let lookup: @Sendable (String) -> [IPAddress]
    private let unfinished = Locked(0)

    /// `lookup` resolves a name (blocking); tests give one that waits on their signal.
    init(maximumUnfinished: Int, lookup: @escaping @Sendable (String) -> [IPAddress]) {
        self.maximumUnfinished = maximumUnfinished
        self.lookup = lookup
    }

    /// Lookups still running, those given up on included.
    var running: Int { unfinished.withLock { $0 } }

    /// The addresses of `host`, waiting at most `seconds` for them.
    func addresses(of host: String, within seconds: Double) -> Outcome {
        let admitted = unfinished.withLock { count in
            guard count < maximumUnfinished else { return false }
            count += 1
            return true
        }
        guard admitted else { return .busy }
        let answer = Answer()
        let thread = Thread { [lookup, unfinished] in
            let addresses = lookup(host)
            // Its place is free before its caller hears: the caller's next lookup has it.
            unfinished.withLock { $0 -= 1 }
            answer.give(addresses)
        }
        thread.name = "headway-lookup"
        thread.start()
        guard answer.arrived.wait(timeout: .now() + max(0, seconds)) == .success else { return .timedOut }
        let addresses = answer.addresses
        return addresses.isEmpty ? .unresolved : .addresses(addresses)
    }

    /// One lookup's answer, handed from its thread to the waiting caller.
    private final class Answer: Sendable {
        let arrived = DispatchSemaphore(value: 0)
        private let given = Locked<[IPAddress]>([])

        func give(_ addresses: [IPAddress]) {
            given.withLock { $0 = addresses }
            arrived.signal()
        }

        var addresses: [IPAddress] { given.withLock { $0 } }
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
