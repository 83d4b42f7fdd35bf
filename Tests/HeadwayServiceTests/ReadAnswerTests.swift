import Dispatch
import Foundation
import HTTPServer
import HeadwayStore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayAPI
@testable import Telemetry
@testable import Daemon

/// `ReadPool.answer`, the way every API read is served: a read whose client went away
/// while it waited is not run, and a stop answers the reads still waiting with 503.
@Suite struct ReadAnswerTests {
    /// A pool of one connection on a fresh database, held by a read until `release()`.
    private final class HeldPool: @unchecked Sendable {  // `directory` is only removed, once, at the end
        let directory = TemporaryDirectory()
        let reads: ReadPool
        private let started = DispatchSemaphore(value: 0)
        private let gate = DispatchSemaphore(value: 0)

        init() throws {
            let path = directory.file("headway.db")
            _ = try DatabaseSetup.open(path: path)
            reads = try ReadPool(path: path, connections: 1, maximumWaiting: 10, label: "test.reads")
            try reads.submit { [started, gate] _ in
                started.signal()
                gate.wait()
            }
            #expect(started.wait(timeout: .now() + 10) == .success)
        }

        func release() { gate.signal() }

        deinit { directory.remove() }
    }

    /// Keeps its answer and its completion handlers; `end()` runs them, as the server does
    /// when the connection closes.
    private final class Exchange: Responder, @unchecked Sendable {  // both are guarded by `state`
        private let state = Locked<(answers: [HTTPResponse], handlers: [@Sendable (HTTPCompletion) -> Void])>(([], []))

        func respond(_ response: consuming HTTPResponse) {
            let response = response
            state.withLock { $0.answers.append(response) }
        }

        func onComplete(_ handler: @escaping @Sendable (HTTPCompletion) -> Void) {
            state.withLock { $0.handlers.append(handler) }
        }

        func end() {
            let handlers = state.withLock { $0.handlers }
            handlers.forEach { $0(HTTPCompletion(status: nil, durationMicroseconds: 0)) }
        }

        var answers: [HTTPResponse] { state.withLock { $0.answers } }
    }

    private let errors = ErrorReplies(logger: Logger(minimumLevel: .error, sink: { _ in }))
    private let request = HTTPRequest(method: "GET", path: "/v1/tasks", requestID: "req-1")

    @Test func aReadWhoseClientWentAwayWhileItWaitedIsNotRun() throws {
        let pool = try HeldPool()
        let ran = Locked<[String]>([])
        let gone = Exchange(), staying = Exchange()
        pool.reads.answer(request, gone, errors: errors) { _ in
            ran.withLock { $0.append("gone") }
            return HTTPResponse(status: 200)
        }
        pool.reads.answer(request, staying, errors: errors) { _ in
            ran.withLock { $0.append("staying") }
            return HTTPResponse(status: 200)
        }
        gone.end()
        pool.release()
        pool.reads.close()
        #expect(ran.withLock { $0 } == ["staying"])
        #expect(gone.answers.map(\.status) == [499], "answered all the same: the server counts the answers it awaits")
        #expect(staying.answers.map(\.status) == [200])
    }

    @Test func aStopAnswersTheReadsStillWaitingWith503() throws {
        let pool = try HeldPool()
        let ran = Locked(0)
        let waiting = (0..<3).map { _ in Exchange() }
        for exchange in waiting {
            pool.reads.answer(request, exchange, errors: errors) { _ in
                ran.withLock { $0 += 1 }
                return HTTPResponse(status: 200)
            }
        }
        pool.reads.refuseWaiting()
        for exchange in waiting {
            let answers = exchange.answers
            #expect(answers.map(\.status) == [503])
            #expect(answers.first.map { String(decoding: $0.body, as: UTF8.self) }?.contains("shutting_down") == true)
        }
        let late = Exchange()
        pool.reads.answer(request, late, errors: errors) { _ in HTTPResponse(status: 200) }
        #expect(late.answers.map(\.status) == [503], "a read asked for after the stop began")
        pool.release()
        pool.reads.close()
        #expect(ran.withLock { $0 } == 0)
    }
}

/// The API reads' turns, live: behind a proxy every client has one address, so a request
/// whose token was let through takes its turn as its token's, not as its address's.
@Suite(.serialized) struct ReadTurnsByTokenTests {
    /// From one address (as behind a proxy), 20 listings with one token wait behind a held
    /// read on the only reader connection, then one with another token: released, the
    /// other token's read is served second (turns by token), not after the 20 (one turn for
    /// the address).
    @Test func aTokensReadWaitsForOneTurnOfAnotherTokensQueue() throws {
        let daemon = try LiveDaemon(arguments: ["--read-connections", "1"])
        let admin = try daemon.makeToken([.admin], name: "admin")
        let heavy = try daemon.makeToken([.read], name: "heavy")
        let light = try daemon.makeToken([.read], name: "light")
        for index in 0..<200 {
            let metadata = #"{"blob":"\#(String(repeating: "x", count: 1000))"}"#
            let created = try daemon.request("POST", "/v1/tasks", json: #"{"id":"t\#(index)","name":"Task","metadata":\#(metadata)}"#,
                                             headers: [("Authorization", "Bearer \(admin)")])
            #expect(created.status == 201, "\(created.text)")
        }
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        try daemon.application.apiReads.submit { _ in
            started.signal()
            gate.wait()
        }
        #expect(started.wait(timeout: .now() + 10) == .success, "the reader connection is held")
        let order = Locked<[String]>([])
        let group = DispatchGroup()
        func read(_ name: String, token: String) throws {
            let client = try daemon.connect()
            try client.send("GET /v1/tasks?page_size=200 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n")
            // A thread each, started now, waiting on its socket: the order of the appends is
            // the order of the replies (a queue's workers would start one by one).
            group.enter()
            Thread {
                let status = (try? client.readResponse().status) ?? 0
                order.withLock { $0.append("\(name) \(status)") }
                group.leave()
            }.start()
        }
        for index in 0..<20 {
            try read("heavy\(index)", token: heavy)
            #expect(eventually { daemon.application.apiReads.waitingCount == index + 1 }, "queued in order")
        }
        try read("light", token: light)
        #expect(eventually { daemon.application.apiReads.waitingCount == 21 })
        gate.signal()
        #expect(group.wait(timeout: .now() + 60) == .success)
        let served = order.withLock { $0 }
        #expect(served.allSatisfy { $0.hasSuffix(" 200") }, "\(served)")
        let position = served.firstIndex(of: "light 200") ?? served.count
        #expect(position < 5, "the other token's read was served \(position + 1)th of 21: \(served)")
    }

    private func eventually(_ condition: () -> Bool) -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }
}
