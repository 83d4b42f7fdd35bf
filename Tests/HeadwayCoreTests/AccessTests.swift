import Testing
@testable import HeadwayCore

/// The pure rules of tokens: scopes, what a grant allows, task prefixes, the secret's
/// form, expiry and revocation (with a manual clock), the token body.
struct AccessTests {
    @Test func adminHoldsEveryScopeAndOthersOnlyTheirOwn() {
        let admin = Grant(tokenID: "t", tokenName: "n", scopes: [.admin])
        for scope in Scope.allCases { #expect(admin.allows(.scope(scope))) }
        for held in [Scope.report, .read, .control] {
            let grant = Grant(tokenID: "t", tokenName: "n", scopes: [held])
            for scope in Scope.allCases { #expect(grant.allows(.scope(scope)) == (scope == held), "\(held) → \(scope)") }
            #expect(grant.allows(.public))
        }
        #expect(Grant.anonymous.allows(.public))
        #expect(!Grant.anonymous.allows(.scope(.read)))
        #expect(Grant.unrestricted.allows(.scope(.admin)))
        let both = Grant(tokenID: "t", tokenName: "n", scopes: [.report, .read])
        #expect(both.allows(.scope(.report)) && both.allows(.scope(.read)) && !both.allows(.scope(.control)))
    }

    @Test func aPrefixCoversOnlyIdsStartingWithIt() {
        let grant = Grant(tokenID: "t", tokenName: "n", scopes: [.read], taskPrefix: "team-a.")
        #expect(grant.covers("team-a.build"))
        #expect(grant.covers("team-a."))
        #expect(!grant.covers("team-a"))
        #expect(!grant.covers("team-b.build"))
        #expect(!grant.covers("TEAM-A.build"))
        #expect(Grant.unrestricted.covers("anything"))
        let (lower, upper) = TaskIDPrefix.range("team-a.")
        for id in ["team-a.", "team-a.x", "team-a.~~~", "team-a.ZZ"] { #expect(id >= lower && id < upper, "\(id)") }
        for id in ["team-a", "team-b.x", "team-a-x"] { #expect(!(id >= lower && id < upper), "\(id)") }
        #expect(TaskIDPrefix.isValid("team-a."))
        #expect(!TaskIDPrefix.isValid("team/a"))
        #expect(!TaskIDPrefix.isValid(""))
    }

    @Test func aSecretIsHwAndFortyThreeBase64URLCharacters() {
        let secret = TokenSecret.make(randomBytes: Array(0..<32))
        #expect(secret.hasPrefix("hw_"))
        #expect(secret.count == 46)
        #expect(TokenSecret.isWellFormed(secret))
        #expect(TokenSecret.isWellFormed(TokenSecret.make(randomBytes: Array(repeating: 255, count: 32))))
        #expect(!TokenSecret.isWellFormed(String(secret.dropLast())))
        #expect(!TokenSecret.isWellFormed(secret + "A"))
        #expect(!TokenSecret.isWellFormed("xx_" + secret.dropFirst(3)))
        #expect(!TokenSecret.isWellFormed(String(secret.dropLast()) + "="))
        #expect(!TokenSecret.isWellFormed(String(secret.dropLast()) + "B"))  // padding bits set
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.encode(Array("hello".utf8)) == "aGVsbG8")
    }

    @Test func theBearerCredentialIsTakenFromTheHeader() {
        #expect(TokenSecret.fromAuthorization("Bearer abc") == "abc")
        #expect(TokenSecret.fromAuthorization("bearer  abc") == "abc")
        #expect(TokenSecret.fromAuthorization("BEARER abc") == "abc")
        #expect(TokenSecret.fromAuthorization("Basic abc") == nil)
        #expect(TokenSecret.fromAuthorization("Bearer") == nil)
        #expect(TokenSecret.fromAuthorization("Bearer ") == nil)
        #expect(TokenSecret.fromAuthorization("Bearerabc") == nil)
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
    }

    @Test func aTokenExpiresAtItsTimeAndARevokedOneIsRefusedFirst() {
        let clock = ManualClock()
        var token = TokenRecord(id: "tok_1", name: "runner", scopes: [.report], taskPrefix: "a.", secretHash: [],
                                createdAt: clock.now(), expiresAt: clock.now() + 1000)
        #expect(token.grant(at: clock.now()) == .success(Grant(tokenID: "tok_1", tokenName: "runner", scopes: [.report],
                                                                taskPrefix: "a.", expiresAt: clock.now() + 1000)))
        clock.advance(by: 999)
        #expect(!token.isDead(at: clock.now()))
        clock.advance(by: 1)
        #expect(token.grant(at: clock.now()) == .failure(.tokenExpired))
        #expect(token.isDead(at: clock.now()))
        token.revokedAt = clock.now()
        #expect(token.grant(at: clock.now()) == .failure(.tokenRevoked))
        token.expiresAt = nil
        #expect(token.grant(at: clock.now()) == .failure(.tokenRevoked))
    }

    @Test func refusalsHaveStableCodes() {
        #expect(AccessRefusal.tokenMissing.code == "token_missing")
        #expect(AccessRefusal.tokenInvalid.code == "token_invalid")
        #expect(AccessRefusal.tokenExpired.code == "token_expired")
        #expect(AccessRefusal.tokenRevoked.code == "token_revoked")
        #expect(AccessRefusal.insufficientScope(needed: .read).code == "insufficient_scope")
        #expect(AccessRefusal.prefixNotAllowed(prefix: "a.", field: "id").code == "prefix_not_allowed")
        #expect(AccessRefusal.subtreeOutsidePrefix(prefix: "a.", taskID: "a.r").code == "prefix_not_allowed")
        #expect(AccessRefusal.accessTokenNotAllowed.code == "access_token_not_allowed")
    }

    @Test func aPrefixedGrantManagesOnlyTokensInsideItsPrefixAndNoneThatOutliveIt() {
        let prefixed = Grant(tokenID: "t", tokenName: "n", scopes: [.admin], taskPrefix: "team-a.", expiresAt: 10_000_000)
        #expect(prefixed.manages(tokenPrefix: "team-a.") && prefixed.manages(tokenPrefix: "team-a.ci."))
        #expect(!prefixed.manages(tokenPrefix: nil) && !prefixed.manages(tokenPrefix: "team-") && !prefixed.manages(tokenPrefix: "team-b."))
        #expect(Grant.unrestricted.manages(tokenPrefix: nil))
        #expect(prefixed.refusal(toMake: TokenRequest(name: "x", scopes: [.admin])) != nil)
        #expect(prefixed.refusal(toMake: TokenRequest(name: "x", scopes: [.read], taskPrefix: "team-a.", expiresAt: 10_000_000)) == nil)
        #expect(prefixed.refusal(toMake: TokenRequest(name: "x", scopes: [.read], taskPrefix: "team-a.", expiresAt: 10_000_001)) != nil)
        #expect(prefixed.refusal(toMake: TokenRequest(name: "x", scopes: [.read], taskPrefix: "team-a.")) != nil)
        #expect(Grant.unrestricted.refusal(toMake: TokenRequest(name: "x", scopes: [.admin])) == nil)
    }

    @Test func theTokenBodyIsValidated() throws {
        let clock = ManualClock()
        let body = try JSONParser.parse(Array(#"{"name":"ci","scopes":["report","read"],"task_prefix":"team-a.","expires_at":"2030-01-01T00:00:00Z"}"#.utf8)).get()
        let request = try TokenRequest.parse(body, now: clock.now())
        #expect(request == TokenRequest(name: "ci", scopes: [.report, .read], taskPrefix: "team-a.",
                                        expiresAt: Timestamp.parseRFC3339("2030-01-01T00:00:00Z")))
        for bad in [#"{"scopes":["read"]}"#, #"{"name":"x","scopes":[]}"#, #"{"name":"x","scopes":["root"]}"#,
                    #"{"name":"x","scopes":["read"],"task_prefix":"a/b"}"#,
                    #"{"name":"x","scopes":["read"],"expires_at":"2020-01-01T00:00:00Z"}"#,
                    #"{"name":"x","scopes":["read"],"expires_at":"soon"}"#, #"{"name":"x","scopes":["read"],"extra":1}"#] {
            let value = try JSONParser.parse(Array(bad.utf8)).get()
            #expect(throws: TaskError.self, "\(bad)") { _ = try TokenRequest.parse(value, now: clock.now()) }
        }
    }

    /// The formatter always writes RFC 3339 (a 4-digit year): times beyond it are clamped.
    @Test func rfc3339IsAlwaysWrittenWithAFourDigitYear() {
        #expect(Timestamp.rfc3339(9_200_000_000_000_000_000) == "9999-12-31T23:59:59.999Z")
        #expect(Timestamp.rfc3339(Int64.max) == "9999-12-31T23:59:59.999Z")
        #expect(Timestamp.rfc3339(-100_000_000_000_000) == "0000-01-01T00:00:00.000Z")
    }

    @Test func aTokenExpiryIsOneMinuteToAHundredYearsAhead() throws {
        let now: Int64 = 1_796_009_908_000
        let body = { (expiry: Int64) in
            try JSONParser.parse(Array(#"{"name":"x","scopes":["read"],"expires_at":"\#(Timestamp.rfc3339(expiry))"}"#.utf8)).get()
        }
        #expect(try TokenRequest.parse(body(now + TokenRequest.minimumLifetimeMilliseconds), now: now).expiresAt != nil)
        #expect(try TokenRequest.parse(body(now + TokenRequest.maximumLifetimeMilliseconds), now: now).expiresAt != nil)
        for expiry in [now + 59_000, now + TokenRequest.maximumLifetimeMilliseconds + 1000] {
            #expect(throws: TaskError.self) { _ = try TokenRequest.parse(body(expiry), now: now) }
        }
    }

    @Test func rfc3339TimesAreRead() {
        #expect(Timestamp.parseRFC3339("1970-01-01T00:00:00Z") == 0)
        #expect(Timestamp.parseRFC3339("2026-11-30T03:38:28.123Z") == 1_796_009_908_123)
        #expect(Timestamp.parseRFC3339("2026-11-30T04:38:28.1+01:00") == 1_796_009_908_100)
        #expect(Timestamp.parseRFC3339("2026-11-30T03:38:28.12345Z") == 1_796_009_908_123)
        #expect(Timestamp.parseRFC3339("2030-01-31T12:00:00.12531T100") == nil)  // found by the fuzzer
        for time: Int64 in [0, 1_796_009_908_123, 4_102_444_800_000] {
            #expect(Timestamp.parseRFC3339(Timestamp.rfc3339(time)) == time)
        }
        // Strict: the day exists in its month (leap years too), seconds 0–59, offsets below 24 h.
        #expect(Timestamp.parseRFC3339("2028-02-29T00:00:00Z") != nil)
        #expect(Timestamp.parseRFC3339("2000-02-29T00:00:00Z") != nil)
        #expect(Timestamp.parseRFC3339("2030-01-31T23:59:59+23:59") != nil)
        for bad in ["2030-02-31T00:00:00Z", "2030-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2030-04-31T00:00:00Z",
                    "2030-06-31T00:00:00Z", "2030-09-31T00:00:00Z", "2030-11-31T00:00:00Z", "2030-01-00T00:00:00Z",
                    "2030-01-01T00:00:60Z", "2030-01-01T24:00:00Z", "2030-01-01T00:60:00Z", "2030-01-01T00:00:00+24:00",
                    "2030-01-01T00:00:00+01:60", "2030-01-01T00:00:00+0100",
                    "2026-11-30", "2026-13-01T00:00:00Z", "2026-11-30T00:00:00", "2026-11-30T00:00:00.Z", "x026-11-30T00:00:00Z"] {
            #expect(Timestamp.parseRFC3339(bad) == nil, "\(bad)")
        }
    }
}
