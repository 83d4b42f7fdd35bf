import Foundation
import HeadwayTestSupport
import Synchronization
import Testing
@testable import HTTPServer

/// The accept loop's bounds, through a real server: a connection that sends too little to
/// be sorted goes to the request daemon after the timeout (a manual clock moves it), and
/// connections beyond the limit of those waiting are closed at once.
@Suite(.serialized) struct ConnectionSorterTests {
    /// Monotonic nanoseconds that move only when told.
    final class ManualMonotonicClock: Sendable {
        private let now = Atomic<UInt64>(1_000_000_000)
        func read() -> UInt64 { now.load(ordering: .acquiring) }
        func advance(by nanoseconds: UInt64) { now.add(nanoseconds, ordering: .acquiringAndReleasing) }
    }

    private func server(_ adjust: (inout MicroHTTPServer.Configuration) -> Void) throws -> RunningServer {
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.streamPaths = ["/stream"]
        adjust(&configuration)
        return try RunningServer(try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { request, responder in
            responder.respond(HTTPResponse(status: 200, body: Array("\(request.method) \(request.path)".utf8)))
        }))
    }

    /// Polls `condition` up to 2 s (the loops it waits for tick every 10 ms).
    private func eventually(_ condition: () -> Bool) -> Bool {
        for _ in 0..<400 {
            if condition() { return true }
            usleep(5000)
        }
        return condition()
    }

    @Test func aConnectionThatSendsTooLittleIsHandedOverAfterTheTimeout() throws {
        let clock = ManualMonotonicClock()
        let running = try server {
            $0.sortingTimeoutNanoseconds = 10_000_000_000
            $0.sortingClock = { clock.read() }
        }
        defer { running.shutdown() }
        let client = try TestHTTPClient(port: running.port)
        try client.send("GET /str")  // could still become a stream request
        #expect(eventually { running.server.connectionsBeingSorted == 1 })
        clock.advance(by: 9_000_000_000)
        usleep(50_000)  // several ticks of the sorter, with the clock short of the timeout
        #expect(running.server.connectionsBeingSorted == 1, "not before its time")
        clock.advance(by: 2_000_000_000)
        #expect(eventually { running.server.connectionsBeingSorted == 0 }, "handed over once its time has come")
        try client.send("eam HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try client.readResponse().text == "GET /stream", "the request daemon serves it")
    }

    @Test func connectionsBeyondTheLimitOfThoseWaitingAreClosedAtOnce() throws {
        let running = try server { $0.connectionLimit = 2 }
        defer { running.shutdown() }
        let silent = try (0..<2).map { _ in try TestHTTPClient(port: running.port) }
        #expect(eventually { running.server.connectionsBeingSorted == 2 })
        let refused = try TestHTTPClient(port: running.port)
        guard case .closed = try refused.exchange(Array("GET /x HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) else {
            Issue.record("a third connection was served while two waited to be sorted")
            return
        }
        #expect(try silent[0].request("GET", "/x").text == "GET /x", "those waiting are still served")
    }
}
