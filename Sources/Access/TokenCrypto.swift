import CGnuTLS
import HeadwayCore

/// The two cryptographic operations tokens need, both from GnuTLS (no hash or generator
/// of our own): random bytes from the system CSPRNG, and SHA-256.
package enum TokenCrypto {
    /// Why a token could not be made.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// `count` bytes from GnuTLS's key-grade generator (`GNUTLS_RND_KEY`).
    static func randomBytes(_ count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let status = bytes.withUnsafeMutableBytes { gnutls_rnd(GNUTLS_RND_KEY, $0.baseAddress, count) }
        guard status == 0 else { throw Failure(description: "gnutls_rnd failed (\(status))") }
        return bytes
    }

    /// The SHA-256 of `text`'s UTF-8 bytes (32 bytes).
    static func sha256(_ text: String) -> [UInt8] { sha256(bytes: Array(text.utf8)) }

    /// The SHA-256 of `bytes` (32 bytes).
    static func sha256(bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let status = bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBytes { output in
                gnutls_hash_fast(GNUTLS_DIG_SHA256, input.baseAddress, input.count, output.baseAddress)
            }
        }
        precondition(status == 0, "gnutls_hash_fast(SHA-256) failed (\(status))")
        return digest
    }

    /// A new secret (`hw_` + 43 base64url characters: 256 random bits).
    static func newSecret() throws -> String { TokenSecret.make(randomBytes: try randomBytes(32)) }

    /// A new token id: `tok_` and 16 hex digits (64 random bits).
    static func newTokenID() throws -> String {
        "tok_" + (try randomBytes(8)).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    /// A new token for `request`, made at `now`, and its secret (shown once).
    package static func newToken(_ request: TokenRequest, now: EpochMilliseconds) throws -> (TokenRecord, secret: String) {
        let secret = try newSecret()
        let token = TokenRecord(id: try newTokenID(), name: request.name, scopes: request.scopes,
                                taskPrefix: request.taskPrefix, secretHash: sha256(secret), createdAt: now,
                                expiresAt: request.expiresAt)
        return (token, secret)
    }
}
