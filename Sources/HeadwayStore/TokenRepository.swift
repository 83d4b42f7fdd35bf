import HeadwayCore

/// SQL for the `tokens` table (migration 0005). Every function runs on the connection it
/// is given; the caller decides about transactions. Secrets never reach it: only their
/// SHA-256, stored as lower-case hex.
public enum TokenRepository {
    private static let columns = "id, name, scopes, task_prefix, secret_hash, created_at, expires_at, last_used_at, revoked_at"

    /// Stores a new token (the generation moves: a trigger).
    public static func insert(_ token: TokenRecord, in database: Database) throws(DatabaseError) {
        try database.run("INSERT INTO tokens (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(token.id), .text(token.name), .text(token.scopeList.joined(separator: ",")),
            token.taskPrefix.map { .text($0) } ?? .null, .text(hex(token.secretHash)), .integer(token.createdAt),
            token.expiresAt.map { .integer($0) } ?? .null, token.lastUsedAt.map { .integer($0) } ?? .null,
            token.revokedAt.map { .integer($0) } ?? .null,
        ])
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
    /// moves it too).
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

    private static func record(_ row: Statement) -> TokenRecord {
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
