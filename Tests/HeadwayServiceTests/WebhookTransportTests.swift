import Testing
import HeadwayCore
@testable import HeadwayService

/// The connection of an attempt is pinned to every address its host was checked to
/// resolve to, in the resolver's order: libcurl still falls back from one it cannot reach.
@Suite struct WebhookTransportTests {
    @Test func everyCheckedAddressIsPinned() throws {
        let url = try WebhookURL.parse("http://Hooks.Example.com:8443/hook")
        let addresses = [IPAddress.parse("::1"), IPAddress.parse("127.0.0.1")].compactMap { $0 }
        #expect(WebhookTransport.pinning(url, to: addresses) == "hooks.example.com:8443:[0:0:0:0:0:0:0:1],127.0.0.1")
    }

    @Test func aNameIsCheckedForEachOfItsAddresses() throws {
        let url = try WebhookURL.parse("http://localhost:9/")
        let (refusal, addresses) = WebhookTransport.refusal(of: url, allowPrivate: true)
        #expect(refusal == nil && addresses.contains(IPAddress.parse("127.0.0.1")!))
        #expect(WebhookTransport.refusal(of: url, allowPrivate: false).addresses.isEmpty)
    }
}
