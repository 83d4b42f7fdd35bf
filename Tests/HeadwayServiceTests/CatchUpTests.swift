import Lifecycle
import Dispatch
import Foundation
import HeadwayStore
import HeadwayTestSupport
import Testing
@testable import Daemon
@testable import EventStream
@testable import HeadwayAPI
import HeadwayCore

/// Reads off the request thread: catch-ups filtered in SQL, skipped for clients that left,
/// read side by side; API reads from a bounded pool; a stop that waits for them.
@Suite struct CatchUpTests {
    /// A read that holds one connection of a pool until the test opens the gate (a slow
    /// query, without the wait).
    private final class HeldRead: Sendable {
        private let started = DispatchSemaphore(value: 0)
        private let gate = DispatchSemaphore(value: 0)
        /// What the held read found once let go (the schema version, -1 if it could not read).
        let found = Locked<Int?>(nil)

        /// Submits the read to `pool` and waits until it holds a connection.
        init(in pool: ReadPool) throws {
            try pool.submit { [self] reader in
                started.signal()
                gate.wait()
                let version = (try? reader.schemaVersion()) ?? -1
                found.withLock { $0 = version }
            }
            guard started.wait(timeout: .now() + 10) == .success else { throw TestHTTPError("the held read never started") }
        }

        /// Lets the read go on (again harmless: tests also release in a `defer`, so that a
        /// failed expectation never leaves the stop waiting for a held read).
        func release() { gate.signal() }
    }

    private func snapshotIDs(_ client: TestSSEClient) throws -> [String] {
        let snapshot = try #require(try client.nextEvent())
        #expect(snapshot.event == "snapshot")
        let tasks = snapshot.json["tasks"] as? [[String: Any]] ?? []
        return tasks.compactMap { $0["id"] as? String }.sorted()
    }

    /// Waits (a bounded number of polls) until `condition` holds; returns whether it did.
    private func eventually(_ condition: () -> Bool) -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            usleep(5000)
        }
        return condition()
    }

    /// The filter is applied by the query: a `task=` catch-up reads the row it shows, not
    /// every task — in a snapshot and in a replay after `Last-Event-ID`.
    @Test func aFilteredCatchUpReadsOnlyTheRowsOfItsTasks() throws {
        let daemon = try LiveDaemon()
        let count = 30
        for index in 0..<count { try daemon.register(#"{"id":"t\#(index)","name":"T","total":10}"#) }
        let statistics = daemon.application.catchUpStatistics
        let all = try daemon.subscribe()
        let mark = try #require(try all.nextEvent()?.id.flatMap { Int64($0) }, "the snapshot's id")
        let readForAll = statistics.current.rowsRead
        #expect(try snapshotIDs(daemon.subscribe("?task=t7")) == ["t7"])
        let readForOne = statistics.current.rowsRead - readForAll
        #expect(readForAll - readForOne == count - 1, "the filtered snapshot skipped exactly the other tasks' rows")

        for index in 0..<count { try daemon.request("POST", "/v1/tasks/t\(index)/progress", json: #"{"completed":1}"#) }
        let before = statistics.current.rowsRead
        let replayAll = try daemon.subscribe(headers: [("Last-Event-ID", "\(mark)")])
        #expect(try replayAll.events { $0.json["id"] as? String == "t\(count - 1)" }.count == count)
        let replayAllRows = statistics.current.rowsRead - before
        let replayOne = try daemon.subscribe("?task=t7&task=t8", headers: [("Last-Event-ID", "\(mark)")])
        #expect(try replayOne.events { $0.json["id"] as? String == "t8" }.compactMap { $0.json["id"] as? String } == ["t7", "t8"])
        let replayOneRows = statistics.current.rowsRead - before - replayAllRows
        #expect(replayAllRows - replayOneRows == count - 2, "the filtered replay read only the two tasks' rows")
    }

    /// A client that closes before its catch-up's turn costs nothing: the catch-up is not
    /// read, its place is given back, and the next subscriber is served.
    @Test func aCatchUpForAClientThatLeftBeforeItsTurnIsSkipped() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "1"])
        try daemon.register(#"{"id":"a","name":"A"}"#)
        let statistics = daemon.application.catchUpStatistics
        let held = try HeldRead(in: daemon.application.catchUpReads)
        defer { held.release() }
        let leaving = try (0..<5).map { _ in try daemon.subscribe("?task=a") }
        #expect(eventually { daemon.application.catchUpReads.waitingCount == leaving.count })
        leaving.forEach { $0.disconnect() }
        held.release()
        #expect(eventually { statistics.current.skipped == leaving.count }, "skipped: \(statistics.current)")
        #expect(statistics.current.read == 0, "nothing was read for clients that left")
        #expect(eventually { daemon.application.subscriberCount == 0 }, "their places are given back")
        #expect(try snapshotIDs(daemon.subscribe("?task=a")) == ["a"])
        #expect(statistics.current.read == 1)
    }

    /// One read held on each pool (a slow query) holds one connection only: another
    /// subscriber's catch-up, API reads and a progress update all complete meanwhile.
    @Test func aHeldReadDoesNotHoldOtherCatchUpsOrRequests() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "2"])
        try daemon.register(#"{"id":"a","name":"A","total":10}"#)
        let heldCatchUp = try HeldRead(in: daemon.application.catchUpReads)
        let heldAPIRead = try HeldRead(in: daemon.application.apiReads)
        defer {
            heldCatchUp.release()
            heldAPIRead.release()
        }
        #expect(try snapshotIDs(daemon.subscribe()) == ["a"])
        #expect(try daemon.request("GET", "/v1/tasks/a").status == 200)
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":3}"#).status == 200)
        #expect(try daemon.request("GET", "/v1/tasks").status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/a/history").status == 200)
    }

    /// While every API read connection is held, a read waits in the pool — on a suspended
    /// connection, not on the request thread: updates are still answered, and the read is
    /// answered once a connection is free.
    @Test func aReadWaitingForAConnectionDoesNotHoldTheRequestThread() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "1"])
        try daemon.register(#"{"id":"a","name":"A","total":10}"#)
        let held = try HeldRead(in: daemon.application.apiReads)
        defer { held.release() }
        let waiting = try daemon.connect()
        try waiting.send("GET /v1/tasks/a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(eventually { daemon.application.apiReads.waitingCount == 1 })
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":4}"#).status == 200)
        held.release()
        let answer = try waiting.readResponse()
        #expect(answer.status == 200)
        #expect(answer.json["completed"] as? Int == 4, "read after the update it waited behind")
    }

    /// `--max-queued-reads`: that many reads wait for a connection; the next is refused 503
    /// `server_busy` at once, and those waiting are answered later.
    @Test func readsWaitUpToTheLimitAndAreRefusedPastIt() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "1", "--max-queued-reads", "2"])
        try daemon.register(#"{"id":"a","name":"A"}"#)
        let held = try HeldRead(in: daemon.application.apiReads)
        defer { held.release() }
        let waiting = try (0..<2).map { _ in try daemon.connect() }
        for client in waiting { try client.send("GET /v1/tasks/a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") }
        #expect(eventually { daemon.application.apiReads.waitingCount == 2 }, "at the limit, both wait")
        let refused = try daemon.request("GET", "/v1/tasks/a")
        #expect(refused.status == 503)
        #expect(refused.text.contains(#""code":"server_busy""#))
        #expect(refused.headers["retry-after"] == "1")
        held.release()
        for client in waiting { #expect(try client.readResponse().status == 200) }
    }

    @Test func readLimitFlags() throws {
        func parse(_ arguments: [String]) throws(UsageError) -> Configuration? {
            guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: [:]) else { return nil }
            return configuration
        }
        #expect(try parse([])?.readConnections == 2)
        #expect(try parse([])?.maximumQueuedReads == 1000)
        #expect(try parse(["--read-connections", "64"])?.readConnections == 64)
        #expect(throws: UsageError.self) { try parse(["--read-connections", "65"]) }
        #expect(throws: UsageError.self) { try parse(["--read-connections", "0"]) }
        #expect(try parse(["--max-queued-reads", "1000000"])?.maximumQueuedReads == 1_000_000)
        #expect(throws: UsageError.self) { try parse(["--max-queued-reads", "1000001"]) }
        #expect(throws: UsageError.self) { try parse(["--max-queued-reads", "many"]) }
        #expect(Configuration.usage.contains("--read-connections") && Configuration.usage.contains("--max-queued-reads"))
    }

    /// The stop waits for a catch-up being read (and those waiting) before closing the
    /// connections, and ends cleanly.
    @Test func theStopWaitsForAReadInProgressThenClosesCleanly() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "1"])
        let application = daemon.application
        let held = try HeldRead(in: application.catchUpReads)
        defer { held.release() }
        let client = try daemon.subscribe()
        #expect(eventually { application.catchUpReads.waitingCount == 1 })
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            application.shutdown()
            stopped.signal()
        }
        #expect(eventually { application.catchUpReads.isClosing }, "the stop reached the read pool")
        held.release()
        #expect(stopped.wait(timeout: .now() + 10) == .success, "the stop ends")
        #expect(held.found.withLock { $0 } ?? 0 > 0, "the held read still had its connection")
        #expect(try client.remainingEvents().isEmpty, "the stream ended")
        #expect(throws: (any Error).self) { try application.readers[0].schemaVersion() }
    }

    /// While the catch-ups held use up `--max-catch-up-bytes`, a new subscriber's catch-up
    /// is not read: its stream gets `retry:` and ends, and the refusals are logged as a
    /// count. Once the budget has room, the next one is read.
    @Test func pastTheCatchUpBudgetAStreamGetsRetryAndEndsWithoutARead() throws {
        let daemon = try LiveDaemon(arguments: ["--max-catch-up-bytes", "1048576"])
        try daemon.register(#"{"id":"a","name":"A"}"#)
        let application = daemon.application
        var held: CatchUpHold? = application.catchUpBudget.holding(CatchUpCharge(bytes: 1_048_576), by: .address(-1))
        let refused = try daemon.subscribe()
        #expect(refused.status == 200)
        #expect(try refused.next() == TestEvent(retry: 3000))
        #expect(try refused.remainingEvents().isEmpty, "the stream ended")
        #expect(application.catchUpStatistics.current.refused == 1)
        #expect(application.catchUpStatistics.current.read == 0, "nothing was read")
        held = nil
        #expect(try snapshotIDs(daemon.subscribe()) == ["a"])
        withExtendedLifetime(held) {}
    }

    @Test func catchUpBudgetFlag() throws {
        func parse(_ arguments: [String]) throws(UsageError) -> Configuration? {
            guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: [:]) else { return nil }
            return configuration
        }
        #expect(try parse([])?.maximumCatchUpBytes == 268_435_456)
        #expect(try parse(["--max-catch-up-bytes", "1048576"])?.maximumCatchUpBytes == 1_048_576)
        #expect(throws: UsageError.self) { try parse(["--max-catch-up-bytes", "1048575"]) }
        #expect(throws: UsageError.self) { try parse(["--max-catch-up-bytes", "lots"]) }
        #expect(Configuration.usage.contains("--max-catch-up-bytes"))
    }
}
