import Dispatch
import Foundation
import Testing
import HeadwayCore
import HeadwayStore
import Lifecycle
@testable import HeadwayService

/// The connection of an attempt is pinned to every address its host was checked to
/// resolve to, in the resolver's order: libcurl still falls back from one it cannot reach.
/// A host's lookup is part of the attempt's time: a resolver that does not answer makes the
/// attempt one to retry, within `--webhook-timeout`.
@Suite struct WebhookTransportTests {
    @Test func everyCheckedAddressIsPinned() throws {
        let url = try WebhookURL.parse("http://Hooks.Example.com:8443/hook")
        let addresses = [IPAddress.parse("::1"), IPAddress.parse("127.0.0.1")].compactMap { $0 }
        #expect(WebhookTransport.pinning(url, to: addresses) == "hooks.example.com:8443:[0:0:0:0:0:0:0:1],127.0.0.1")
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
        let outcome = transport.post(try WebhookURL.parse("https://hooks.example.com/"), body: "{}", headers: [])
        #expect(outcome == WebhookTransport.Outcome(verdict: .retry, status: nil,
                                                     error: "the host 'hooks.example.com' was not resolved within 0.2 s"))
        #expect(lookups.running == 1)
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
