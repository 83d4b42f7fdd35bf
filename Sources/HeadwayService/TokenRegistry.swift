import Foundation
import Lifecycle
import HeadwayCore
import HeadwayStore

/// Every token the database holds, in memory, so checking a request's token reads no
/// database (it runs before every progress update). Tokens are found by the first 8 bytes
/// of their secret's SHA-256 and then compared whole in constant time.
///
/// It is kept current by `load`, with the rows and the generation read in one
/// transaction: by the token routes after their change, and about once a second by the
/// maintenance thread when the generation moved (another process, `headwayd token
/// create`, changed the table). An older generation never replaces a newer one.
///
/// When a token was last used is kept here and written back lazily (`usesToWrite`: at
/// most about once a minute per token, and all at stop).
final class TokenRegistry: Sendable {
    private struct State {
        var generation: Int64 = -1
        /// The database's flag that tokens are required, as last loaded.
        var required = false
        /// Tokens by the first 8 bytes of their secret's hash (rarely more than one each).
        var byHashPrefix: [UInt64: [TokenRecord]] = [:]
        var byID: [String: TokenRecord] = [:]
        /// Last use per token id, as seen in memory (newer than the database's).
        var lastUsed: [String: EpochMilliseconds] = [:]
        /// Each token's last use as last written, and when it was written.
        var written: [String: (value: EpochMilliseconds, at: EpochMilliseconds)] = [:]
        /// Tokens whose streams have been closed (revoked or expired, announced once).
        var announcedDead: Set<String> = []
    }

    private let state = Locked(State())

    /// The token id event streams opened while no token existed are attached under: once a
    /// token exists, they are closed as a revoked token's are (`newlyDead`), since every
    /// stream then needs a token.
    static let noToken = ""

    /// How long a token's use may wait in memory before it is written.
    static let useWriteIntervalMilliseconds: Int64 = 60_000

    /// Whether a token has ever been made: then every non-public route needs one (even
    /// if all are revoked or expired since, or their rows deleted): the database's flag
    /// (`token_state.required`, set by the first token), or any token known.
    var authenticationRequired: Bool { state.withLock { $0.required || !$0.byID.isEmpty } }

    /// The generation loaded.
    var generation: Int64 { state.withLock { $0.generation } }

    /// Replaces what is known with `tokens` and the flag `required` as of `generation`,
    /// unless a newer generation is already loaded.
    func load(_ tokens: [TokenRecord], generation: Int64, required: Bool) {
        state.withLock { state in
            guard generation >= state.generation else { return }
            state.generation = generation
            state.required = required
            state.byHashPrefix = [:]
            state.byID = [:]
            for token in tokens {
                state.byHashPrefix[Self.hashPrefix(token.secretHash), default: []].append(token)
                state.byID[token.id] = token
            }
        }
    }

    /// The grant of `secret` (well-formed or not) at `now`, or why it is refused; a
    /// success counts as a use.
    func authenticate(_ secret: String, now: EpochMilliseconds) -> Result<Grant, AccessRefusal> {
        guard TokenSecret.isWellFormed(secret) else { return .failure(.tokenInvalid) }
        let hash = TokenCrypto.sha256(secret)
        return state.withLock { state in
            var found: TokenRecord?
            for candidate in state.byHashPrefix[Self.hashPrefix(hash)] ?? [] where constantTimeEquals(candidate.secretHash, hash) {
                found = candidate
            }
            guard let token = found else { return .failure(.tokenInvalid) }
            let grant = token.grant(at: now)
            if case .success = grant { state.lastUsed[token.id] = now }
            return grant
        }
    }

    /// The tokens not revoked, oldest first, with their last use as known in memory.
    func listed() -> [TokenRecord] {
        state.withLock { state in
            state.byID.values.filter { $0.revokedAt == nil }.map { token in
                var token = token
                if let used = state.lastUsed[token.id] { token.lastUsedAt = max(token.lastUsedAt ?? 0, used) }
                return token
            }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        }
    }

    /// The uses to write now: of tokens whose last use is newer than what was written and
    /// was last written a minute ago or more (every such use when `all`).
    func usesToWrite(now: EpochMilliseconds, all: Bool) -> [String: EpochMilliseconds] {
        state.withLock { state in
            state.lastUsed.filter { id, used in
                guard let written = state.written[id] else { return true }
                return used > written.value && (all || now - written.at >= Self.useWriteIntervalMilliseconds)
            }
        }
    }

    /// Notes that `uses` were written at `now`.
    func usesWritten(_ uses: [String: EpochMilliseconds], now: EpochMilliseconds) {
        state.withLock { state in
            for (id, used) in uses { state.written[id] = (used, now) }
        }
    }

    /// The tokens that have become unusable (revoked or expired) at `now` and were not
    /// reported yet, and `noToken` once a token exists: their event streams are to be closed.
    func newlyDead(now: EpochMilliseconds) -> Set<String> {
        state.withLock { state in
            var dead = Set(state.byID.values.filter { $0.isDead(at: now) }.map(\.id))
            if state.required || !state.byID.isEmpty { dead.insert(Self.noToken) }
            dead.subtract(state.announcedDead)
            state.announcedDead.formUnion(dead)
            return dead
        }
    }

    private static func hashPrefix(_ hash: [UInt8]) -> UInt64 {
        hash.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }
}

/// Keeps the registry current from the maintenance thread: about once a second it writes
/// the uses that are due and reloads the tokens when their generation moved; on every
/// tick (250 ms) it has the event streams of tokens revoked or expired since closed.
struct TokenKeeper: Sendable {
    let registry: TokenRegistry
    let writer: GroupCommitWriter
    let broker: EventBroker
    let clock: any WallClock
    let logger: Logger
    /// A database out of reach fails every look: one line a minute says so.
    let failureLines = LogThrottle(nanoseconds: 60_000_000_000)

    /// One look: uses written when due (all of them when `final`), tokens reloaded if the
    /// table changed, dead tokens' streams closed. Waits for its writer job.
    func refresh(final: Bool = false) {
        let now = clock.now()
        let uses = registry.usesToWrite(now: now, all: final)
        let known = registry.generation
        let done = DispatchSemaphore(value: 0)
        writer.submit({ database -> (Int64, Bool, [TokenRecord]?) in
            if !uses.isEmpty { try TokenRepository.recordUse(uses, in: database) }
            let generation = try TokenRepository.generation(in: database)
            return (generation, try TokenRepository.required(in: database),
                    generation == known ? nil : try TokenRepository.all(in: database))
        }) { [registry, logger, failureLines] result in
            switch result {
            case .success(let (generation, required, tokens)):
                registry.usesWritten(uses, now: now)
                if let tokens { registry.load(tokens, generation: generation, required: required) }
            case .failure(let error):
                // A refusal of the storage is logged once per episode by `StorageAlarm`.
                if (error as? WriterError) != .stopped && !StorageAlarm.isStorageRefusal(error),
                   let unlogged = failureLines.admit(now: DispatchTime.now().uptimeNanoseconds) {
                    let unavailable = (error as? DatabaseError)?.isUnavailable == true
                    logger.log(unavailable ? .warn : .error, "tokens.refresh_failed",
                               ["error": "\(error)", "not_logged_since": "\(unlogged)"])
                }
            }
            done.signal()
        }
        done.wait()
        closeDeadStreams()
    }

    /// Has the streams of tokens revoked or expired since the last look closed (memory
    /// only: the maintenance thread calls it on every tick).
    func closeDeadStreams() {
        let dead = registry.newlyDead(now: clock.now())
        if !dead.isEmpty { broker.closeStreams(ofTokens: dead) }
    }
}
