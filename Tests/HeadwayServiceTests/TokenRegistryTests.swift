import Testing
import HeadwayCore
import HeadwayStore
@testable import Access

/// The token registry in memory, on an injected clock: it holds only tokens that can
/// still be presented, applies the rows it is given one by one, and remembers for a
/// while, within a bound, why a forgotten token is refused.
@Suite struct TokenRegistryTests {
    private static let start: EpochMilliseconds = 1_800_000_000_000

    /// A token and its secret, made at `start`.
    private static func token(_ number: UInt8, expiresAt: EpochMilliseconds? = nil) -> (record: TokenRecord, secret: String) {
        let secret = TokenSecret.make(randomBytes: Array(repeating: number, count: 32))
        let record = TokenRecord(id: "tok_\(number)", name: "t\(number)", scopes: [.read], taskPrefix: nil,
                                 secretHash: TokenCrypto.sha256(secret), createdAt: start, expiresAt: expiresAt)
        return (record, secret)
    }

    private static func loaded(_ tokens: [TokenRecord], generation: Int64 = 2) -> TokenRegistry {
        let registry = TokenRegistry()
        registry.apply(TokenChanges(generation: generation, required: true, tokens: tokens, isComplete: true), now: start)
        return registry
    }

    private static func refusal(_ result: Result<Grant, AccessRefusal>) -> AccessRefusal? {
        if case .failure(let refusal) = result { return refusal }
        return nil
    }

    /// A revoked token leaves the registry at once: it is no longer held or listed, its
    /// streams are reported, and its secret is refused as revoked for a day, then as
    /// unknown; the other token stays.
    @Test func aRevokedTokenIsForgotten() {
        let (kept, keptSecret) = Self.token(1)
        let (doomed, doomedSecret) = Self.token(2)
        let registry = Self.loaded([kept, doomed])
        #expect(registry.heldCount == 2)
        #expect(Self.refusal(registry.authenticate(doomedSecret, now: Self.start)) == nil)
        _ = registry.newlyDead(now: Self.start)

        var revoked = doomed
        revoked.revokedAt = Self.start + 10
        registry.apply(own: revoked, generation: 3, now: Self.start + 10)
        #expect(registry.heldCount == 1)
        #expect(registry.generation == 3)
        #expect(registry.listed(now: Self.start + 10).map(\.id) == [kept.id])
        #expect(registry.newlyDead(now: Self.start + 20) == [doomed.id])
        #expect(registry.newlyDead(now: Self.start + 30).isEmpty, "reported once")
        #expect(Self.refusal(registry.authenticate(doomedSecret, now: Self.start + 20)) == .tokenRevoked)
        let dayLater = Self.start + 10 + RecentlyDeadTokens.keptMilliseconds
        _ = registry.newlyDead(now: dayLater)
        #expect(Self.refusal(registry.authenticate(doomedSecret, now: dayLater)) == .tokenInvalid)
        #expect(Self.refusal(registry.authenticate(keptSecret, now: dayLater)) == nil)
    }

    /// A token that expires is forgotten when it does (by the maintenance tick's
    /// `newlyDead`), and refused as expired meanwhile and for a day after.
    @Test func anExpiredTokenIsForgottenWhenItExpires() {
        let (brief, secret) = Self.token(3, expiresAt: Self.start + 60_000)
        let (other, _) = Self.token(4, expiresAt: Self.start + 120_000)
        let registry = Self.loaded([other, brief])
        _ = registry.newlyDead(now: Self.start)
        #expect(registry.newlyDead(now: Self.start + 59_999).isEmpty)
        #expect(Self.refusal(registry.authenticate(secret, now: Self.start + 60_000)) == .tokenExpired)
        #expect(registry.listed(now: Self.start + 60_000).map(\.id) == [other.id])
        #expect(registry.newlyDead(now: Self.start + 60_000) == [brief.id])
        #expect(registry.heldCount == 1)
        #expect(Self.refusal(registry.authenticate(secret, now: Self.start + 61_000)) == .tokenExpired)
        #expect(registry.newlyDead(now: Self.start + 120_000) == [other.id])
        #expect(registry.heldCount == 0)
        #expect(registry.authenticationRequired, "tokens existed: still required")
    }

    /// Rows read since the generation loaded replace their tokens alone; an older read
    /// changes nothing; a complete read forgets the tokens it lacks (rows deleted) and
    /// reports them, so their streams close.
    @Test func changesApplyRowByRow() {
        let (first, firstSecret) = Self.token(5)
        let (second, secondSecret) = Self.token(6)
        let registry = Self.loaded([first], generation: 1)
        registry.apply(TokenChanges(generation: 2, required: true, tokens: [second], isComplete: false), now: Self.start)
        #expect(registry.heldCount == 2 && registry.generation == 2)
        var revoked = first
        revoked.revokedAt = Self.start
        registry.apply(TokenChanges(generation: 2, required: true, tokens: [revoked], isComplete: false), now: Self.start)
        #expect(registry.heldCount == 2, "a read no newer than the generation loaded changes nothing")
        // This daemon's own change, not the next generation: applied, the generation kept.
        var renamed = second
        renamed.name = "renamed"
        registry.apply(own: renamed, generation: 5, now: Self.start)
        #expect(registry.generation == 2)
        #expect(registry.listed(now: Self.start).map(\.name) == ["t5", "renamed"])
        _ = registry.newlyDead(now: Self.start)
        registry.apply(TokenChanges(generation: 6, required: true, tokens: [renamed], isComplete: true), now: Self.start)
        #expect(registry.heldCount == 1 && registry.generation == 6)
        #expect(registry.newlyDead(now: Self.start) == [first.id])
        #expect(Self.refusal(registry.authenticate(firstSecret, now: Self.start)) == .tokenInvalid)
        #expect(Self.refusal(registry.authenticate(secondSecret, now: Self.start)) == nil)
    }

    /// However many tokens end, what is remembered of them stays bounded.
    @Test func theMemoryOfEndedTokensIsBounded() {
        var remembered = RecentlyDeadTokens()
        for number in 0..<(RecentlyDeadTokens.capacity + 500) {
            let hash = TokenCrypto.sha256("secret \(number)")
            remembered.remember(hash, as: .tokenRevoked, since: Self.start, now: Self.start)
        }
        #expect(remembered.count == RecentlyDeadTokens.capacity)
        #expect(remembered.refusal(of: TokenCrypto.sha256("secret 0"), now: Self.start) == nil, "the oldest went first")
        #expect(remembered.refusal(of: TokenCrypto.sha256("secret 600"), now: Self.start) == .tokenRevoked)
        remembered.forgetOld(now: Self.start + RecentlyDeadTokens.keptMilliseconds)
        #expect(remembered.count == 0)
    }

    /// Tokens made to expire far ahead and revoked at once, again and again (what an admin
    /// may do without end, 1,000 a second): the expiry queue kept an entry of each until
    /// its expiry, up to 100 years later (20,000 left 20,000 entries). It stays within a
    /// bound of the tokens held, and the token still held still expires when it should.
    @Test func tokensRevokedBeforeTheirExpiryLeaveTheExpiryQueue() {
        let (kept, keptSecret) = Self.token(9, expiresAt: Self.start + 60_000)
        let registry = Self.loaded([kept])
        let farAhead = Self.start + 100 * 365 * 86_400_000
        for number in 0..<20_000 {
            let secret = TokenSecret.make(randomBytes: (0..<32).map { UInt8(truncatingIfNeeded: number >> ($0 % 3 * 8)) ^ UInt8($0) })
            var token = TokenRecord(id: "tok_churn\(number)", name: "churn", scopes: [.read], taskPrefix: nil,
                                    secretHash: TokenCrypto.sha256(secret), createdAt: Self.start, expiresAt: farAhead)
            registry.apply(own: token, generation: Int64(3 + 2 * number), now: Self.start)
            token.revokedAt = Self.start
            registry.apply(own: token, generation: Int64(4 + 2 * number), now: Self.start)
        }
        #expect(registry.heldCount == 1)
        #expect(registry.expiryEntries <= 2 * registry.heldCount + 1024, "\(registry.expiryEntries) entries for 1 token")
        #expect(Self.refusal(registry.authenticate(keptSecret, now: Self.start + 1)) == nil)
        #expect(registry.newlyDead(now: Self.start + 60_000).contains(kept.id))
        #expect(Self.refusal(registry.authenticate(keptSecret, now: Self.start + 60_000)) == .tokenExpired)
    }

    /// The expiry queue gives its entries soonest first, whatever the order they came in.
    @Test func expiriesComeSoonestFirst() {
        var queue = TokenExpiries()
        var generator = SystemRandomNumberGenerator()
        let times = (0..<200).map { _ in Int64.random(in: 0..<1_000, using: &generator) }
        for (index, time) in times.enumerated() { queue.insert(time, "t\(index)") }
        var taken: [Int64] = []
        while let (time, _) = queue.first {
            taken.append(time)
            queue.removeFirst()
        }
        #expect(taken == times.sorted())
    }
}
