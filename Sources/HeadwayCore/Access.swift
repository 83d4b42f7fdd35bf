/// What a token may do: one or more scopes. `admin` includes every other scope.
public enum Scope: String, Sendable, CaseIterable, Comparable {
    /// Register tasks, report progress, heartbeats and finishes.
    case report
    /// List, get, history, events, metrics.
    case read
    /// Cancel and delete tasks.
    case control
    /// Manage tokens, and everything the other scopes allow.
    case admin

    public static func < (lhs: Scope, rhs: Scope) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// The access a route requires: none (`public`: health checks, the dashboard's static
/// files), a token with one scope, or any valid token.
public enum RouteAccess: Sendable, Equatable, CustomStringConvertible {
    /// Served to anyone, with or without a token.
    case `public`
    /// Needs a token holding this scope (or `admin`) once any token exists.
    case scope(Scope)
    /// A token, when one is presented, must be valid (of any scope); without one the
    /// request is served as anonymous, with no scope (`GET /v1/token`: what the token
    /// presented allows, or that one is needed).
    case anyToken

    public var description: String {
        switch self {
        case .public: "public"
        case .scope(let scope): scope.rawValue
        case .anyToken: "any token"
        }
    }
}

/// What one request is allowed: the grant of the token it presented, or, while no token
/// exists, everything (`unrestricted`: the daemon then serves loopback only).
public struct Grant: Sendable, Equatable {
    /// The token's id (nil without a token), for logs and for closing its streams.
    public var tokenID: String?
    /// The token's name, for logs.
    public var tokenName: String?
    public var scopes: Set<Scope>
    /// When set, only tasks whose id starts with it exist for this grant, and only tokens
    /// whose own prefix starts with it (a prefixed admin manages no other token).
    public var taskPrefix: String?
    /// When the token expires (nil: never): no token it makes may outlive it.
    public var expiresAt: EpochMilliseconds?

    public init(tokenID: String?, tokenName: String?, scopes: Set<Scope>, taskPrefix: String? = nil,
                expiresAt: EpochMilliseconds? = nil) {
        self.tokenID = tokenID
        self.tokenName = tokenName
        self.scopes = scopes
        self.taskPrefix = taskPrefix
        self.expiresAt = expiresAt
    }

    /// Everything, for every task: the grant of every request while no token exists.
    public static let unrestricted = Grant(tokenID: nil, tokenName: nil, scopes: [.admin])

    /// Nothing but public routes: a request without a token to a public route once tokens exist.
    public static let anonymous = Grant(tokenID: nil, tokenName: nil, scopes: [])

    /// Whether the grant holds `scope` (`admin` holds every scope).
    public func holds(_ scope: Scope) -> Bool { scopes.contains(.admin) || scopes.contains(scope) }

    /// Whether a route requiring `access` may be used.
    public func allows(_ access: RouteAccess) -> Bool {
        switch access {
        case .public: true
        case .scope(let scope): holds(scope)
        case .anyToken: true
        }
    }

    /// Whether the task `id` exists for this grant (its id starts with the grant's prefix).
    public func covers(_ taskID: String) -> Bool {
        guard let taskPrefix else { return true }
        return taskID.utf8.starts(with: taskPrefix.utf8)
    }

    /// `json`, a task as the API shows it whose parent is `parentID`, as this grant sees
    /// it: a parent outside the grant's task prefix does not exist for it (only an
    /// unprefixed token builds a tree across prefixes), so it shows `"parent_id":null`.
    public func visible(taskJSON json: String, parentID: String?) -> String {
        TaskJSON.hidingParent(json, parentID: parentID, outside: taskPrefix)
    }

    /// Whether a token with task prefix `tokenPrefix` (nil: every task) exists for this
    /// grant, to list, make or revoke: a prefixed grant sees only tokens whose prefix
    /// starts with its own, so it can never make or touch a token that sees more than it.
    public func manages(tokenPrefix: String?) -> Bool {
        guard let taskPrefix else { return true }
        guard let tokenPrefix else { return false }
        return tokenPrefix.utf8.starts(with: taskPrefix.utf8)
    }

    /// Why this grant may not make the token `request` asks for, or nil: its prefix must
    /// lie inside the grant's (403 `prefix_not_allowed`), and its expiry (required when
    /// the grant's token expires) may not come after the grant's.
    public func refusal(toMake request: TokenRequest) -> TokenMakingRefusal? {
        if !manages(tokenPrefix: request.taskPrefix), let taskPrefix {
            return .prefix(AccessRefusal.prefixNotAllowed(prefix: taskPrefix, field: "task_prefix"))
        }
        if let expiresAt, request.expiresAt.map({ $0 > expiresAt }) ?? true {
            return .expiry(FieldError(field: "expires_at", message: "must be given, and no later than "
                                        + "\(Timestamp.rfc3339(expiresAt)), when the token making it expires: "
                                        + "a token never makes one that outlives it"))
        }
        return nil
    }
}

/// A task's JSON as a caller with a task prefix may see it.
public enum TaskJSON {
    /// `json` (a task as the API shows it, whose parent is `parentID`) with
    /// `"parent_id":null` when the parent lies outside `prefix`; unchanged otherwise, and
    /// for a caller without a prefix. Such a tree is rare (an unprefixed token built it
    /// on purpose), so the reply is rewritten only then, never encoded twice otherwise.
    public static func hidingParent(_ json: String, parentID: String?, outside prefix: String?) -> String {
        guard let prefix, let parentID, !parentID.utf8.starts(with: prefix.utf8) else { return json }
        // The member as `Task.json` writes it: quotes inside a JSON string are escaped, so
        // its first occurrence is the member itself (it comes before `metadata`).
        var member = JSONText()
        member.appendRaw(#","parent_id":"#)
        member.appendString(parentID)
        let needle = member.bytes
        let bytes = Array(json.utf8)
        guard needle.count <= bytes.count,
              let start = (0...(bytes.count - needle.count)).first(where: { bytes[$0..<($0 + needle.count)].elementsEqual(needle) })
        else { return json }
        return String(decoding: bytes[..<start] + Array(#","parent_id":null"#.utf8) + bytes[(start + needle.count)...],
                      as: UTF8.self)
    }
}

extension TaskEvent {
    /// The event as a stream or webhook limited to `prefix` shows it: its task's parent
    /// hidden (`"parent_id":null`) when it lies outside the prefix.
    public func hidingParent(outside prefix: String?) -> TaskEvent {
        var event = self
        event.data = TaskJSON.hidingParent(data, parentID: parentID, outside: prefix)
        return event
    }
}

/// Why a grant may not make a token.
public enum TokenMakingRefusal: Error, Equatable, Sendable {
    /// The new token's prefix is missing or outside the grant's (403).
    case prefix(AccessRefusal)
    /// The new token would outlive the grant's (400, the field `expires_at`).
    case expiry(FieldError)
}

/// The range of task ids that start with a prefix, for an index range in SQL: every id
/// with the prefix is at least `lower` and below `upper`. Task ids are printable ASCII
/// (`[A-Za-z0-9._~:-]`, all below DEL), so the prefix followed by DEL bounds them.
public enum TaskIDPrefix {
    /// Whether `prefix` may be a token's task prefix: 1 to 128 characters a task id may hold.
    public static func isValid(_ prefix: String) -> Bool { TaskID.isValid(prefix) }

    /// `[lower, upper)` holding exactly the valid ids that start with `prefix`.
    public static func range(_ prefix: String) -> (lower: String, upper: String) {
        (prefix, prefix + "\u{7F}")
    }
}

/// Why a request's credentials were not accepted (401), or were not enough (403).
public enum AccessRefusal: Error, Equatable, Sendable {
    /// No token given (while tokens exist).
    case tokenMissing
    /// Not a token's format, or no token has this secret.
    case tokenInvalid
    /// The token's expiry has passed.
    case tokenExpired
    /// The token was revoked.
    case tokenRevoked
    /// The token lacks the scope the route needs.
    case insufficientScope(needed: Scope)
    /// The task lies outside the token's task prefix (registering it, or under it).
    case prefixNotAllowed(prefix: String, field: String)
    /// A delete of `taskID`, whose subtree holds a task outside the token's task prefix
    /// (a tree built across prefixes by an unprefixed token): refused whole.
    case subtreeOutsidePrefix(prefix: String, taskID: String)
    /// `access_token=` on a route other than the event stream.
    case accessTokenNotAllowed

    /// The stable machine code.
    public var code: String {
        switch self {
        case .tokenMissing: "token_missing"
        case .tokenInvalid: "token_invalid"
        case .tokenExpired: "token_expired"
        case .tokenRevoked: "token_revoked"
        case .insufficientScope: "insufficient_scope"
        case .prefixNotAllowed, .subtreeOutsidePrefix: "prefix_not_allowed"
        case .accessTokenNotAllowed: "access_token_not_allowed"
        }
    }
}

/// A token secret: `hw_` followed by 43 base64url characters (256 random bits).
public enum TokenSecret {
    /// What precedes the random part.
    public static let prefix = "hw_"
    /// Base64url characters of 32 bytes, without padding.
    public static let randomLength = 43

    /// Whether `text` has a secret's form (says nothing of whether it is known).
    public static func isWellFormed(_ text: some StringProtocol) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == prefix.utf8.count + randomLength, bytes.starts(with: prefix.utf8) else { return false }
        // The last character carries 4 bits of the 256 and 2 of padding: only 16 are possible.
        guard let last = bytes.last, let value = Base64URL.value(of: last), value & 0b11 == 0 else { return false }
        return bytes.dropFirst(prefix.utf8.count).allSatisfy { Base64URL.value(of: $0) != nil }
    }

    /// The secret made of `randomBytes` (32 bytes from a CSPRNG).
    public static func make(randomBytes: [UInt8]) -> String {
        precondition(randomBytes.count == 32, "a token secret is 256 bits")
        return prefix + Base64URL.encode(randomBytes)
    }

    /// The secret in `Authorization: Bearer <secret>`, or nil when the header is not a
    /// bearer credential (the scheme is case-insensitive; one or more spaces follow it).
    public static func fromAuthorization(_ header: String) -> String? {
        let scheme = "bearer"
        guard header.utf8.count > scheme.utf8.count,
              header.utf8.prefix(scheme.utf8.count).map({ $0 | 0x20 }).elementsEqual(scheme.utf8) else { return nil }
        let rest = header.dropFirst(scheme.count)
        guard rest.first == " " else { return nil }
        let credential = rest.drop { $0 == " " }
        return credential.isEmpty ? nil : String(credential)
    }
}

/// Base64url without padding (RFC 4648 §5).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The 6-bit value of one character, or nil for a character outside the alphabet.
    public static func value(of byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }

    /// `bytes` encoded, without padding.
    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            var bits = UInt32(0)
            for (offset, byte) in chunk.enumerated() { bits |= UInt32(byte) << (16 - 8 * offset) }
            for position in 0...chunk.count { out.append(alphabet[Int((bits >> (18 - 6 * position)) & 63)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Compares two byte strings in time that depends only on their lengths.
public func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    guard lhs.count == rhs.count else { return false }
    var difference: UInt8 = 0
    for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
    return difference == 0
}

/// A token as the daemon knows it (never its secret: only the secret's SHA-256).
public struct TokenRecord: Sendable, Equatable {
    /// `tok_` followed by 16 hex digits; how the API and the logs name the token.
    public var id: String
    public var name: String
    public var scopes: Set<Scope>
    public var taskPrefix: String?
    /// The SHA-256 of the secret.
    public var secretHash: [UInt8]
    public var createdAt: EpochMilliseconds
    public var expiresAt: EpochMilliseconds?
    public var lastUsedAt: EpochMilliseconds?
    public var revokedAt: EpochMilliseconds?

    public init(id: String, name: String, scopes: Set<Scope>, taskPrefix: String?, secretHash: [UInt8],
                createdAt: EpochMilliseconds, expiresAt: EpochMilliseconds?, lastUsedAt: EpochMilliseconds? = nil,
                revokedAt: EpochMilliseconds? = nil) {
        self.id = id
        self.name = name
        self.scopes = scopes
        self.taskPrefix = taskPrefix
        self.secretHash = secretHash
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
    }

    /// The grant of a request presenting this token at `now`, or why it is refused.
    public func grant(at now: EpochMilliseconds) -> Result<Grant, AccessRefusal> {
        if revokedAt != nil { return .failure(.tokenRevoked) }
        if let expiresAt, now >= expiresAt { return .failure(.tokenExpired) }
        return .success(Grant(tokenID: id, tokenName: name, scopes: scopes, taskPrefix: taskPrefix, expiresAt: expiresAt))
    }

    /// Whether the token can no longer be used at `now` (revoked or expired).
    public func isDead(at now: EpochMilliseconds) -> Bool {
        if case .failure = grant(at: now) { return true }
        return false
    }

    /// The scopes as stored and shown: sorted, comma-separated.
    public var scopeList: [String] { scopes.sorted().map(\.rawValue) }
}

/// What `POST /v1/tokens` and `headwayd token create` ask for, validated.
public struct TokenRequest: Sendable, Equatable {
    public var name: String
    public var scopes: Set<Scope>
    public var taskPrefix: String?
    public var expiresAt: EpochMilliseconds?

    /// The shortest life a token may be given: 1 minute.
    public static let minimumLifetimeMilliseconds: Int64 = 60_000
    /// The longest: 100 years (of 365.25 days).
    public static let maximumLifetimeMilliseconds: Int64 = 3_155_760_000_000

    public init(name: String, scopes: Set<Scope>, taskPrefix: String? = nil, expiresAt: EpochMilliseconds? = nil) {
        self.name = name
        self.scopes = scopes
        self.taskPrefix = taskPrefix
        self.expiresAt = expiresAt
    }

    /// Whether a token may live `milliseconds`: from 1 minute to 100 years.
    public static func isLifetimeAllowed(_ milliseconds: Int64) -> Bool {
        (minimumLifetimeMilliseconds...maximumLifetimeMilliseconds).contains(milliseconds)
    }

    /// Whether a token may live `seconds` (`--expires-in`): from 1 minute to 100 years
    /// (false for NaN and infinities).
    public static func isLifetimeAllowed(seconds: Double) -> Bool {
        (Double(minimumLifetimeMilliseconds) / 1000...Double(maximumLifetimeMilliseconds) / 1000).contains(seconds)
    }

    /// Reads a `POST /v1/tokens` body: `{name, scopes, task_prefix?, expires_at?}`; an
    /// expiry must lie 1 minute to 100 years after `now` (`isLifetimeAllowed`).
    public static func parse(_ body: JSONValue, now: EpochMilliseconds) throws(TaskError) -> TokenRequest {
        var reader = FieldReader(body, allowed: ["name", "scopes", "task_prefix", "expires_at"])
        let name = reader.string("name", maxLength: Limits.nameLength, required: true)
        var errors: [FieldError] = []
        var scopes: Set<Scope> = []
        var prefix: String?
        var expiresAt: EpochMilliseconds?
        if case .object(let members) = body {
            switch members["scopes"] {
            case .array(let items) where !items.isEmpty:
                for item in items {
                    guard case .string(let text) = item, let scope = Scope(rawValue: text) else {
                        errors.append(FieldError(field: "scopes", message: "must hold only report, read, control or admin"))
                        break
                    }
                    scopes.insert(scope)
                }
            default:
                errors.append(FieldError(field: "scopes", message: "is required: a non-empty array of report, read, control, admin"))
            }
            switch members["task_prefix"] {
            case nil, .null?: break
            case .string(let text)? where TaskIDPrefix.isValid(text): prefix = text
            default: errors.append(FieldError(field: "task_prefix", message: "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}"))
            }
            switch members["expires_at"] {
            case nil, .null?: break
            case .string(let text)?:
                if let time = Timestamp.parseRFC3339(text), isLifetimeAllowed(time - now) {
                    expiresAt = time
                } else {
                    errors.append(FieldError(field: "expires_at", message: "must be an RFC 3339 time such as "
                                             + "2030-01-31T12:00:00Z, from 1 minute to 100 years ahead"))
                }
            default: errors.append(FieldError(field: "expires_at", message: "must be a string (RFC 3339 time)"))
            }
        }
        let all = reader.errors + errors
        guard all.isEmpty, let name else { throw .invalidRequest(all) }
        return TokenRequest(name: name, scopes: scopes, taskPrefix: prefix, expiresAt: expiresAt)
    }
}

extension Timestamp {
    /// Milliseconds since the epoch of an RFC 3339 time (`2030-01-31T12:00:00Z`, with
    /// optional fraction, `Z` or a `±HH:MM` offset), or nil. Strict: the day must exist in
    /// its month (February 29 only in leap years), hours 0–23, minutes and seconds 0–59
    /// (no leap second), offsets below 24 hours with minutes 0–59.
    public static func parseRFC3339(_ text: String) -> EpochMilliseconds? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            guard range.upperBound <= bytes.count else { return nil }
            var value: Int64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] | 0x20 == UInt8(ascii: "t"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60,
              second < 60 else { return nil }
        var index = 19
        var milliseconds: Int64 = 0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            var digits = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                if digits < 3 { milliseconds = milliseconds * 10 + Int64(bytes[index] - UInt8(ascii: "0")) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            for _ in min(digits, 3)..<3 { milliseconds *= 10 }
        }
        guard index < bytes.count else { return nil }
        var offsetMinutes: Int64 = 0
        if bytes[index] | 0x20 == UInt8(ascii: "z") {
            guard index + 1 == bytes.count else { return nil }
        } else {
            guard bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-"), index + 6 == bytes.count,
                  bytes[index + 3] == UInt8(ascii: ":"), let hours = number(index + 1..<index + 3),
                  let minutes = number(index + 4..<index + 6), hours < 24, minutes < 60 else { return nil }
            offsetMinutes = (hours * 60 + minutes) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
        }
        // Days from civil (Howard Hinnant).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        return seconds * 1000 + milliseconds
    }

    /// The days of `month` (1–12) in the Gregorian `year`.
    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}
