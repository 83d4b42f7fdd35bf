import Testing
@testable import HeadwayStore

/// The pure parts of the PostgreSQL connection: parameter markers, redaction, timeouts.
@Suite struct PostgresTextTests {
    @Test(arguments: [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = $1 AND b = $2"),
        ("WHERE id >= ?2 AND id < ?3 OR parent_id = ?1", "WHERE id >= $2 AND id < $3 OR parent_id = $1"),
        ("SELECT '?' , \"a?b\", ? FROM x", "SELECT '?' , \"a?b\", $1 FROM x"),
        ("UPDATE t SET a = ?1 WHERE id = ?2 AND (a IS NULL OR a < ?1)", "UPDATE t SET a = $1 WHERE id = $2 AND (a IS NULL OR a < $1)"),
        ("VALUES (?, ?, ?)", "VALUES ($1, $2, $3)"),
        ("SELECT 'it''s ?' || ?", "SELECT 'it''s ?' || $1"),
    ])
    func sqliteParameterMarkersBecomePostgresOnes(sqlite: String, postgres: String) {
        #expect(PostgresConnection.numberedParameters(sqlite) == postgres)
    }

    @Test(arguments: [
        ("postgresql://headway:s3cret@db.example:5432/headway", "postgresql://headway:***@db.example:5432/headway"),
        ("postgres://u:p%40ss@h/d?sslmode=require&password=x&application_name=a",
         "postgres://u:***@h/d?sslmode=require&password=***&application_name=a"),
        ("postgresql://postgres@/h?host=/tmp/s&port=5", "postgresql://postgres@/h?host=/tmp/s&port=5"),
        ("postgresql:///h?host=/tmp/s&password=abc", "postgresql:///h?host=/tmp/s&password=***"),
        ("./headway.db", "./headway.db"),
        ("postgresql://u:se/cret@db.example/headway", "postgresql://u:***@db.example/headway"),
        ("postgresql://db.example:5432/headway?sslmode=require", "postgresql://db.example:5432/headway?sslmode=require"),
    ])
    func passwordsAreRedacted(location: String, shown: String) {
        #expect(redactedLocation(location) == shown)
    }

    @Test func passwordsQuotedInLibpqMessagesAreRedacted() {
        let message = #"invalid percent-encoded token: "sec%zzret""#
        #expect(redactedMessage(message, location: "postgresql://u:sec%zzret@h/d") == #"invalid percent-encoded token: "***""#)
        #expect(redactedMessage(message, location: "postgresql://u@h/d?password=sec%zzret&port=5")
                == #"invalid percent-encoded token: "***""#)
        #expect(redactedMessage("role \"u\" has p@ss", location: "postgresql://u:p%40ss@h/d") == "role \"u\" has ***")
        #expect(redactedMessage("no password here", location: "postgresql://u@h/d?password=") == "no password here")
    }

    @Test func theNetworkDefaultsAreAddedWhereTheURIDoesNotSetThem() {
        let defaults = "connect_timeout=5&keepalives=1&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
            + "&tcp_user_timeout=10000"
        #expect(PostgresConnection.withNetworkDefaults("postgresql://h/d", environment: [:]) == "postgresql://h/d?" + defaults)
        #expect(PostgresConnection.withNetworkDefaults("postgresql://h/d?port=5", environment: [:])
                == "postgresql://h/d?port=5&" + defaults)
        // A user's own setting wins, whatever its value (keepalives=0 included).
        #expect(PostgresConnection.withNetworkDefaults(
            "postgresql://h/d?connect_timeout=30&keepalives=0&tcp_user_timeout=0", environment: [:])
            == "postgresql://h/d?connect_timeout=30&keepalives=0&tcp_user_timeout=0&keepalives_idle=5"
            + "&keepalives_interval=2&keepalives_count=3")
        let everything = "postgresql://h/d?" + defaults.replacing("=", with: "=7")
        #expect(PostgresConnection.withNetworkDefaults(everything, environment: [:]) == everything)
        // libpq's environment variable counts as the user's setting; a name that only ends
        // like one of them does not.
        #expect(PostgresConnection.withNetworkDefaults("postgresql://h/d", environment: ["PGCONNECT_TIMEOUT": "20"])
                == "postgresql://h/d?" + defaults.replacing("connect_timeout=5&", with: ""))
        #expect(PostgresConnection.withNetworkDefaults("postgresql://h/d?application_name=connect_timeout=1",
                                                       environment: [:])
                == "postgresql://h/d?application_name=connect_timeout=1&" + defaults)
        // This machine's libpq knows them all; an older one without tcp_user_timeout gets
        // the others only.
        #expect(PostgresConnection.networkDefaults.allSatisfy { PostgresConnection.libpqOptions.contains($0.key) })
        let older = PostgresConnection.libpqOptions.subtracting(["tcp_user_timeout"])
        #expect(PostgresConnection.withNetworkDefaults("postgresql://h/d", environment: [:], known: older)
                == "postgresql://h/d?" + defaults.replacing("&tcp_user_timeout=10000", with: ""))
    }

    @Test func onlyStatementsSafeToRepeatAreResent() {
        #expect(PostgresConnection.isSafeToResend("BEGIN ISOLATION LEVEL REPEATABLE READ"))
        #expect(PostgresConnection.isSafeToResend("SELECT 1"))
        #expect(!PostgresConnection.isSafeToResend("UPDATE tasks SET x = 1"))
        #expect(!PostgresConnection.isSafeToResend("COMMIT"))
    }
}
