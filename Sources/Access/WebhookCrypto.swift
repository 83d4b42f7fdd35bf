import CGnuTLS
import HeadwayCore

/// What webhooks need of cryptography, from GnuTLS as for tokens: a secret from the
/// CSPRNG, and the HMAC-SHA256 signature of each delivery.
package enum WebhookCrypto {
    /// A new webhook id: `whk_` and 16 hex digits (64 random bits).
    package static func newWebhookID() throws -> String {
        "whk_" + hex(try TokenCrypto.randomBytes(8))
    }

    /// A new signing secret: `whsec_` and 43 base64url characters (256 random bits).
    package static func newSecret() throws -> String {
        "whsec_" + Base64URL.encode(try TokenCrypto.randomBytes(32))
    }

    /// The `Headway-Signature` value of `body` sent at `unixSeconds`:
    /// `t=<seconds>,v1=<hex HMAC-SHA256(secret, "<seconds>.<body>")>`.
    package static func signature(secret: String, unixSeconds: Int64, body: String) -> String {
        "t=\(unixSeconds),v1=\(hex(hmacSHA256(key: Array(secret.utf8), message: Array("\(unixSeconds).\(body)".utf8))))"
    }

    /// HMAC-SHA256 of `message` under `key` (32 bytes).
    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let status = key.withUnsafeBytes { key in
            message.withUnsafeBytes { message in
                digest.withUnsafeMutableBytes { output in
                    gnutls_hmac_fast(GNUTLS_MAC_SHA256, key.baseAddress, key.count, message.baseAddress, message.count,
                                     output.baseAddress)
                }
            }
        }
        precondition(status == 0, "gnutls_hmac_fast(SHA-256) failed (\(status))")
        return digest
    }

    /// Lower-case hex of `bytes`.
    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
