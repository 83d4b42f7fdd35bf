import Foundation

/// A fresh, uniquely named database on the PostgreSQL server named by `HEADWAY_TEST_POSTGRES`
/// (the URI of its `postgres` database; `make test` starts a private server and sets it),
/// made and dropped with `psql`. `HEADWAY_TEST_DB=postgres` runs the daemon's suites on such
/// databases instead of SQLite files (`isSelected`); tests of PostgreSQL itself run whenever
/// a server is there (`isAvailable`).
public final class TestPostgresDatabase {
    private static var environment: [String: String] { ProcessInfo.processInfo.environment }
    /// Whether the daemon's suites run against PostgreSQL.
    public static var isSelected: Bool { environment["HEADWAY_TEST_DB"] == "postgres" }
    /// Whether a test that needs an SQLite file (it opens or damages the file itself) runs.
    public static var sqliteOnly: Bool { !isSelected }
    /// Whether a PostgreSQL server is there for the tests.
    public static var isAvailable: Bool { environment["HEADWAY_TEST_POSTGRES"] != nil }

    public let name: String
    /// The new database's URI.
    public let uri: String
    private let adminURI: String

    public init() throws {
        guard let admin = Self.environment["HEADWAY_TEST_POSTGRES"], let range = admin.range(of: "/postgres?") else {
            throw TestHTTPError("PostgreSQL tests need HEADWAY_TEST_POSTGRES=postgresql://…/postgres?host=…")
        }
        adminURI = admin
        name = "headway_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        uri = admin.replacingCharacters(in: range, with: "/\(name)?")
        try psql("CREATE DATABASE \(name)")
    }

    /// Runs `sql` on the server's `postgres` database; returns its rows, columns split by `|`.
    @discardableResult
    public func psql(_ sql: String, database: String? = nil) throws -> String {
        let target = database.map { adminURI.replacingOccurrences(of: "/postgres?", with: "/\($0)?") } ?? adminURI
        let result = try runToEnd("/usr/bin/env", ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", target, "-c", sql],
                                  environment: nil)
        guard result.status == 0 else { throw TestHTTPError("psql failed (\(result.status)): \(result.errors)") }
        return result.output
    }

    /// Drops the database (and ends any session still connected to it).
    public func drop() { _ = try? psql("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
}
