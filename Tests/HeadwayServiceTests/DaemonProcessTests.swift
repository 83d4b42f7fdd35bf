import Foundation
import HeadwayStore
import HeadwayTestSupport
import Testing
import HeadwayCore

@Suite(.serialized) struct DaemonProcessTests {
    @Test func helpAndUsageErrors() throws {
        let (status, output, _) = try DaemonProcess.run(["--help"])
        #expect(status == 0)
        #expect(output.hasPrefix("headwayd — the Headway progress-reporting daemon"))
        let (badStatus, _, badError) = try DaemonProcess.run(["--durability", "fast"])
        #expect(badStatus == 64)
        #expect(badError.contains("--durability must be full or normal"))
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = directory.file("no-tokens.db")
        let (envStatus, _, envError) = try DaemonProcess.run(["--db", database], environment: ["HEADWAY_LISTEN": "0.0.0.0:0"])
        #expect(envStatus == 1)
        #expect(envError.contains("only on loopback"))
        #expect(envError.contains("headwayd token create --scope admin --db \(database)"), "\(envError)")
    }

    /// A database migrated by a newer build stops the start with the reason, exit status 1.
    @Test func aDatabaseFromANewerBuildIsRefusedAtStart() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("newer.db")
        _ = try DatabaseSetup.open(path: path)
        let known = Migrator().latestVersion
        try Database(path: path).run("INSERT INTO schema_migrations (version, name) VALUES (?, 'later')",
                                     [.integer(Int64(known + 4))])
        let (status, _, errors) = try DaemonProcess.run(["--listen", "127.0.0.1:0", "--db", path])
        #expect(status == 1)
        #expect(errors == "headwayd: cannot start: the database was migrated by a newer Headway "
            + "(schema version \(known + 4); this build knows up to \(known)); upgrade headwayd or use another database\n")
    }

    @Test func acknowledgedChangesSurviveKillDashNine() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("h.db"), "--durability", "full"]
        let daemon = try DaemonProcess(arguments, logPath: directory.file("first.log"))
        let writers = 4, updates = 60
        let acknowledged = Box<[Int]>(Array(repeating: 0, count: writers))
        let group = DispatchGroup()
        for writer in 0..<writers {
            let client = try TestHTTPClient(port: daemon.port)
            _ = try client.request("POST", "/v1/tasks", json: #"{"id":"w\#(writer)","name":"Writer \#(writer)"}"#)
            DispatchQueue.global().async(group: group) {
                for index in 1...updates {
                    // The daemon is killed mid-way: a failed request only ends this writer.
                    guard let reply = try? client.request("POST", "/v1/tasks/w\(writer)/progress",
                                                          json: #"{"completed":\#(index),"seq":\#(index)}"#),
                          reply.status == 200 else { return }
                    acknowledged.update { $0[writer] = index }
                }
            }
        }
        // Kill while the writers are still sending, once each has had some replies.
        for _ in 0..<2000 where acknowledged.value.min()! < updates / 3 { usleep(1000) }
        #expect(daemon.stop(SIGKILL) == SIGKILL)
        group.wait()
        #expect(acknowledged.value.allSatisfy { $0 > 0 }, "every writer had updates acknowledged before the kill")
        let restarted = try DaemonProcess(arguments, logPath: directory.file("second.log"))
        defer { _ = restarted.stop(SIGTERM) }
        let client = try TestHTTPClient(port: restarted.port)
        for writer in 0..<writers {
            let task = try client.request("GET", "/v1/tasks/w\(writer)").json
            let completed = task["completed"] as? Int ?? -1
            #expect(completed >= acknowledged.value[writer], "writer \(writer): acknowledged \(acknowledged.value[writer]), stored \(completed)")
        }
    }

    @Test func sigtermStopsCleanlyAndKeepsData() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("h.db")]
        let daemon = try DaemonProcess(arguments, logPath: directory.file("first.log"))
        let client = try TestHTTPClient(port: daemon.port)
        #expect(try client.request("POST", "/v1/tasks", json: #"{"id":"kept","name":"Kept","total":5}"#).status == 201)
        #expect(try client.request("POST", "/v1/tasks/kept/progress", json: #"{"completed":2}"#).status == 200)
        #expect(daemon.stop(SIGTERM) == 0)
        #expect(daemon.log.contains("event=signal.received signal=SIGTERM"))
        #expect(daemon.log.contains("event=server.stopped"))
        #expect(daemon.log.contains("event=http.request request_id="))
        #expect(!FileManager.default.fileExists(atPath: directory.file("h.db-wal")),
                "a clean stop closes the database, which checkpoints and removes the WAL")
        let restarted = try DaemonProcess(arguments, logPath: directory.file("second.log"))
        defer { _ = restarted.stop(SIGINT) }
        let task = try TestHTTPClient(port: restarted.port).request("GET", "/v1/tasks/kept").json
        #expect(task["completed"] as? Int == 2)
    }
}

extension DaemonProcessTests {
    /// Under umask 022 a new database and its `-wal` and `-shm` are 0600 (SQLite gives the
    /// latter the database's mode) and the log file 0640; a symbolic link to nowhere where
    /// the database goes stops the start, and nothing is created where it leads.
    @Test func theDatabaseFilesAreTheOwnersAlone() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("h.db"), log = directory.file("headwayd.log")
        let command = underUmask("022", DaemonProcess.executable, ["--listen", "127.0.0.1:0", "--db", path, "--log-file", log])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command.path)
        process.arguments = command.arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            if process.isRunning { kill(process.processIdentifier, SIGTERM) }
            process.waitUntilExit()
        }
        // Bounded: 20 s for the daemon to listen.
        for _ in 0..<2000 where process.isRunning {
            if (try? String(contentsOfFile: log, encoding: .utf8))?.contains("event=server.listening") == true { break }
            usleep(10_000)
        }
        #expect(process.isRunning)
        #expect(fileMode(path) == 0o600)
        #expect(fileMode(path + "-wal") == 0o600)
        #expect(fileMode(path + "-shm") == 0o600)
        #expect(fileMode(log) == 0o640)
        #expect(!((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("security.database_mode"))

        // A database others may read (one made before, or opened up by hand) is started
        // with a warning.
        let shared = directory.file("shared.db")
        _ = try DatabaseSetup.open(path: shared)
        chmod(shared, 0o644)
        let warned = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", shared], logPath: directory.file("shared.log"))
        #expect(warned.log.contains("level=warn event=security.database_mode path=\(shared) mode=0644 detail="), "\(warned.log)")
        #expect(warned.stop(SIGTERM) == 0)

        let link = directory.file("link.db"), missing = directory.file("missing.db")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: missing)
        let (status, _, errors) = try DaemonProcess.run(["--listen", "127.0.0.1:0", "--db", link])
        #expect(status == 1)
        #expect(errors.contains("\(link): a symbolic link to a missing file"), "\(errors)")
        #expect(fileMode(missing) == nil)
    }

    @Test func versionIsPrintedAndMatchesTheContract() throws {
        let (status, output, _) = try DaemonProcess.run(["--version"])
        #expect(status == 0)
        #expect(output == "headwayd \(HeadwayVersion.current)\n")
        let spec = try String(contentsOf: OpenAPITests.root.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        #expect(spec.contains("\n  version: \(HeadwayVersion.current)\n"), "openapi.yaml info.version")
    }

    /// A stop waits for requests under way; a second signal meanwhile ends the process at
    /// once (128 + the signal), and what was acknowledged is kept.
    @Test func aSecondSignalDuringASlowStopEndsItAtOnce() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("h.db")]
        let daemon = try DaemonProcess(arguments, logPath: directory.file("first.log"))
        let client = try TestHTTPClient(port: daemon.port)
        #expect(try client.request("POST", "/v1/tasks", json: #"{"id":"kept","name":"Kept"}"#).status == 201)
        // A request whose body never comes keeps the stop waiting (up to 10 s). Its
        // `100 Continue` shows that the server has begun it.
        let unfinished = try TestHTTPClient(port: daemon.port)
        try unfinished.send("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + "Content-Length: 100\r\nExpect: 100-continue\r\n\r\n")
        #expect(try unfinished.readLine().hasPrefix("HTTP/1.1 100"))
        kill(daemon.process.processIdentifier, SIGTERM)
        for _ in 0..<2000 where !daemon.log.contains("event=server.stopping") { usleep(5000) }
        #expect(daemon.log.contains("event=server.stopping"))
        #expect(daemon.stop(SIGTERM) == 128 + SIGTERM)
        #expect(daemon.log.contains("event=signal.received signal=SIGTERM action=\"stopping at once\""))
        let restarted = try DaemonProcess(arguments, logPath: directory.file("second.log"))
        defer { _ = restarted.stop(SIGTERM) }
        #expect(try TestHTTPClient(port: restarted.port).request("GET", "/v1/tasks/kept").status == 200)
    }

    /// SIGTERM at random moments under keep-alive load always ends in a clean stop: exit
    /// status 0 and the last log line written (never an abort with a suspended connection).
    @Test func sigtermAtRandomMomentsUnderKeepAliveLoadStopsCleanly() throws {
        var random = SeededGenerator(seed: 0x5167_7e24)
        for round in 0..<20 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("h.db")],
                                           logPath: directory.file("round.log"))
            let runners = 8
            let acknowledged = Box(0)
            let group = DispatchGroup()
            for runner in 0..<runners {
                let client = try TestHTTPClient(port: daemon.port)
                DispatchQueue.global().async(group: group) {
                    guard (try? client.request("POST", "/v1/tasks", json: #"{"id":"r\#(runner)","name":"R"}"#)) != nil
                    else { return }
                    // Until the stop refuses or closes: each runner keeps its connection.
                    for index in 1... {
                        guard let reply = try? client.request("POST", "/v1/tasks/r\(runner)/progress",
                                                              json: #"{"completed":\#(index),"seq":\#(index)}"#),
                              reply.status == 200 else { return }
                        acknowledged.update { $0 += 1 }
                    }
                }
            }
            // The signal comes after a random number of acknowledged updates.
            let signalAfter = Int.random(in: 1...40, using: &random)
            for _ in 0..<4000 where acknowledged.value < signalAfter { usleep(500) }
            let status = daemon.stop(SIGTERM)
            group.wait()
            #expect(status == 0, "round \(round): exit status \(status.map(String.init) ?? "none"): \(daemon.log.suffix(600))")
            #expect(daemon.log.contains("event=server.stopped"), "round \(round): \(daemon.log.suffix(600))")
        }
    }

    /// The change sequence is stored: a subscriber resumes across a restart of the daemon.
    @Test func eventStreamResumesAcrossARestart() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("h.db")]
        let daemon = try DaemonProcess(arguments, logPath: directory.file("first.log"))
        let client = try TestHTTPClient(port: daemon.port)
        _ = try client.request("POST", "/v1/tasks", json: #"{"id":"a","name":"A"}"#)
        let subscriber = try TestSSEClient(port: daemon.port)
        let snapshot = try #require(try subscriber.nextEvent())
        _ = try client.request("POST", "/v1/tasks/a/heartbeat", json: #"{"label":"before restart"}"#)
        let seen = try #require(try subscriber.nextEvent())
        #expect(daemon.stop(SIGTERM) == 0)
        #expect(try subscriber.remainingEvents().isEmpty, "the stream ended cleanly")

        let restarted = try DaemonProcess(arguments, logPath: directory.file("second.log"))
        defer { _ = restarted.stop(SIGTERM) }
        let client2 = try TestHTTPClient(port: restarted.port)
        _ = try client2.request("POST", "/v1/tasks", json: #"{"id":"b","name":"B"}"#)
        let resumed = try TestSSEClient(port: restarted.port, headers: [("Last-Event-ID", seen.id ?? "")])
        let replayed = try #require(try resumed.nextEvent())
        #expect(replayed.event == "task.created")
        #expect(replayed.json["id"] as? String == "b")
        #expect(Int64(replayed.id ?? "") == Int64(seen.id ?? "")! + 1, "numbers continue after the restart")
        #expect(Int64(seen.id ?? "")! > Int64(snapshot.id ?? "")!)
    }
}

/// A value shared between threads under a lock.
final class Box<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ change: (inout Value) -> Void) { lock.withLock { change(&stored) } }
}
