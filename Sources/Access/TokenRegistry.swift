import Foundation
import Lifecycle
import HeadwayCore
import HeadwayStore

/// The usable tokens, in memory, so checking a request's token reads no database (it runs
/// before every progress update). Tokens are found by the first 8 bytes of their secret's
/// SHA-256 and then compared whole in constant time.
///
/// It holds only tokens that can still be presented: a token revoked is forgotten at
/// once, one that expires when it does (`newlyDead`, on every tick of the maintenance
/// thread). For a day after, at most `RecentlyDeadTokens.capacity` of them, a presented
/// secret of such a token is still refused as revoked or expired rather than unknown.
///
/// It is kept current incrementally (`apply`): the token routes apply the one row they
/// wrote, and about once a second the maintenance thread applies the rows stamped after
/// the generation loaded (another process or daemon made, changed or deleted a token).
/// Every change up to `generation` is applied; an older read never undoes a newer one.
///
/// When a token was last used is kept here and written back lazily (`usesToWrite`: at
/// most about once a minute per token, and all at stop).
package final class TokenRegistry: Sendable {
    private struct State {
        var generation: Int64 = -1
        /// The database's flag that tokens are required, as last loaded.
        var required = false
        /// Tokens by the first 8 bytes of their secret's hash (rarely more than one each).
        var byHashPrefix: [UInt64: [TokenRecord]] = [:]
        var byID: [String: TokenRecord] = [:]
        /// When the tokens held expire, soonest first.
        var expiries = TokenExpiries()
        /// Tokens forgotten lately, to refuse as revoked or expired rather than unknown.
        var recentlyDead = RecentlyDeadTokens()
        /// Tokens forgotten and not yet reported by `newlyDead` (their streams are to close).
        var deadToReport: Set<String> = []
        /// Whether `noToken` was reported (once a token exists).
        var noTokenReported = false
        /// Last use per token id, as seen in memory (newer than the database's).
        var lastUsed: [String: EpochMilliseconds] = [:]
        /// Each token's last use as last written, and when it was written.
        var written: [String: (value: EpochMilliseconds, at: EpochMilliseconds)] = [:]
    }

    private let state = Locked(State())

    /// The token id event streams opened while no token existed are attached under: once a
    /// token exists, they are closed as a revoked token's are (`newlyDead`), since every
    /// stream then needs a token.
    package static let noToken = ""

    /// How long a token's use may wait in memory before it is written.
    static let useWriteIntervalMilliseconds: Int64 = 60_000

    /// Whether a token has ever been made: then every non-public route needs one (even
    /// if all are revoked or expired since, or their rows deleted): the database's flag
    /// (`token_state.required`, set by the first token), or any token known.
    package var authenticationRequired: Bool { state.withLock { $0.required || !$0.byID.isEmpty } }

    /// The generation loaded: every change of the table up to it is applied.
    package var generation: Int64 { state.withLock { $0.generation } }

    /// The tokens held (usable, or expired and not yet reported by `newlyDead`).
    var heldCount: Int { state.withLock { $0.byID.count } }

    /// The entries of the expiry queue, stale ones included (bounded by `compactExpiries`).
    var expiryEntries: Int { state.withLock { $0.expiries.count } }

    /// Applies what changed in the table (`TokenRepository.changes`, read at `now`): each
    /// row replaces what is known of its token, a revoked or expired one is forgotten; a
    /// complete read replaces everything, and the tokens it lacks (rows deleted) are
    /// forgotten too. A read older than the generation loaded changes nothing.
    package func apply(_ changes: TokenChanges, now: EpochMilliseconds) {
        state.withLock { state in
            guard changes.isComplete || changes.generation > state.generation else { return }
            if changes.isComplete {
                let kept = Set(changes.tokens.filter { $0.revokedAt == nil }.map(\.id))
                for id in state.byID.keys where !kept.contains(id) {
                    Self.forget(id, in: &state)
                    state.deadToReport.insert(id)
                }
            }
            for token in changes.tokens { Self.put(token, now: now, in: &state) }
            state.generation = changes.generation
            state.required = changes.required
        }
    }

    /// Applies `token` as this daemon's own change, stamped `generation` (a token made or
    /// revoked by the routes): the generation loaded moves to it only when it is the next
    /// one (else another change in between is not applied yet: the next `apply` reads it,
    /// and this row again).
    package func apply(own token: TokenRecord, generation: Int64, now: EpochMilliseconds) {
        state.withLock { state in
            Self.put(token, now: now, in: &state)
            if token.revokedAt == nil { state.required = true }
            if generation == state.generation + 1 { state.generation = generation }
        }
    }

    /// The grant of `secret` (well-formed or not) at `now`, or why it is refused; a
    /// success counts as a use.
    package func authenticate(_ secret: String, now: EpochMilliseconds) -> Result<Grant, AccessRefusal> {
        guard TokenSecret.isWellFormed(secret) else { return .failure(.tokenInvalid) }
        let hash = TokenCrypto.sha256(secret)
        return state.withLock { state in
            var found: TokenRecord?
            for candidate in state.byHashPrefix[Self.hashPrefix(hash)] ?? [] where constantTimeEquals(candidate.secretHash, hash) {
                found = candidate
            }
            guard let token = found else { return .failure(state.recentlyDead.refusal(of: hash, now: now) ?? .tokenInvalid) }
            let grant = token.grant(at: now)
            if case .success = grant { state.lastUsed[token.id] = now }
            return grant
        }
    }

    /// The tokens usable at `now`, oldest first, with their last use as known in memory.
    package func listed(now: EpochMilliseconds) -> [TokenRecord] {
        state.withLock { state in
            state.byID.values.filter { !$0.isDead(at: now) }.map { token in
                var token = token
                if let used = state.lastUsed[token.id] { token.lastUsedAt = max(token.lastUsedAt ?? 0, used) }
                return token
            }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        }
    }

    /// The uses to write now: of tokens whose last use is newer than what was written and
    /// was last written a minute ago or more (every such use when `all`).
    package func usesToWrite(now: EpochMilliseconds, all: Bool) -> [String: EpochMilliseconds] {
        state.withLock { state in
            state.lastUsed.filter { id, used in
                guard let written = state.written[id] else { return true }
                return used > written.value && (all || now - written.at >= Self.useWriteIntervalMilliseconds)
            }
        }
    }

    /// Notes that `uses` were written at `now`; the uses of tokens forgotten meanwhile are
    /// forgotten with them.
    package func usesWritten(_ uses: [String: EpochMilliseconds], now: EpochMilliseconds) {
        state.withLock { state in
            for (id, used) in uses {
                if state.byID[id] == nil {
                    if state.lastUsed[id].map({ $0 <= used }) ?? true {
                        state.lastUsed[id] = nil
                        state.written[id] = nil
                    }
                } else {
                    state.written[id] = (used, now)
                }
            }
        }
    }

    /// The tokens that have become unusable since the last call — revoked or deleted, and
    /// those expired by `now`, which are forgotten now — and `noToken` once a token
    /// exists: their event streams are to be closed.
    package func newlyDead(now: EpochMilliseconds) -> Set<String> {
        state.withLock { state in
            var dead = state.deadToReport
            state.deadToReport = []
            while let (expiresAt, id) = state.expiries.first, expiresAt <= now {
                state.expiries.removeFirst()
                // An entry of a token since forgotten, or whose expiry changed, is stale.
                guard let token = state.byID[id], token.expiresAt == expiresAt else { continue }
                Self.forget(id, in: &state)
                state.recentlyDead.remember(token.secretHash, as: .tokenExpired, since: expiresAt, now: now)
                dead.insert(id)
            }
            if !state.noTokenReported && (state.required || !state.byID.isEmpty) {
                state.noTokenReported = true
                dead.insert(Self.noToken)
            }
            state.recentlyDead.forgetOld(now: now)
            return dead
        }
    }

    /// Holds `token` as read, or forgets it (and remembers why for a while) when it is
    /// revoked or expired.
    private static func put(_ token: TokenRecord, now: EpochMilliseconds, in state: inout State) {
        let wasHeld = unindex(token.id, in: &state) != nil
        if let revokedAt = token.revokedAt {
            state.recentlyDead.remember(token.secretHash, as: .tokenRevoked, since: revokedAt, now: now)
        } else if let expiresAt = token.expiresAt, expiresAt <= now {
            state.recentlyDead.remember(token.secretHash, as: .tokenExpired, since: expiresAt, now: now)
        } else {
            state.byID[token.id] = token
            state.byHashPrefix[hashPrefix(token.secretHash), default: []].append(token)
            if let expiresAt = token.expiresAt { state.expiries.insert(expiresAt, token.id) }
            return compactExpiries(in: &state)
        }
        if wasHeld {
            forgetUses(of: token.id, in: &state)
            state.deadToReport.insert(token.id)
        }
        compactExpiries(in: &state)
    }

    /// Makes the expiry queue again from the tokens held once its stale entries (of tokens
    /// forgotten or changed) outnumber them: a stale entry leaves only at its expiry, up to
    /// 100 years ahead, so tokens made and revoked without end would otherwise grow it
    /// without bound (an entry each). The rebuild is amortised over the entries gone stale.
    private static func compactExpiries(in state: inout State) {
        guard state.expiries.count > 2 * state.byID.count + 1024 else { return }
        var fresh = TokenExpiries()
        for token in state.byID.values {
            if let expiresAt = token.expiresAt { fresh.insert(expiresAt, token.id) }
        }
        state.expiries = fresh
    }

    /// Forgets the token `id` (its expiry's entry goes stale).
    private static func forget(_ id: String, in state: inout State) {
        guard unindex(id, in: &state) != nil else { return }
        forgetUses(of: id, in: &state)
        compactExpiries(in: &state)
    }

    /// Takes the token `id` out of the lookups; returns it, if it was held.
    private static func unindex(_ id: String, in state: inout State) -> TokenRecord? {
        guard let token = state.byID.removeValue(forKey: id) else { return nil }
        let prefix = hashPrefix(token.secretHash)
        state.byHashPrefix[prefix]?.removeAll { $0.id == id }
        if state.byHashPrefix[prefix]?.isEmpty == true { state.byHashPrefix[prefix] = nil }
        return token
    }

    /// Forgets the last use of a token no longer held, unless one is still to be written
    /// (`usesWritten` forgets it then).
    private static func forgetUses(of id: String, in state: inout State) {
        if let used = state.lastUsed[id], used > state.written[id]?.value ?? .min { return }
        state.lastUsed[id] = nil
        state.written[id] = nil
    }

    private static func hashPrefix(_ hash: [UInt8]) -> UInt64 {
        hash.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    package init() {}
}

/// When tokens expire, soonest first: a binary heap of (expiry, token id). An entry is not
/// removed when its token is forgotten or changes; the reader skips such stale entries.
struct TokenExpiries {
    private var heap: [(at: EpochMilliseconds, id: String)] = []

    /// The soonest entry.
    var first: (EpochMilliseconds, String)? { heap.first.map { ($0.at, $0.id) } }

    var count: Int { heap.count }

    mutating func insert(_ at: EpochMilliseconds, _ id: String) {
        heap.append((at, id))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].at < heap[parent].at else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    mutating func removeFirst() {
        guard !heap.isEmpty else { return }
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].at < heap[smallest].at { smallest = left }
            if right < heap.count && heap[right].at < heap[smallest].at { smallest = right }
            guard smallest != parent else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// Tokens revoked or expired lately, by their secret's hash: a secret presented within
/// `keptMilliseconds` of its token's end is refused as revoked or expired (401
/// `token_revoked`, `token_expired`), which tells its owner what to do, rather than as
/// unknown. Bounded: at most `capacity`, the oldest remembered forgotten first, so tokens
/// made and revoked without end cost no more memory than this.
struct RecentlyDeadTokens {
    /// How long after its end a token is still named as revoked or expired: a day.
    static let keptMilliseconds: Int64 = 86_400_000
    /// How many are remembered at most.
    static let capacity = 10_000

    private var refusals: [[UInt8]: (refusal: AccessRefusal, until: EpochMilliseconds)] = [:]
    /// The hashes in the order remembered (from `head` on).
    private var order: [[UInt8]] = []
    private var head = 0

    /// How many are remembered.
    var count: Int { refusals.count }

    /// Remembers that the token of `hash` ended at `since` (revoked or expired), unless
    /// that was `keptMilliseconds` ago or more.
    mutating func remember(_ hash: [UInt8], as refusal: AccessRefusal, since: EpochMilliseconds, now: EpochMilliseconds) {
        let until = since + Self.keptMilliseconds
        guard until > now else { return }
        if refusals.updateValue((refusal, until), forKey: hash) == nil { order.append(hash) }
        while refusals.count > Self.capacity { dropOldest() }
    }

    /// Why the token of `hash` is refused, if it ended lately.
    func refusal(of hash: [UInt8], now: EpochMilliseconds) -> AccessRefusal? {
        guard let remembered = refusals[hash], remembered.until > now else { return nil }
        return remembered.refusal
    }

    /// Forgets, from the oldest remembered on, those whose time is over.
    mutating func forgetOld(now: EpochMilliseconds) {
        while head < order.count, let remembered = refusals[order[head]], remembered.until <= now { dropOldest() }
    }

    private mutating func dropOldest() {
        guard head < order.count else { return }
        refusals[order[head]] = nil
        head += 1
        if head > 1024 && head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
