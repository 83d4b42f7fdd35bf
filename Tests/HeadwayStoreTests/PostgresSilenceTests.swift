import Foundation
import Glibc
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// A server that stops answering (SIGSTOP of its session) while a connection awaits it:
/// the connection gives it up after the silence limit (`PostgresConnection.awaitAnswer`).
@Suite(.serialized) struct PostgresSilenceTests {
    /// Stops the server session of `connection` for `body`, then lets it go on.
    private func frozen<Value>(_ connection: PostgresConnection, _ body: () throws -> Value) rethrows -> Value {
        let pid = connection.sessionProcessID
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        return try body()
    }

    private func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    @Test(.enabled(if: TestPostgresDatabase.isAvailable, "needs a PostgreSQL server (HEADWAY_TEST_POSTGRES)"))
    func aPipelineLargerThanTheSocketBuffersIsGivenUpWithoutSpinning() throws {
        let server = try TestPostgresDatabase()
        defer { server.drop() }
        let connection = try PostgresConnection(location: server.uri, access: .readWrite, statementTimeoutMilliseconds: 1000)
        try connection.execute("CREATE TABLE big (id integer, body text)")
        try connection.control("BEGIN")
        connection.pipelineUntilCommit()
        let body = String(repeating: "x", count: 100_000)
        let start = Date()
        let cpu = cpuSeconds()
        let error = frozen(connection) { () -> (any Error)? in
            do {
                for id in 0..<100 { try connection.run("INSERT INTO big VALUES (?, ?)", [.integer(Int64(id)), .text(body)]) }
                try connection.control("COMMIT")
                return nil
            } catch {
                return error
            }
        }
        let took = Date().timeIntervalSince(start)
        let spent = cpuSeconds() - cpu
        #expect((error as? DatabaseError)?.isUnavailable == true, "\(String(describing: error))")
        #expect(took < 9, "\(took)")
        #expect(spent < 1, "\(spent) s of CPU over \(took) s")
    }
}
