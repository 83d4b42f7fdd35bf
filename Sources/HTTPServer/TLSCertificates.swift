import CGnuTLS
import CMicroHTTPD
import Foundation
import Lifecycle

/// Where an HTTPS server finds its certificate and private key: PEM files, read at start
/// and again by each reload.
public struct TLSCertificateFiles: Sendable, Equatable {
    /// The certificate, followed by its intermediates if any (PEM).
    public var certificatePath: String
    /// The private key of the first certificate (PEM, unencrypted).
    public var keyPath: String

    public init(certificatePath: String, keyPath: String) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
    }
}

/// A certificate chain and its private key, loaded into GnuTLS's own forms, which a
/// handshake uses as they are. Never changed once loaded; freed when no handshake can
/// use it any more (see `TLSCertificates`).
final class TLSCredential: @unchecked Sendable {  // GnuTLS's pcert and privkey handles; immutable after init
    /// At most this many certificates in a chain.
    static let maximumChainLength = 16

    let certificates: UnsafeMutablePointer<gnutls_pcert_st>
    let certificateCount: UInt32
    let privateKey: gnutls_privkey_t
    /// The SHA-256 fingerprint of the first certificate (its DER form), as lower-case hex
    /// pairs joined by colons, as `openssl x509 -fingerprint -sha256` shows it.
    let fingerprint: String
    /// When the first certificate is valid (its notBefore and notAfter).
    let validity: TLSCertificateValidity

    /// Loads `files`; refuses, with a message naming the file, one that cannot be read or
    /// parsed, and a key that is not the certificate's.
    init(files: TLSCertificateFiles) throws {
        let certificatePEM = try Self.read(files.certificatePath, what: "TLS certificate")
        let keyPEM = try Self.read(files.keyPath, what: "TLS private key")
        let certificates = UnsafeMutablePointer<gnutls_pcert_st>.allocate(capacity: Self.maximumChainLength)
        var count = UInt32(Self.maximumChainLength)
        let imported = certificatePEM.withUnsafeBytes { raw in
            var datum = gnutls_datum_t(data: UnsafeMutablePointer(mutating: raw.bindMemory(to: UInt8.self).baseAddress),
                                       size: UInt32(raw.count))
            return gnutls_pcert_list_import_x509_raw(certificates, &count, &datum, GNUTLS_X509_FMT_PEM, 0)
        }
        guard imported >= 0, count > 0 else {
            certificates.deallocate()
            throw HTTPServerError(description: "TLS certificate \(files.certificatePath) is not a PEM certificate: "
                                  + Self.message(imported))
        }
        var key: gnutls_privkey_t?
        gnutls_privkey_init(&key)
        let keyImported = keyPEM.withUnsafeBytes { raw in
            var datum = gnutls_datum_t(data: UnsafeMutablePointer(mutating: raw.bindMemory(to: UInt8.self).baseAddress),
                                       size: UInt32(raw.count))
            return gnutls_privkey_import_x509_raw(key, &datum, GNUTLS_X509_FMT_PEM, nil, 0)
        }
        guard let key, keyImported >= 0 else {
            if let key { gnutls_privkey_deinit(key) }
            Self.free(certificates, count: count)
            throw HTTPServerError(description: "TLS private key \(files.keyPath) is not an unencrypted PEM private key: "
                                  + Self.message(keyImported))
        }
        guard Self.keyID(ofPublicKey: certificates.pointee.pubkey) == Self.keyID(of: key) else {
            gnutls_privkey_deinit(key)
            Self.free(certificates, count: count)
            throw HTTPServerError(description: "TLS private key \(files.keyPath) does not belong to the certificate "
                                  + "\(files.certificatePath)")
        }
        var digest = [UInt8](repeating: 0, count: 32)
        var digestSize = digest.count
        var der = certificates.pointee.cert
        gnutls_fingerprint(GNUTLS_DIG_SHA256, &der, &digest, &digestSize)
        fingerprint = digest.prefix(digestSize).map { String(format: "%02x", $0) }.joined(separator: ":")
        validity = Self.validity(of: &der)
        self.certificates = certificates
        certificateCount = count
        privateKey = key
    }

    deinit {
        gnutls_privkey_deinit(privateKey)
        Self.free(certificates, count: certificateCount)
    }

    private static func free(_ certificates: UnsafeMutablePointer<gnutls_pcert_st>, count: UInt32) {
        for index in 0..<Int(count) { gnutls_pcert_deinit(certificates + index) }
        certificates.deallocate()
    }

    private static func read(_ path: String, what: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HTTPServerError(description: "\(what) \(path) cannot be read")
        }
        return Array(data)
    }

    private static func message(_ code: Int32) -> String {
        code >= 0 ? "no certificate found" : String(cString: gnutls_strerror(code))
    }

    /// The notBefore and notAfter of a DER certificate (the epoch if unreadable: the
    /// certificate was just imported, so only a broken date field could do that).
    private static func validity(of der: inout gnutls_datum_t) -> TLSCertificateValidity {
        var certificate: gnutls_x509_crt_t?
        guard gnutls_x509_crt_init(&certificate) >= 0, let certificate else {
            return TLSCertificateValidity(notBefore: Date(timeIntervalSince1970: 0), notAfter: Date(timeIntervalSince1970: 0))
        }
        defer { gnutls_x509_crt_deinit(certificate) }
        guard gnutls_x509_crt_import(certificate, &der, GNUTLS_X509_FMT_DER) >= 0 else {
            return TLSCertificateValidity(notBefore: Date(timeIntervalSince1970: 0), notAfter: Date(timeIntervalSince1970: 0))
        }
        let start = gnutls_x509_crt_get_activation_time(certificate)
        let end = gnutls_x509_crt_get_expiration_time(certificate)
        return TLSCertificateValidity(notBefore: Date(timeIntervalSince1970: TimeInterval(max(0, start))),
                                      notAfter: Date(timeIntervalSince1970: TimeInterval(max(0, end))))
    }

    /// The identifier of a public key (SHA-256 of its DER form), or nil.
    private static func keyID(ofPublicKey key: gnutls_pubkey_t?) -> [UInt8]? {
        guard let key else { return nil }
        var id = [UInt8](repeating: 0, count: 64)
        var size = id.count
        guard gnutls_pubkey_get_key_id(key, UInt32(GNUTLS_KEYID_USE_SHA256.rawValue), &id, &size) >= 0 else { return nil }
        return Array(id.prefix(size))
    }

    private static func keyID(of privateKey: gnutls_privkey_t) -> [UInt8]? {
        var publicKey: gnutls_pubkey_t?
        guard gnutls_pubkey_init(&publicKey) >= 0, let publicKey else { return nil }
        defer { gnutls_pubkey_deinit(publicKey) }
        guard gnutls_pubkey_import_privkey(publicKey, privateKey, 0, 0) >= 0 else { return nil }
        return keyID(ofPublicKey: publicKey)
    }
}

/// When a certificate is valid: its notBefore and notAfter dates.
public struct TLSCertificateValidity: Sendable, Equatable {
    public var notBefore: Date
    public var notAfter: Date

    public init(notBefore: Date, notAfter: Date) {
        self.notBefore = notBefore
        self.notAfter = notAfter
    }

    /// Why the certificate is not valid at `now`, or nil if it is.
    public enum Problem: String, Sendable {
        case expired = "tls.certificate_expired"
        case notYetValid = "tls.certificate_not_yet_valid"
    }

    public func problem(at now: Date) -> Problem? {
        if now > notAfter { return .expired }
        if now < notBefore { return .notYetValid }
        return nil
    }
}

extension TLSCertificateFiles {
    /// Loads the files as a start would, and forgets them: throws with the same message if
    /// they cannot serve (checked before anything else is created, a database included).
    public func check() throws {
        _ = try TLSCredential(files: self)
    }
}

/// The certificate an HTTPS server hands out, replaceable while it serves: each handshake
/// asks for the current one (`certificateCallback`), so new connections get a reloaded
/// certificate and open ones keep the session they made.
///
/// A credential replaced is not freed at once: a handshake on a daemon's thread may hold
/// its pointers at the very moment of the reload, and GnuTLS keeps them until the handshake
/// ends. A handshake ends, or its connection is closed, within the head timeout (its first
/// request head must be whole by then); so a credential replaced more than
/// `retentionNanoseconds` ago (the server passes max(60 s, 2 × the head timeout)) is freed
/// at the next reload, and all of them once the daemons have stopped
/// (`releaseSuperseded`).
final class TLSCertificates: Sendable {
    /// The GnuTLS priority string of every HTTPS connection: TLS 1.3 and 1.2 only; ECDHE key
    /// exchange (forward secrecy; TLS 1.3's groups are GnuTLS's defaults); AES-GCM and
    /// ChaCha20-Poly1305 only (no CBC, no SHA-1 MAC); signatures with SHA-256 or better, or
    /// EdDSA, for ECDSA, RSA (PKCS#1 and PSS) and EdDSA certificates (the client's order
    /// of preference: the server's would cost a HelloRetryRequest to clients that offer X25519).
    static let priorities = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"
        + ":-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD"
        + ":-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"
        + ":-SIGN-ALL:+SIGN-ECDSA-SECP256R1-SHA256:+SIGN-ECDSA-SECP384R1-SHA384:+SIGN-ECDSA-SECP521R1-SHA512"
        + ":+SIGN-ECDSA-SHA256:+SIGN-ECDSA-SHA384:+SIGN-ECDSA-SHA512:+SIGN-EDDSA-ED25519:+SIGN-EDDSA-ED448"
        + ":+SIGN-RSA-PSS-RSAE-SHA256:+SIGN-RSA-PSS-RSAE-SHA384:+SIGN-RSA-PSS-RSAE-SHA512"
        + ":+SIGN-RSA-PSS-SHA256:+SIGN-RSA-PSS-SHA384:+SIGN-RSA-PSS-SHA512"
        + ":+SIGN-RSA-SHA256:+SIGN-RSA-SHA384:+SIGN-RSA-SHA512"

    private struct State {
        var current: TLSCredential
        /// Credentials replaced, each with the time (`now`) it was replaced, oldest first.
        var superseded: [(credential: TLSCredential, replacedAt: UInt64)] = []
    }

    let files: TLSCertificateFiles
    /// Shared by the TLS daemon's thread (each handshake) and the main thread (a reload on SIGHUP).
    private let state: Locked<State>
    /// How long a replaced credential is kept (nanoseconds of `now`).
    let retentionNanoseconds: UInt64
    /// A monotonic clock in nanoseconds.
    private let now: @Sendable () -> UInt64

    /// Loads `files` (throws with a clear message if they cannot serve).
    init(files: TLSCertificateFiles, retentionNanoseconds: UInt64 = 60_000_000_000,
         now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }) throws {
        self.files = files
        self.retentionNanoseconds = retentionNanoseconds
        self.now = now
        state = Locked(State(current: try TLSCredential(files: files)))
    }

    /// The SHA-256 fingerprint of the certificate handed out now.
    var fingerprint: String { state.withLock { $0.current.fingerprint } }

    /// When the certificate handed out now is valid.
    var validity: TLSCertificateValidity { state.withLock { $0.current.validity } }

    /// Replaced credentials not yet freed (for tests).
    var supersededCount: Int { state.withLock { $0.superseded.count } }

    /// Reads the files again and hands out their certificate from now on; returns its
    /// fingerprint. If they cannot serve, throws and keeps the current one. Frees the
    /// credentials replaced more than `retentionNanoseconds` ago.
    func reload() throws -> String {
        let loaded = try TLSCredential(files: files)
        let time = now()
        let expired = state.withLock { state in
            let old = state.superseded.filter { time &- $0.replacedAt > retentionNanoseconds }
            state.superseded.removeAll { time &- $0.replacedAt > retentionNanoseconds }
            state.superseded.append((state.current, time))
            state.current = loaded
            return old
        }
        _ = expired  // freed here, outside the lock, as the last reference goes
        return loaded.fingerprint
    }

    /// Frees every replaced credential: only once no handshake can run (the daemons have
    /// stopped).
    func releaseSuperseded() {
        let released = state.withLock { state in
            defer { state.superseded = [] }
            return state.superseded
        }
        _ = released
    }

    /// Hands the current chain and key to a handshake (the GnuTLS callback's out-parameters).
    fileprivate func select(_ chain: UnsafeMutablePointer<UnsafeMutablePointer<gnutls_pcert_st>?>,
                            _ length: UnsafeMutablePointer<UInt32>, _ key: UnsafeMutablePointer<gnutls_privkey_t?>) {
        state.withLock { state in
            chain.pointee = state.current.certificates
            length.pointee = state.current.certificateCount
            key.pointee = state.current.privateKey
        }
    }
}

/// libmicrohttpd's `MHD_OPTION_HTTPS_CERT_CALLBACK`, a GnuTLS
/// `gnutls_certificate_retrieve_function2`: finds the connection of the session
/// (libmicrohttpd stores it as the session's pointer), its socket context (the server's
/// `TLSCertificates`, stored when the connection started) and hands out the current
/// certificate. A global closure: nothing in it is actor-isolated.
let tlsCertificateCallback: @convention(c) (
    gnutls_session_t?, UnsafePointer<gnutls_datum_t>?, Int32, UnsafePointer<gnutls_pk_algorithm_t>?, Int32,
    UnsafeMutablePointer<UnsafeMutablePointer<gnutls_pcert_st>?>?, UnsafeMutablePointer<UInt32>?,
    UnsafeMutablePointer<gnutls_privkey_t?>?
) -> Int32 = { session, _, _, _, _, chain, length, key in
    guard let session, let chain, let length, let key,
          let connection = gnutls_session_get_ptr(session),
          let context = headway_connection_socket_context(OpaquePointer(connection))
    else { return -1 }
    Unmanaged<TLSCertificates>.fromOpaque(context).takeUnretainedValue().select(chain, length, key)
    return 0
}
