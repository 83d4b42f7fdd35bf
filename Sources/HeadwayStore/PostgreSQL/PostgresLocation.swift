import Foundation
import Glibc

/// Whether `location` (what `--db` names) is a PostgreSQL connection URI
/// (`postgresql://…` or `postgres://…`) rather than the path of an SQLite file.
public func isPostgresLocation(_ location: String) -> Bool {
    location.hasPrefix("postgresql://") || location.hasPrefix("postgres://")
}

/// `location` with any password (`user:PASSWORD@`, `password=PASSWORD`) replaced by `***`,
/// for logs and messages.
public func redactedLocation(_ location: String) -> String {
    guard isPostgresLocation(location), let schemeEnd = location.range(of: "://") else { return location }
    var redacted = location
    // Up to the query, not the first `/`: a password may hold a `/` its writer forgot to
    // percent-encode (more is hidden when a path holds an `@`, never less).
    let authorityEnd = redacted[schemeEnd.upperBound...].firstIndex(of: "?") ?? redacted.endIndex
    if let at = redacted[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@"),
       let colon = redacted[schemeEnd.upperBound..<at].firstIndex(of: ":") {
        redacted.replaceSubrange(redacted.index(after: colon)..<at, with: "***")
    }
    if let query = redacted.firstIndex(of: "?") {
        let parameters = redacted[redacted.index(after: query)...].split(separator: "&", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("password=") ? "password=***" : String($0) }
        redacted = String(redacted[...query]) + parameters.joined(separator: "&")
    }
    return redacted
}

/// `message` (libpq's, which may quote a part of the URI it could not parse, such as a
/// badly percent-encoded password) with every password `location` holds, as written and
/// decoded, replaced by `***`.
func redactedMessage(_ message: String, location: String) -> String {
    guard isPostgresLocation(location), let schemeEnd = location.range(of: "://") else { return message }
    var secrets: [Substring] = []
    let authorityEnd = location[schemeEnd.upperBound...].firstIndex(of: "?") ?? location.endIndex
    if let at = location[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@"),
       let colon = location[schemeEnd.upperBound..<at].firstIndex(of: ":") {
        secrets.append(location[location.index(after: colon)..<at])
    }
    if let query = location.firstIndex(of: "?") {
        secrets += location[location.index(after: query)...].split(separator: "&")
            .filter { $0.hasPrefix("password=") }.map { $0.dropFirst("password=".count) }
    }
    var redacted = message
    for secret in secrets where !secret.isEmpty {
        for form in Set([String(secret), String(secret).removingPercentEncoding ?? ""]) where !form.isEmpty {
            redacted = redacted.replacing(form, with: "***")
        }
    }
    return redacted
}
