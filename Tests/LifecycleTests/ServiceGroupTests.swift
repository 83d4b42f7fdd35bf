import Foundation
import Dispatch
import Synchronization
import Testing
@testable import Lifecycle

/// What the services of one test did, in order.
private final class Journal: Sendable {
    private let entries = Locked<[String]>([])
    func note(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

/// A service that notes each step and runs until asked to stop.
private final class Recorder: Service {
    let name: String
    let journal: Journal
    let failsToPrepare: Bool
    private let doorbell = Doorbell()
    private let stopRequested = Locked(false)

    init(_ name: String, _ journal: Journal, failsToPrepare: Bool = false) {
        self.name = name
        self.journal = journal
        self.failsToPrepare = failsToPrepare
    }

    struct PrepareFailed: Error {}

    func prepare() throws {
        journal.note("prepare \(name)")
        if failsToPrepare { throw PrepareFailed() }
    }

    func run() {
        journal.note("run \(name)")
        while !stopRequested.withLock({ $0 }) { doorbell.wait() }
        journal.note("end \(name)")
    }

    func requestStop() {
        journal.note("stop \(name)")
        stopRequested.withLock { $0 = true }
        doorbell.ring()
    }
}

@Suite struct ServiceGroupTests {
    @Test func startsInOrderAndStopsInReverseEachAfterTheLaterOnesEnded() throws {
        let journal = Journal()
        let group = ServiceGroup(["a", "b", "c"].map { ServiceGroup.Member($0, Recorder($0, journal)) })
        try group.start()
        group.stop()
        let entries = journal.all
        #expect(entries.filter { $0.hasPrefix("prepare") } == ["prepare a", "prepare b", "prepare c"])
        #expect(entries.filter { $0.hasPrefix("end") } == ["end c", "end b", "end a"])
        for name in ["a", "b", "c"] {
            let prepared = try #require(entries.firstIndex(of: "prepare \(name)"))
            let ran = try #require(entries.firstIndex(of: "run \(name)"))
            let ended = try #require(entries.firstIndex(of: "end \(name)"))
            #expect(prepared < ran && ran < ended)
        }
        // Each is asked to stop only once those started after it have ended.
        let position = { (entry: String) in entries.firstIndex(of: entry) ?? -1 }
        #expect(position("stop b") > position("end c") && position("stop a") > position("end b"))
    }

    @Test func aServiceThatCannotPrepareStopsThoseAlreadyRunning() throws {
        let journal = Journal()
        let group = ServiceGroup([
            ServiceGroup.Member("a", Recorder("a", journal)),
            ServiceGroup.Member("b", Recorder("b", journal)),
            ServiceGroup.Member("broken", Recorder("broken", journal, failsToPrepare: true)),
            ServiceGroup.Member("never", Recorder("never", journal)),
        ])
        #expect(throws: Recorder.PrepareFailed.self) { try group.start() }
        let entries = journal.all
        #expect(entries.filter { $0.hasPrefix("end") } == ["end b", "end a"])
        #expect(!entries.contains("prepare never") && !entries.contains("run broken"))
        group.stop()  // nothing left to stop
        #expect(journal.all == entries)
    }

    @Test func stopIsIdempotentAndAStopRequestedBeforeRunIsHonoured() throws {
        let journal = Journal()
        let early = Recorder("early", journal)
        early.requestStop()
        let group = ServiceGroup([ServiceGroup.Member("early", early)])
        try group.start()
        group.stop()
        group.stop()
        let entries = journal.all
        #expect(entries.prefix(2) == ["stop early", "prepare early"])
        #expect(entries.filter { $0 == "stop early" }.count == 2, "once before the start, once by the first stop only")
        #expect(entries.filter { $0 != "stop early" } == ["prepare early", "run early", "end early"])
    }
}

@Suite struct DoorbellTests {
    @Test func aRingBeforeTheWaitIsKeptAndRingsCollapse() {
        let doorbell = Doorbell()
        for _ in 0..<100 { doorbell.ring() }
        #expect(doorbell.wait(until: .now()))
        #expect(!doorbell.wait(until: .now()), "a hundred rings while awake are one wake-up")
    }

    @Test func aWaitEndsAtItsDeadlineWhenNobodyRings() {
        let doorbell = Doorbell()
        #expect(!doorbell.wait(until: .now() + .milliseconds(1)))
    }

    @Test func aRingFromAnotherThreadWakesTheWaiter() {
        let doorbell = Doorbell()
        let woke = Atomic(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            woke.store(doorbell.wait(), ordering: .relaxed)
            done.signal()
        }
        doorbell.ring()
        done.wait()
        let rung = woke.load(ordering: .relaxed)
        #expect(rung)
    }
}
