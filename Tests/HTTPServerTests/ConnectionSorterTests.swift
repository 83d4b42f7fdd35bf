import Foundation
import HeadwayTestSupport
import Lifecycle
import Synchronization
import Testing
@testable import HTTPServer

/// Monotonic nanoseconds that move only when told.
final class ManualMonotonicClock: Sendable {
    private let now = Atomic<UInt64>(1_000_000_000)
    func read() -> UInt64 { now.load(ordering: .acquiring) }
    func advance(by nanoseconds: UInt64) { now.add(nanoseconds, ordering: .acquiringAndReleasing) }
}

/// Polls `condition` for up to 2 s; true as soon as it holds.
func eventually(_ condition: () -> Bool) -> Bool {
    for _ in 0..<400 {
        if condition() { return true }
        usleep(5000)
    }
    return condition()
}

/// A connection sorter alone on a loopback port, its loop on a thread of its own, its clock
/// manual; it records the connections it hands over (and keeps them open) and its reports.
final class SortingHarness: Sendable {
    let sorter: ConnectionSorter
    let port: Int
    let clock = ManualMonotonicClock()
    let perAddress: ConnectionsPerAddress
    /// Later heads' deadlines, as a server's daemons would start and stop them.
    let requestDeadlines: RequestDeadlines
    private let record = Record()
    /// While set, a hand-over waits for it (the loop is held): connections pile up in the backlog.
    let handOffGate = Locked<DispatchSemaphore?>(nil)
    private let group: ServiceGroup

    /// What the sorter handed over and reported.
    private final class Record: Sendable {
        let handed = Locked<[(fd: Int32, route: ConnectionRoute)]>([])
        let reports = Locked<[[ConnectionRefusal: Int]]>([])
    }

    init(_ adjust: (inout ConnectionSorter.Limits) -> Void = { _ in }, perAddressLimit: Int = 1000) throws {
        var limits = ConnectionSorter.Limits()
        limits.streamPaths = ["/stream"]
        adjust(&limits)
        let listenFD = try SocketAddress.listen(host: "127.0.0.1", port: 0)
        port = SocketAddress.boundPort(fd: listenFD) ?? 0
        perAddress = ConnectionsPerAddress(limit: perAddressLimit)
        let (clock, record, handOffGate) = (clock, record, handOffGate)
        requestDeadlines = RequestDeadlines(headTimeoutNanoseconds: limits.headTimeoutNanoseconds,
                                            bodyTimeoutNanoseconds: 30_000_000_000, now: { clock.read() })
        sorter = try ConnectionSorter(listenFD: listenFD, limits: limits, connectionsPerAddress: perAddress,
                                      requestDeadlines: requestDeadlines,
                                      monotonicNow: { clock.read() },
                                      reportRefusals: { counts in record.reports.withLock { $0.append(counts) } }) { fd, route, _, _ in
            record.handed.withLock { $0.append((fd, route)) }
            handOffGate.withLock { $0 }?.wait()
        }
        group = ServiceGroup([ServiceGroup.Member("test-sorter", sorter)])
        try group.start()
    }

    var handedRoutes: [ConnectionRoute] { record.handed.withLock { $0.map(\.route) } }
    var handedSockets: [Int32] { record.handed.withLock { $0.map(\.fd) } }
    var refusals: [ConnectionRefusal: Int] {
        record.reports.withLock { $0.reduce(into: [:]) { total, report in total.merge(report, uniquingKeysWith: +) } }
    }

    /// Wakes the loop and returns once it has done its duties at least twice more.
    func passTwice() -> Bool {
        let start = sorter.loopPasses
        return eventually {
            sorter.wake()
            return sorter.loopPasses >= start + 2
        }
    }

    func stop() {
        group.stop()
        record.handed.withLock { $0.forEach { close($0.fd) } }
    }
}

/// The accept loop alone (no daemons): connections wait at no cost until their whole head is
/// there, a head not whole in time closes its connection, and the waiting set is bounded.
@Suite(.serialized) struct ConnectionSorterTests {
    @Test func anIdleHalfHeadIsNotReadAgainUntilMoreBytesArrive() throws {
        let harness = try SortingHarness()
        defer { harness.stop() }
        let clients = try (0..<5).map { _ in try TestHTTPClient(port: harness.port) }
        for client in clients { try client.send("GET /str") }
        #expect(eventually { harness.sorter.waitingCount == 5 && harness.sorter.peekCount >= 5 })
        let peeked = harness.sorter.peekCount
        for _ in 0..<5 { #expect(harness.passTwice()) }
        #expect(harness.sorter.peekCount == peeked, "idle half heads were read again without new bytes")
        try clients[0].send("eam HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedRoutes == [.stream] }, "the rest of the head is seen at once")
        #expect(harness.sorter.peekCount == peeked + 1)
        #expect(harness.sorter.waitingCount == 4)
    }

    @Test func aHeadNotWholeByItsDeadlineClosesItsConnection() throws {
        let harness = try SortingHarness { $0.headTimeoutNanoseconds = 10_000_000_000 }
        defer { harness.stop() }
        let slow = try TestHTTPClient(port: harness.port)
        try slow.send("POST /v1/tasks HTTP/1.1\r\nHost: x\r\n")  // and never the end of the head
        #expect(eventually { harness.sorter.waitingCount == 1 && harness.sorter.peekCount >= 1 })
        harness.clock.advance(by: 9_999_999_999)
        #expect(harness.passTwice())
        #expect(harness.sorter.waitingCount == 1, "at its deadline, not past it: still waiting")
        #expect(harness.handedRoutes.isEmpty, "an unfinished head is not handed over")
        harness.clock.advance(by: 2)
        #expect(harness.passTwice())
        #expect(harness.sorter.waitingCount == 0)
        guard case .closed = try slow.exchange(Array("Content-Length: 0\r\n\r\n".utf8)) else {
            Issue.record("a head not whole by its deadline was served")
            return
        }
        #expect(harness.refusals == [.headTimeout: 1])
        #expect(harness.perAddress.openCount == 0, "its address is released")
    }

    /// Connections that arrived while the loop was busy, more than the waiting set holds,
    /// each with its whole head: all are handed over, none closed to make room.
    @Test func aBurstLargerThanTheWaitingSetIsSortedWhole() throws {
        let harness = try SortingHarness { $0.maximumWaiting = 8 }
        defer { harness.stop() }
        let gate = DispatchSemaphore(value: 0)
        harness.handOffGate.withLock { $0 = gate }
        let first = try TestHTTPClient(port: harness.port)
        try first.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedRoutes.count == 1 }, "the loop is held in its hand-over")
        let burst = try (0..<40).map { _ in try TestHTTPClient(port: harness.port) }
        for (index, client) in burst.enumerated() {
            try client.send("GET \(index % 2 == 0 ? "/x" : "/stream") HTTP/1.1\r\nHost: x\r\n\r\n")
        }
        harness.handOffGate.withLock { $0 = nil }
        gate.signal()
        #expect(eventually { harness.handedRoutes.count == 41 })
        #expect(harness.passTwice())
        #expect(harness.refusals.isEmpty, "none was closed to make room")
        #expect(harness.handedRoutes.filter { "\($0)" == "stream" }.count == 20)
    }

    /// A half-sent head that has sent nothing since it was peeked at gives way without being
    /// read again: a flood of them is evicted at the cost of a `FIONREAD` each.
    @Test func aStaleHalfHeadGivesWayWithoutBeingReadAgain() throws {
        let harness = try SortingHarness { $0.maximumWaiting = 2 }
        defer { harness.stop() }
        let halves = try (0..<2).map { _ in try TestHTTPClient(port: harness.port) }
        for (index, half) in halves.enumerated() {
            try half.send("GET /x HTTP/1.1\r\n")
            #expect(eventually { harness.sorter.peekCount == index + 1 })
        }
        let newcomer = try TestHTTPClient(port: harness.port)
        #expect(eventually { harness.refusals == [.waitingFull: 1] })
        #expect(harness.sorter.peekCount == 2, "the oldest was closed without being read again")
        try newcomer.send("GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedRoutes.count == 1 })
    }

    @Test func aFullWaitingSetClosesItsOldestForTheNewest() throws {
        let harness = try SortingHarness { $0.maximumWaiting = 3 }
        defer { harness.stop() }
        var silent: [TestHTTPClient] = []
        for count in 1...3 {
            silent.append(try TestHTTPClient(port: harness.port))
            #expect(eventually { harness.sorter.waitingCount == count })  // in this order
        }
        let newest = try TestHTTPClient(port: harness.port)
        #expect(eventually { harness.refusals == [.waitingFull: 1] })
        #expect(harness.sorter.waitingCount == 3, "at the bound, not past it")
        guard case .closed = try silent[0].exchange(Array("GET /x HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) else {
            Issue.record("the oldest waiting connection was kept")
            return
        }
        try newest.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        try silent[1].send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedRoutes.count == 2 }, "the newest and the others are sorted")
        #expect(Set(harness.handedRoutes.map { "\($0)" }) == ["request", "stream"])
    }

    @Test func connectionsPastTheCapOfTheirAddressAreClosedAtAccept() throws {
        let harness = try SortingHarness(perAddressLimit: 2)
        defer { harness.stop() }
        let first = try (0..<2).map { _ in try TestHTTPClient(port: harness.port) }
        #expect(eventually { harness.sorter.waitingCount == 2 })
        let third = try TestHTTPClient(port: harness.port)
        #expect(eventually { harness.refusals == [.tooManyFromAddress: 1] })
        guard case .closed = try third.exchange(Array("GET /x HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) else {
            Issue.record("a third connection from one address was kept")
            return
        }
        #expect(harness.sorter.waitingCount == 2)
        try first[0].send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedRoutes == [.request] })
        #expect(harness.perAddress.openCount == 2, "a connection handed over still counts")
    }

    /// A connection a daemon serves that waits for a later head past the head timeout is
    /// shut down by the loop and counted as a head timeout; one whose head came in time is not.
    @Test func aDaemonsConnectionLateForItsNextHeadIsShutDown() throws {
        let harness = try SortingHarness { $0.headTimeoutNanoseconds = 10_000_000_000 }
        defer { harness.stop() }
        let late = try TestHTTPClient(port: harness.port), inTime = try TestHTTPClient(port: harness.port)
        try late.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedSockets.count == 1 })
        try inTime.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(eventually { harness.handedSockets.count == 2 })
        // As the daemons do: each waits for a head once handed over; one's head comes.
        harness.handedSockets.forEach(harness.requestDeadlines.startWaiting)
        harness.clock.advance(by: 5_000_000_000)
        harness.requestDeadlines.stopWaiting(harness.handedSockets[1])
        harness.clock.advance(by: 4_999_999_999)
        #expect(harness.passTwice())
        #expect(harness.requestDeadlines.count == 1, "at its deadline, not past it: still waiting")
        harness.clock.advance(by: 2)
        #expect(harness.passTwice())
        #expect(harness.requestDeadlines.count == 0)
        #expect(eventually { harness.refusals == [.headTimeout: 1] })
        guard case .closed = try late.exchange(Array("GET /y HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) else {
            Issue.record("a connection late for its next head was kept")
            return
        }
        var byte: UInt8 = 0
        #expect(recv(harness.handedSockets[1], &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 1,
                "the connection whose head came in time is untouched")
    }
}
