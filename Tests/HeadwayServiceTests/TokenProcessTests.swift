import Foundation
import Testing
import HeadwayCore
import HeadwayTestSupport

/// `headwayd token create` as a process: the secret alone on stdout, picked up by a daemon
/// already running on the same database; beyond loopback the daemon starts only once a
/// token exists.
@Suite(.serialized) struct TokenProcessTests {
    @Test func tokenCreatePrintsTheSecretAloneAndARunningDaemonPicksItUp() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("h.db")
        let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", path], logPath: directory.file("d.log"))
        defer { _ = daemon.stop(SIGTERM) }
        let client = try TestHTTPClient(port: daemon.port)
        #expect(try client.request("GET", "/v1/tasks").status == 200)

        let (status, output, errors) = try DaemonProcess.run(["token", "create", "--scope", "admin", "--name", "first",
                                                              "--db", path])
        #expect(status == 0, "\(errors)")
        #expect(errors.isEmpty)
        let secret = String(output.dropLast())
        #expect(output.hasSuffix("\n") && !secret.contains("\n"))
        #expect(TokenSecret.isWellFormed(secret), "\(output)")
        // Within about a second the daemon asks for a token, and takes this one.
        var reply = try client.request("GET", "/v1/tasks")
        for _ in 0..<300 where reply.status == 200 {
            usleep(10_000)
            reply = try client.request("GET", "/v1/tasks")
        }
        #expect(reply.status == 401 && reply.problemCode == "token_missing")
        let tokens = try client.request("GET", "/v1/tokens", headers: [("Authorization", "Bearer \(secret)")])
        #expect(tokens.status == 200)
        #expect((tokens.json["tokens"] as? [[String: Any]])?.first?["name"] as? String == "first")
        // The secret is never logged.
        #expect(!daemon.log.contains(String(secret.dropFirst(3))))

        // A prefixed, expiring one; usage errors exit 64.
        let (prefixedStatus, prefixed, _) = try DaemonProcess.run(["token", "create", "--scope=report", "--scope", "read",
                                                                   "--task-prefix", "ci.", "--expires-in", "1h", "--db", path])
        #expect(prefixedStatus == 0 && TokenSecret.isWellFormed(prefixed.dropLast()))
        for bad in [["token", "create", "--db", path], ["token", "create", "--scope", "root", "--db", path],
                    ["token", "create", "--scope", "admin"], ["token", "make"],
                    ["token", "create", "--scope", "read", "--expires-in", "1e16", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "1e18", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "1e300", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "9.2e15", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "0.0001", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "59", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "36526d", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "inf", "--db", path],
                    ["token", "create", "--scope", "read", "--expires-in", "nan", "--db", path], ["token", "create", "--scope", "read",
                                                                                 "--task-prefix", "a/b", "--db", path]] {
            let (badStatus, badOutput, badErrors) = try DaemonProcess.run(bad)
            #expect(badStatus == 64, "\(bad)")
            #expect(badOutput.isEmpty && badErrors.contains("headwayd token --help"), "\(bad): \(badErrors)")
        }
        let (helpStatus, help, _) = try DaemonProcess.run(["token", "--help"])
        #expect(helpStatus == 0 && help.contains("headwayd token create --scope S"))
        #expect(help.contains("1 minute to 100 years"))
        for good in ["1m", "36525d"] {
            let (goodStatus, _, goodErrors) = try DaemonProcess.run(["token", "create", "--scope", "read", "--expires-in", good,
                                                                     "--db", path])
            #expect(goodStatus == 0, "\(good): \(goodErrors)")
        }
        let listed = try client.request("GET", "/v1/tokens", headers: [("Authorization", "Bearer \(secret)")])
        for token in listed.json["tokens"] as? [[String: Any]] ?? [] {
            if let expiry = token["expires_at"] as? String { #expect(Timestamp.parseRFC3339(expiry) != nil, "\(expiry)") }
        }
    }

    @Test func beyondLoopbackTheDaemonStartsOnlyOnceATokenExists() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("h.db")
        let (refused, _, errors) = try DaemonProcess.run(["--listen", "0.0.0.0:0", "--db", path])
        #expect(refused == 1)
        #expect(errors.contains("no access token exists in \(path), so Headway serves only on loopback"), "\(errors)")
        #expect(errors.contains("headwayd token create --scope admin --db \(path)"))
        #expect(!FileManager.default.fileExists(atPath: path), "a refused start created the database")
        let (made, _, _) = try DaemonProcess.run(["token", "create", "--scope", "admin", "--db", path])
        #expect(made == 0)
        let daemon = try DaemonProcess(["--listen", "0.0.0.0:0", "--db", path], logPath: directory.file("d.log"))
        defer { _ = daemon.stop(SIGTERM) }
        let client = try TestHTTPClient(port: daemon.port)
        #expect(try client.request("GET", "/v1/tasks").problemCode == "token_missing")
        #expect(try client.request("GET", "/healthz").status == 200)
    }
}
