import Foundation
import HeadwayCore

/// A web origin (RFC 6454): scheme, host and port, as a browser sends it in `Origin`. The
/// port is always known (the scheme's default when the text leaves it out), so
/// `https://a.example` and `https://a.example:443` are the same origin.
public struct WebOrigin: Hashable, Sendable, CustomStringConvertible {
    /// `http` or `https`.
    public var scheme: String
    /// Lower-cased; an IPv6 literal without its brackets.
    public var host: String
    public var port: Int

    public init(scheme: String, host: String, port: Int) {
        self.scheme = scheme
        self.host = host
        self.port = port
    }

    /// The origin as browsers write it: `https://a.example`, `http://[::1]:8080`.
    public var description: String {
        let authority = Authority.hostText(host)
        return port == Self.defaultPort(of: scheme) ? "\(scheme)://\(authority)" : "\(scheme)://\(authority):\(port)"
    }

    /// 80 for `http`, 443 for `https`, nil for every other scheme.
    static func defaultPort(of scheme: String) -> Int? {
        switch scheme {
        case "http": 80
        case "https": 443
        default: nil
        }
    }

    /// The value of an `Origin` header, if it is a serialized `http` or `https` origin
    /// (`scheme://host[:port]`, nothing after); nil for `null` and anything else.
    init?(header: String) {
        guard let (origin, rest) = Self.leadingOrigin(of: header), rest.isEmpty else { return nil }
        self = origin
    }

    /// The origin at the start of `text` (`scheme://host[:port]`) and what follows it (a
    /// path, a query…); nil unless the scheme is `http` or `https`, the authority has a
    /// host and no user information, and the port (if any) is 1–65535.
    static func leadingOrigin(of text: String) -> (WebOrigin, rest: Substring)? {
        guard let separator = text.range(of: "://") else { return nil }
        let scheme = text[..<separator.lowerBound].lowercased()
        guard let defaultPort = defaultPort(of: scheme) else { return nil }
        let afterScheme = text[separator.upperBound...]
        let authorityEnd = afterScheme.firstIndex { "/?#".contains($0) } ?? afterScheme.endIndex
        let authority = afterScheme[..<authorityEnd]
        guard !authority.contains("@"), let parsed = Authority(authority) else { return nil }
        return (WebOrigin(scheme: scheme, host: parsed.host, port: parsed.port ?? defaultPort), afterScheme[authorityEnd...])
    }
}

/// A host and an optional port, as in a `Host` header or the authority of a URL: `name`,
/// `name:port`, `[v6]` or `[v6]:port`.
struct Authority: Equatable, Sendable {
    /// Lower-cased; an IPv6 literal without its brackets.
    var host: String
    /// Nil when the text gives none.
    var port: Int?

    /// Parses `text`; nil when the host is empty, an IPv6 literal in brackets is not one,
    /// or the port is not a number from 1 to 65535.
    init?(_ text: Substring) {
        // Read byte by byte: every byte the rules look at (brackets, colon, digits) is
        // ASCII, and a Host header is parsed on every request.
        let bytes = text.utf8
        let hostBytes: Substring.UTF8View.SubSequence
        let portBytes: Substring.UTF8View.SubSequence?
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostBytes = bytes[bytes.index(after: bytes.startIndex)..<close]
            let rest = bytes[bytes.index(after: close)...]
            guard rest.isEmpty || rest.first == UInt8(ascii: ":") else { return nil }
            portBytes = rest.isEmpty ? nil : rest.dropFirst()
            guard Self.isIPv6Literal(String(decoding: hostBytes, as: UTF8.self)) else { return nil }
        } else if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            hostBytes = bytes[..<colon]
            portBytes = bytes[bytes.index(after: colon)...]
        } else {
            hostBytes = bytes[...]
            portBytes = nil
        }
        guard !hostBytes.isEmpty else { return nil }
        if let portBytes {
            guard (1...5).contains(portBytes.count) else { return nil }
            var port = 0
            for byte in portBytes {
                guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
                port = port * 10 + Int(byte - UInt8(ascii: "0"))
            }
            guard (1...65535).contains(port) else { return nil }
            self.port = port
        } else {
            port = nil
        }
        let hostText = String(decoding: hostBytes, as: UTF8.self)
        host = hostBytes.allSatisfy({ $0 < 0x80 && !($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z")) })
            ? hostText : hostText.lowercased()
    }

    /// Whether `host` is an IPv4 or IPv6 address written out (which no DNS answer can
    /// point elsewhere), not a name.
    static func isAddressLiteral(_ host: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, host, &address) == 1 || isIPv6Literal(host)
    }

    static func isIPv6Literal(_ host: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET6, host, &address) == 1
    }

    /// `host` as written in a URL or `Host` header: an IPv6 literal in brackets.
    static func hostText(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

    /// Whether `host` is written only with the characters of a DNS name (letters,
    /// digits, `-`, `.`) or is an address literal.
    static func isPlausibleHost(_ host: String) -> Bool {
        isAddressLiteral(host) || host.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }
    }
}

/// One `--cors-origin`: the origin of pages allowed to call the API from a browser, or any.
public enum CORSOrigin: Hashable, Sendable {
    /// `*`: pages of every origin (but `null`).
    case any
    /// Pages of exactly this origin.
    case exact(WebOrigin)

    /// Parses a flag's value: `*`, or `scheme://host[:port]` with nothing after.
    package static func parse(_ text: String) throws(UsageError) -> CORSOrigin {
        if text == "*" { return .any }
        guard let (origin, rest) = WebOrigin.leadingOrigin(of: text), Authority.isPlausibleHost(origin.host) else {
            throw UsageError("--cors-origin must be '*' or an origin such as https://dash.example.com, not '\(text)'")
        }
        guard rest.isEmpty else {
            throw UsageError("--cors-origin takes an origin without a path (scheme://host[:port], e.g. \(origin)), not '\(text)'")
        }
        return .exact(origin)
    }
}

extension WebOrigin {
    /// Parses a `--public-url` value (`http` or `https`, a host, an optional port and
    /// path): the origin it names.
    package static func parsePublicURL(_ text: String) throws(UsageError) -> WebOrigin {
        guard let (origin, rest) = leadingOrigin(of: text), Authority.isPlausibleHost(origin.host),
              !rest.contains("?"), !rest.contains("#") else {
            throw UsageError("--public-url must be an http or https URL such as https://headway.example.com, not '\(text)'")
        }
        return origin
    }
}
