import HeadwayCore

/// SQL for the `tokens` table (migrations 0005 and 0009). Every function runs on the connection it
/// is given; the caller decides about transactions. Secrets never reach it: only their
/// SHA-256, stored as lower-case hex.
public enum TokenRepository {
    private static let columns = "id, name, scopes, task_prefix, secret_hash, created_at, expires_at, last_used_at, revoked_at"

    /// Stores a new token (the generation moves, and stamps the row: a trigger), whatever
    /// the number of tokens (`headwayd token create`, an operator's way back in).
    public static func insert(_ token: TokenRecord, in database: Database) throws(DatabaseError) {
        try database.run("INSERT INTO tokens (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(token.id), .text(token.name), .text(token.scopeList.joined(separator: ",")),
            token.taskPrefix.map { .text($0) } ?? .null, .text(hex(token.secretHash)), .integer(token.createdAt),
            token.expiresAt.map { .integer($0) } ?? .null, token.lastUsedAt.map { .integer($0) } ?? .null,
            token.revokedAt.map { .integer($0) } ?? .null,
        ])
    }

    /// Stores a new token unless `limit` tokens neither revoked nor expired at `now` exist
    /// already; returns the generation that stamped it, or nil (nothing written). The
    /// count reads no table: `token_state.live`, less the tokens that expired since its
    /// `expired_through` (a range of `tokens_unrevoked_by_expiry`), which are then taken
    /// off it for good. On PostgreSQL the writers' lock (`SharedWriting`) makes the count
    /// and the insert one step for every daemon sharing the database.
    public static func insert(_ token: TokenRecord, limit: Int, now: EpochMilliseconds,
                              in database: Database) throws(DatabaseError) -> Int64? {
        let state = try database.rows("SELECT live, expired_through FROM token_state WHERE id = 1") {
            (live: $0.optionalInt(0), through: $0.int(1))
        }.first
        var live: Int64
        var through = state?.through ?? now
        var recount = false
        if let known = state?.live {
            live = known
            if now > through {
                live -= try database.scalar("""
                    SELECT count(*) FROM tokens WHERE revoked_at IS NULL AND expires_at > ? AND expires_at <= ?
                    """, [.integer(through), .integer(now)]) ?? 0
                recount = live != known
                if recount { through = now }
            }
        } else {
            // Not known (the state row was made again): counted once.
            live = try usableCount(at: now, in: database)
            through = max(through, now)
            recount = true
        }
        guard live < Int64(limit) else { return nil }
        if recount {
            try database.run("UPDATE token_state SET live = ?, expired_through = ? WHERE id = 1", [.integer(live), .integer(through)])
        }
        try insert(token, in: database)
        return try generation(in: database)
    }

    /// The tokens neither revoked nor expired at `now`, counted row by row.
    public static func usableCount(at now: EpochMilliseconds, in database: Database) throws(DatabaseError) -> Int64 {
        try database.scalar("SELECT count(*) FROM tokens WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
                            [.integer(now)]) ?? 0
    }

    /// Marks the token `id` revoked at `now`; returns it as it is now, or nil when no
    /// token has that id, it was already revoked, or `allowed` says it may not be touched
    /// (then nothing changes).
    public static func revoke(_ id: String, at now: EpochMilliseconds, in database: Database,
                              allowed: (TokenRecord) -> Bool = { _ in true }) throws(DatabaseError) -> TokenRecord? {
        guard var token = try database.rows("SELECT \(columns) FROM tokens WHERE id = ? AND revoked_at IS NULL",
                                            [.text(id)], map: record).first, allowed(token) else { return nil }
        try database.run("UPDATE tokens SET revoked_at = ? WHERE id = ?", [.integer(now), .text(id)])
        token.revokedAt = now
        return token
    }

    /// Every token ever made, revoked ones included, oldest first.
    public static func all(in database: Database) throws(DatabaseError) -> [TokenRecord] {
        try database.rows("SELECT \(columns) FROM tokens ORDER BY created_at, id", map: record)
    }

    /// What changed in the table since generation `known`, read in the caller's
    /// transaction: the rows stamped later (`tokens_by_change`), or every row when nothing
    /// was loaded yet (`known` negative), a row was deleted since (a delete leaves no row
    /// to read), or the generation went back (the state row was made again).
    public static func changes(since known: Int64, in database: Database) throws(DatabaseError) -> TokenChanges {
        let (generation, deleted) = try database.rows("SELECT generation, deleted FROM token_state WHERE id = 1") {
            ($0.int(0), $0.int(1))
        }.first ?? (0, 0)
        let required = try required(in: database)
        if generation == known { return TokenChanges(generation: generation, required: required, tokens: [], isComplete: false) }
        if known < 0 || generation < known || deleted > known {
            return TokenChanges(generation: generation, required: required, tokens: try all(in: database), isComplete: true)
        }
        let tokens = try database.rows("SELECT \(columns) FROM tokens WHERE changed > ? ORDER BY changed",
                                       [.integer(known)], map: record)
        return TokenChanges(generation: generation, required: required, tokens: tokens, isComplete: false)
    }

    /// Whether any token row exists now.
    public static func anyExists(in database: Database) throws(DatabaseError) -> Bool {
        try database.scalar("SELECT EXISTS (SELECT 1 FROM tokens)") == 1
    }

    /// Whether tokens are required: a token was made once (a trigger sets the flag with
    /// the first one; the daemon never clears it, and deleting rows leaves it set), a token
    /// row exists, or the state row itself is gone (deleted by hand: never read as "open").
    public static func required(in database: Database) throws(DatabaseError) -> Bool {
        try database.scalar("""
            SELECT CASE WHEN coalesce((SELECT required FROM token_state WHERE id = 1), 1) = 1
                OR EXISTS (SELECT 1 FROM tokens) THEN 1 ELSE 0 END
            """) == 1
    }

    /// Whether the database at `path` requires tokens, read without creating or changing
    /// it: false when the file does not exist or holds no token table yet (for the start
    /// refusals, which must not create the database they refuse to serve).
    public static func requiredWithoutCreating(path: String) -> Bool {
        // Read-only: a missing file is not created (the open fails).
        guard let database = try? Database(path: path, readOnly: true) else { return false }
        defer { database.close() }
        if let required = try? Self.required(in: database), required { return true }
        return (try? anyExists(in: database)) ?? false
    }

    /// A number that moves whenever a token is made, changed or deleted (a use written
    /// moves it too); each row is stamped with the generation that last changed it.
    public static func generation(in database: Database) throws(DatabaseError) -> Int64 {
        try database.scalar("SELECT generation FROM token_state WHERE id = 1") ?? 0
    }

    /// Writes the last-used times kept in memory (never moves one back).
    public static func recordUse(_ times: [String: EpochMilliseconds], in database: Database) throws(DatabaseError) {
        for (id, time) in times {
            try database.run("UPDATE tokens SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)",
                             [.integer(time), .text(id)])
        }
    }

    private static func record(_ row: any ResultRow) -> TokenRecord {
        TokenRecord(id: row.text(0), name: row.text(1),
                    scopes: Set(row.text(2).split(separator: ",").compactMap { Scope(rawValue: String($0)) }),
                    taskPrefix: row.optionalText(3), secretHash: unhex(row.text(4)), createdAt: row.int(5),
                    expiresAt: row.optionalInt(6), lastUsedAt: row.optionalInt(7), revokedAt: row.optionalInt(8))
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func unhex(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        func nibble(_ byte: UInt8) -> UInt8 {
            byte <= UInt8(ascii: "9") ? byte - UInt8(ascii: "0") : (byte | 0x20) - UInt8(ascii: "a") + 10
        }
        return stride(from: 0, to: bytes.count - 1, by: 2).map { nibble(bytes[$0]) << 4 | nibble(bytes[$0 + 1]) }
    }
}

/// What changed in the tokens table since a generation (`TokenRepository.changes`).
public struct TokenChanges: Sendable, Equatable {
    /// The generation the rows are as of: every change up to it is in them.
    public var generation: Int64
    /// Whether tokens are required (`TokenRepository.required`).
    public var required: Bool
    /// The rows changed since the generation asked for, in the order of their changes; or,
    /// when `isComplete`, every row of the table.
    public var tokens: [TokenRecord]
    public var isComplete: Bool

    public init(generation: Int64, required: Bool, tokens: [TokenRecord], isComplete: Bool) {
        self.generation = generation
        self.required = required
        self.tokens = tokens
        self.isComplete = isComplete
    }
}
