import HeadwayCore

/// SQL for the `tokens` table (migration 0005). Every function runs on the connection it
/// is given; the caller decides about transactions. Secrets never reach it: only their
/// SHA-256, stored as lower-case hex.
public enum TokenRepository {
    private static let columns = "id, name, scopes, task_prefix, secret_hash, created_at, expires_at, last_used_at, revoked_at"

    /// Stores a new token (the generation moves: a trigger).
    public static func insert(_ token: TokenRecord, in database: Database) throws(SQLiteError) {
        try database.run("INSERT INTO tokens (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(token.id), .text(token.name), .text(token.scopeList.joined(separator: ",")),
            token.taskPrefix.map { .text($0) } ?? .null, .text(hex(token.secretHash)), .integer(token.createdAt),
            token.expiresAt.map { .integer($0) } ?? .null, token.lastUsedAt.map { .integer($0) } ?? .null,
            token.revokedAt.map { .integer($0) } ?? .null,
        ])
    }

    /// Marks the token `id` revoked at `now`; returns it as it is now, or nil when no
    /// token has that id or it was already revoked.
    public static func revoke(_ id: String, at now: EpochMilliseconds, in database: Database) throws(SQLiteError) -> TokenRecord? {
        guard var token = try database.rows("SELECT \(columns) FROM tokens WHERE id = ? AND revoked_at IS NULL",
                                            [.text(id)], map: record).first else { return nil }
        try database.run("UPDATE tokens SET revoked_at = ? WHERE id = ?", [.integer(now), .text(id)])
        token.revokedAt = now
        return token
    }

    /// Every token ever made, revoked ones included, oldest first.
    public static func all(in database: Database) throws(SQLiteError) -> [TokenRecord] {
        try database.rows("SELECT \(columns) FROM tokens ORDER BY created_at, id", map: record)
    }

    /// Whether any token was ever made (then every non-public route needs one).
    public static func anyExists(in database: Database) throws(SQLiteError) -> Bool {
        try database.scalar("SELECT EXISTS (SELECT 1 FROM tokens)") == 1
    }

    /// A number that moves whenever a token is made or changed (not when it is used).
    public static func generation(in database: Database) throws(SQLiteError) -> Int64 {
        try database.scalar("SELECT generation FROM token_state") ?? 0
    }

    /// Writes the last-used times kept in memory (never moves one back).
    public static func recordUse(_ times: [String: EpochMilliseconds], in database: Database) throws(SQLiteError) {
        for (id, time) in times {
            try database.run("UPDATE tokens SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?",
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
