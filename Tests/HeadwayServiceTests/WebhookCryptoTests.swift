import Testing
@testable import Access

/// The signature of deliveries (GnuTLS's HMAC-SHA256) against RFC 4231's vectors, and the
/// form of new ids and secrets.
struct WebhookCryptoTests {
    @Test func hmacMatchesRFC4231() {
        // Test case 2: a short key.
        #expect(WebhookCrypto.hex(WebhookCrypto.hmacSHA256(key: Array("Jefe".utf8),
                                                           message: Array("what do ya want for nothing?".utf8)))
                    == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 6: a key longer than the block.
        #expect(WebhookCrypto.hex(WebhookCrypto.hmacSHA256(
            key: [UInt8](repeating: 0xAA, count: 131),
            message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)))
                    == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test func theSignatureCoversTheTimeAndTheBody() {
        let signature = WebhookCrypto.signature(secret: "Jefe", unixSeconds: 1_700_000_000, body: "{}")
        let expected = WebhookCrypto.hex(WebhookCrypto.hmacSHA256(key: Array("Jefe".utf8), message: Array("1700000000.{}".utf8)))
        #expect(signature == "t=1700000000,v1=" + expected)
        #expect(signature != WebhookCrypto.signature(secret: "Jefe", unixSeconds: 1_700_000_001, body: "{}"))
        #expect(signature != WebhookCrypto.signature(secret: "Jefe", unixSeconds: 1_700_000_000, body: "{ }"))
    }

    @Test func idsAndSecretsAreFreshAndWellFormed() throws {
        let (id, otherID) = (try WebhookCrypto.newWebhookID(), try WebhookCrypto.newWebhookID())
        let (secret, otherSecret) = (try WebhookCrypto.newSecret(), try WebhookCrypto.newSecret())
        #expect(id.hasPrefix("whk_") && id.count == 20 && id != otherID)
        #expect(secret.hasPrefix("whsec_") && secret.count == 49 && secret != otherSecret)
    }
}
