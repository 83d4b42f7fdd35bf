import Dispatch
import Foundation
import Testing
import HeadwayCore
import HeadwayStore
import Lifecycle
@testable import Webhooks

/// The connection of an attempt is pinned to every address its host was checked to
/// resolve to, in the resolver's order, for every URL (a name or an address written out):
/// libcurl still falls back from one it cannot reach, and never resolves or reads a host
/// on its own. A host's lookup is part of the attempt's time: a resolver that does not
/// answer makes the attempt one to retry, within `--webhook-timeout`. Every attempt is
/// driven on the one thread of `WebhookTransfers`: a receiver that never answers holds up
/// no other.
@Suite struct WebhookTransportTests {
    @Test func everyCheckedAddressIsPinnedThroughANameOfTheAttempt() throws {
        let url = try WebhookURL.parse("http://Hooks.Example.com:8443/hook")
        let addresses = [IPAddress.parse("::1"), IPAddress.parse("127.0.0.1")].compactMap { $0 }
        #expect(WebhookTransport.pin(url, to: addresses, name: "attempt-7.headway.invalid")
                    == WebhookTransport.Pin(connectTo: "::attempt-7.headway.invalid:8443",
                                            resolve: "attempt-7.headway.invalid:8443:[0:0:0:0:0:0:0:1],127.0.0.1"))
        // An address written out is pinned too: libcurl does not read it again.
        let literal = try WebhookURL.parse("https://93.184.216.34/hook")
        #expect(WebhookTransport.pin(literal, to: [IPAddress.parse("93.184.216.34")!], name: "n.invalid")
                    == WebhookTransport.Pin(connectTo: "::n.invalid:443", resolve: "n.invalid:443:93.184.216.34"))
    }

    @Test func aNameIsCheckedForEachOfItsAddresses() throws {
        let url = try WebhookURL.parse("http://localhost:9/")
        guard case .allowed(let addresses) = WebhookTransport.check(url, allowPrivate: true, within: 10, lookups: .deliveries) else {
            Issue.record("localhost was not allowed with private targets allowed")
            return
        }
        #expect(addresses.contains(IPAddress.parse("127.0.0.1")!))
        guard case .refused(let reason, let final) = WebhookTransport.check(url, allowPrivate: false, within: 10, lookups: .deliveries) else {
            Issue.record("localhost was allowed without private targets")
            return
        }
        #expect(final && reason.contains("not a public address"))
    }

    @Test func aNameThatDoesNotResolveMayResolveLater() throws {
        let url = try WebhookURL.parse("https://hooks.example.com/")
        let lookups = HostLookup(maximumUnfinished: 1, lookup: { _ in [] })
        #expect(WebhookTransport.check(url, allowPrivate: false, within: 10, lookups: lookups)
                    == .refused("the host 'hooks.example.com' could not be resolved", final: false))
    }

    @Test func anAttemptWhoseLookupDoesNotAnswerIsRetriedNotWaitedFor() throws {
        let resolver = HeldResolver(answer: "192.0.2.1")
        let lookups = resolver.lookups(maximumUnfinished: 4)
        defer { resolver.answers.signal() }
        let transport = WebhookTransport(timeoutSeconds: 0.2, allowPrivate: false, lookups: lookups)
        let transfers = RunningTransfers()
        defer { transfers.stop() }
        let outcome = transfers.post(transport, try WebhookURL.parse("https://hooks.example.com/"))
        #expect(outcome == WebhookTransport.Outcome(verdict: .retry, status: nil,
                                                     error: "the host 'hooks.example.com' was not resolved within 0.2 s"))
        #expect(lookups.running == 1)
    }

    /// The resolver says 127.0.0.2 where libcurl, left to itself, would connect to
    /// 127.0.0.1 (or ::1), where nothing listens on the receiver's port (as a name
    /// rebound between the check and the connection would): the POST arrives at the
    /// address checked, and names the URL's own host, however the host is written.
    @Test(arguments: ["localhost", "localhost.", "LOCALHOST"])
    func aDeliveryGoesToTheAddressCheckedWhateverLibcurlWouldResolve(_ host: String) throws {
        let receiver = try LoopbackReceiver(address: "127.0.0.2", answer: true)
        defer { receiver.close() }
        let lookups = HostLookup(maximumUnfinished: 4, lookup: { name in
            name.lowercased().hasPrefix("localhost") ? [IPAddress.parse("127.0.0.2")!] : []
        })
        let transport = WebhookTransport(timeoutSeconds: 10, allowPrivate: true, lookups: lookups)
        let transfers = RunningTransfers()
        defer { transfers.stop() }
        let outcome = transfers.post(transport, try WebhookURL.parse("http://\(host):\(receiver.port)/hook"))
        #expect(outcome == WebhookTransport.Outcome(verdict: .delivered, status: 200, error: nil))
        let heads = receiver.heads.withLock { $0 }
        #expect(heads.count == 1)
        #expect(heads.first?.lowercased().contains("\r\nhost: \(host.lowercased()):\(receiver.port)\r\n") == true,
                "\(heads)")
    }

    /// A URL that was stored before the rules refused its host is never handed to libcurl
    /// by the dispatcher (it parses each URL again); the transport, given an address
    /// written out, connects to that address and no other.
    @Test func anAddressWrittenOutIsConnectedToAsChecked() throws {
        let receiver = try LoopbackReceiver(address: "127.0.0.2", answer: true)
        defer { receiver.close() }
        let transport = WebhookTransport(timeoutSeconds: 10, allowPrivate: true,
                                         lookups: HostLookup(maximumUnfinished: 1, lookup: { _ in [] }))
        let transfers = RunningTransfers()
        defer { transfers.stop() }
        let outcome = transfers.post(transport, try WebhookURL.parse("http://127.0.0.2:\(receiver.port)/hook"))
        #expect(outcome == WebhookTransport.Outcome(verdict: .delivered, status: 200, error: nil))
    }

    /// Twenty receivers that accept and never answer, and one that answers: the one that
    /// answers has its outcome at once, while the twenty are all in flight on the one
    /// thread (each held until its timeout, no thread of its own).
    @Test func receiversThatNeverAnswerHoldUpNoOther() throws {
        let hanging = try LoopbackReceiver(address: "127.0.0.1", answer: false)
        defer { hanging.close() }
        let fast = try LoopbackReceiver(address: "127.0.0.1", answer: true)
        defer { fast.close() }
        let transport = WebhookTransport(timeoutSeconds: 30, allowPrivate: true,
                                         lookups: HostLookup(maximumUnfinished: 1, lookup: { _ in [] }))
        let transfers = RunningTransfers()
        defer { transfers.stop() }
        let hangingOutcomes = Locked(0)
        for index in 0..<20 {
            transport.post(try WebhookURL.parse("http://127.0.0.1:\(hanging.port)/\(index)"), body: "{}", headers: [],
                           owner: "whk_\(index)", through: transfers.transfers) { _ in hangingOutcomes.withLock { $0 += 1 } }
        }
        for _ in 0..<1000 where hanging.heads.withLock({ $0.count }) < 20 { Thread.sleep(forTimeInterval: 0.005) }
        #expect(hanging.heads.withLock { $0.count } == 20)
        let started = DispatchTime.now()
        let outcome = transfers.post(transport, try WebhookURL.parse("http://127.0.0.1:\(fast.port)/hook"))
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        #expect(outcome.verdict == .delivered && seconds < 2, "\(outcome) after \(seconds) s")
        #expect(transfers.transfers.inFlight == 20 && hangingOutcomes.withLock { $0 } == 0)
    }

    /// A stop drops the transfers in flight (no outcome: their deliveries stay pending) and
    /// returns at once, however long their receivers would take.
    @Test func aStopDropsTheTransfersInFlight() throws {
        let hanging = try LoopbackReceiver(address: "127.0.0.1", answer: false)
        defer { hanging.close() }
        let transport = WebhookTransport(timeoutSeconds: 30, allowPrivate: true,
                                         lookups: HostLookup(maximumUnfinished: 1, lookup: { _ in [] }))
        let transfers = RunningTransfers()
        let outcomes = Locked(0)
        transport.post(try WebhookURL.parse("http://127.0.0.1:\(hanging.port)/"), body: "{}", headers: [],
                       owner: "whk_hanging", through: transfers.transfers) { _ in outcomes.withLock { $0 += 1 } }
        for _ in 0..<1000 where hanging.heads.withLock({ $0.count }) < 1 { Thread.sleep(forTimeInterval: 0.005) }
        let started = DispatchTime.now()
        transfers.stop()
        #expect(Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9 < 2)
        #expect(outcomes.withLock { $0 } == 0 && transfers.transfers.inFlight == 0)
        // Added after the stop: dropped, no outcome.
        transport.post(try WebhookURL.parse("http://127.0.0.1:\(hanging.port)/"), body: "{}", headers: [],
                       owner: "whk_hanging", through: transfers.transfers) { _ in outcomes.withLock { $0 += 1 } }
        #expect(outcomes.withLock { $0 } == 0)
    }
}

extension WebhookTransportTests {
    /// A cancelled webhook's attempt ends at once (its connection closed, its outcome
    /// `cancelledOutcome`), however long its receiver would take; another webhook's stays.
    @Test func aCancelledWebhooksAttemptEndsAtOnce() throws {
        let hanging = try LoopbackReceiver(address: "127.0.0.1", answer: false)
        defer { hanging.close() }
        let transport = WebhookTransport(timeoutSeconds: 30, allowPrivate: true,
                                         lookups: HostLookup(maximumUnfinished: 1, lookup: { _ in [] }))
        let transfers = RunningTransfers()
        defer { transfers.stop() }
        let outcomes = Locked<[String: WebhookTransport.Outcome]>([:])
        for owner in ["whk_deleted", "whk_kept"] {
            transport.post(try WebhookURL.parse("http://127.0.0.1:\(hanging.port)/\(owner)"), body: "{}", headers: [],
                           owner: owner, through: transfers.transfers) { outcome in outcomes.withLock { $0[owner] = outcome } }
        }
        for _ in 0..<1000 where hanging.heads.withLock({ $0.count }) < 2 { Thread.sleep(forTimeInterval: 0.005) }
        #expect(transfers.transfers.inFlight == 2)
        transfers.transfers.cancel(["whk_deleted"])
        for _ in 0..<400 where outcomes.withLock({ $0["whk_deleted"] }) == nil { Thread.sleep(forTimeInterval: 0.005) }
        #expect(outcomes.withLock { $0 } == ["whk_deleted": WebhookTransfers.cancelledOutcome])
        #expect(transfers.transfers.inFlight == 1)
    }
}

/// `WebhookTransfers` running on a thread of the test's, until `stop`.
private final class RunningTransfers: Sendable {
    let transfers = WebhookTransfers()
    private let ended = DispatchSemaphore(value: 0)

    init() {
        Thread { [transfers, ended] in
            transfers.run()
            ended.signal()
        }.start()
    }

    /// Posts `{}` to `url` and waits for the outcome (at most 60 s).
    func post(_ transport: WebhookTransport, _ url: WebhookURL) -> WebhookTransport.Outcome {
        let heard = DispatchSemaphore(value: 0)
        let outcome = Locked<WebhookTransport.Outcome?>(nil)
        transport.post(url, body: "{}", headers: [], owner: "whk_test", through: transfers) { answer in
            outcome.withLock { $0 = answer }
            heard.signal()
        }
        _ = heard.wait(timeout: .now() + 60)
        return outcome.withLock { $0 } ?? WebhookTransport.Outcome(verdict: .fail, status: nil, error: "no outcome in 60 s")
    }

    func stop() {
        transfers.requestStop()
        ended.wait()
    }
}

/// A receiver on a loopback address: accepts every connection, records each request's
/// head, and answers `200` with no body, or (`answer` false) never answers and holds the
/// connection until `close`.
private final class LoopbackReceiver: @unchecked Sendable {  // the listening socket: closed once, by `close`
    let port: Int
    let heads = Locked<[String]>([])
    private let listener: Int32
    private let connections = Locked<[Int32]>([])

    init(address: String, answer: Bool) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var name = sockaddr_in()
        name.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, address, &name.sin_addr)
        let bound = withUnsafePointer(to: &name) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        struct CannotListen: Error { var address: String }
        guard bound == 0, listen(listener, 128) == 0 else { throw CannotListen(address: address) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &name) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: name.sin_port))
        Thread { [heads, connections] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                connections.withLock { $0.append(connection) }
                Thread {
                    var received: [UInt8] = []
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while !received.contains(subsequence: Array("\r\n\r\n".utf8)) {
                        let count = read(connection, &buffer, buffer.count)
                        guard count > 0 else { return }
                        received += buffer[0..<count]
                    }
                    heads.withLock { $0.append(String(decoding: received, as: UTF8.self)) }
                    guard answer else { return }
                    let reply = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
                    _ = reply.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                }.start()
            }
        }.start()
    }

    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
        for connection in connections.withLock({ $0 }) { Glibc.close(connection) }
    }
}

private extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard count >= subsequence.count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<$0 + subsequence.count]) == subsequence }
    }
}

/// Lookups wait at most the time given, and those still running are bounded in number.
@Suite struct HostLookupTests {
    @Test func anAnswerInTimeIsGiven() {
        let lookups = HostLookup(maximumUnfinished: 1, lookup: { host in
            host == "hooks.example.com" ? [IPAddress.parse("192.0.2.7")!, IPAddress.parse("2001:db8::7")!] : []
        })
        #expect(lookups.addresses(of: "hooks.example.com", within: 10)
                    == .addresses([IPAddress.parse("192.0.2.7")!, IPAddress.parse("2001:db8::7")!]))
        #expect(lookups.addresses(of: "nowhere.example.com", within: 10) == .unresolved)
    }

    @Test func theSystemResolverAnswersForLocalhost() {
        let outcome = HostLookup.deliveries.addresses(of: "localhost", within: 10)
        guard case .addresses(let addresses) = outcome else {
            Issue.record("localhost did not resolve: \(outcome)")
            return
        }
        #expect(addresses.contains(IPAddress.parse("127.0.0.1")!))
    }

    @Test func lookupsNotAnsweringAreGivenUpOnAndBounded() async throws {
        let resolver = HeldResolver(answer: "192.0.2.1")
        let (resolverAnswers, called) = (resolver.answers, resolver.called)
        let lookups = resolver.lookups(maximumUnfinished: 2)
        #expect(lookups.addresses(of: "a.example.com", within: 0.05) == .timedOut)
        #expect(lookups.addresses(of: "b.example.com", within: 0.05) == .timedOut)
        // Two lookups still wait for the resolver: a third is not started.
        #expect(lookups.addresses(of: "c.example.com", within: 10) == .busy)
        #expect(called.withLock { $0 } == 2 && lookups.running == 2)

        // The resolver answers: the lookups given up on end and free their places.
        resolverAnswers.signal()
        resolverAnswers.signal()
        for _ in 0..<1000 where lookups.running > 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(lookups.running == 0)
        #expect(lookups.addresses(of: "c.example.com", within: 0.05) == .timedOut)
        resolverAnswers.signal()
    }

    @Test func aNameBeingLookedUpIsJoinedNotLookedUpAgain() {
        let resolver = HeldResolver(answer: "192.0.2.9")
        let (resolverAnswers, called) = (resolver.answers, resolver.called)
        let lookups = resolver.lookups(maximumUnfinished: 1)
        let heard = DispatchSemaphore(value: 0)
        let outcomes = Locked<[HostLookup.Outcome]>([])
        let hearingThreads = Locked<Set<String>>([])
        for _ in 0..<3 {
            lookups.lookUp("hooks.example.com", within: 10) { outcome in
                outcomes.withLock { $0.append(outcome) }
                let thread = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
                hearingThreads.withLock { _ = $0.insert(thread.trimmingCharacters(in: .whitespacesAndNewlines)) }
                heard.signal()
            }
        }
        // One name is being looked up: the bound of one does not refuse the two who joined.
        #expect(lookups.running == 1)
        resolverAnswers.signal()
        for _ in 0..<3 { heard.wait() }
        #expect(called.withLock { $0 } == 1)
        #expect(outcomes.withLock { $0 } == Array(repeating: .addresses([IPAddress.parse("192.0.2.9")!]), count: 3))
        // Heard on a Dispatch worker, not on the lookup's thread, which ends (GnuTLS keeps a
        // random generator per thread that used one, and never frees it).
        #expect(!hearingThreads.withLock { $0 }.contains("headway-lookup"))
        #expect(lookups.running == 0)
    }

    /// Whoever makes webhooks cannot use up the lookups of deliveries, and deliveries, at
    /// most one lookup per webhook's host, are never refused for want of one.
    @Test func checksAndDeliveriesLookUpApart() {
        #expect(HostLookup.checks !== HostLookup.deliveries)
        #expect(HostLookup.deliveries.maximumUnfinished >= WebhookRepository.maximumWebhooks)
    }
}

/// A resolver that answers only when the test signals `answers`, counting its lookups.
private struct HeldResolver {
    let answers = DispatchSemaphore(value: 0)
    let called = Locked(0)
    let answer: String

    func lookups(maximumUnfinished: Int) -> HostLookup {
        HostLookup(maximumUnfinished: maximumUnfinished, lookup: { [answers, called, answer] _ in
            called.withLock { $0 += 1 }
            answers.wait()
            return [IPAddress.parse(answer)!]
        })
    }
}
