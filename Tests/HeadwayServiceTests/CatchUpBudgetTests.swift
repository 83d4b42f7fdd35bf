import HeadwayCore
import Lifecycle
import Testing
@testable import EventStream

extension CatchUpBudget {
    /// A hold of `party` on `charge` (a catch-up built elsewhere), as a stream has once its
    /// catch-up is handed to it.
    func holding(_ charge: CatchUpCharge, by party: CatchUpParty = .address(1)) -> CatchUpHold {
        let hold = hold(for: party)
        #expect(hold.join(charge), "the budget refused \(charge.bytes) bytes to \(party)")
        return hold
    }
}

/// A stream as the budget sees it: stalled or not, and whether it was closed.
private final class FakeHolder: CatchUpHolder {
    let stalled: Bool
    let aborted = Locked(false)

    init(stalled: Bool) { self.stalled = stalled }

    func hasTakenNothing(forNanoseconds nanoseconds: UInt64) -> Bool {
        #expect(nanoseconds == CatchUpBudget.stalledNanoseconds)
        return stalled
    }

    func abort() { aborted.withLock { $0 = true } }

    var wasAborted: Bool { aborted.withLock { $0 } }
}

/// What a catch-up's contents are in the budget's eyes: something it keeps alive while no
/// stream holds it, whose end a test can see.
private final class Contents: Sendable {}

/// The rules of the catch-up budget, without sockets: bytes reserved before a catch-up is
/// built and never past the limit, shared catch-ups counted once, a fair share per client
/// with a floor for a client that holds nothing, idle catch-ups kept while there is room,
/// and the refusal log lines.
@Suite struct CatchUpBudgetTests {
    @Test func bytesAreReservedBeforeTheyAreBuiltAndNeverPassTheLimit() {
        let budget = CatchUpBudget(limitBytes: 8000)
        var first: CatchUpHold? = budget.hold(for: .address(1))
        #expect(first?.reserve(5000) == true, "a client's first catch-up may be larger than its share")
        var second: CatchUpHold? = budget.hold(for: .address(2))
        #expect(second?.reserve(3001) == false, "one byte past the limit")
        #expect(second?.reserve(3000) == true)
        #expect(budget.usedBytes == 8000)
        #expect(!budget.hold(for: .address(3)).reserve(1))
        #expect(budget.peakBytes == 8000, "never over the limit, not even for a moment")
        first = nil
        second = nil
        #expect(budget.usedBytes == 0, "reservations given back with their holds")
    }

    @Test func aHoldSettlesWhatItBuiltAndGivesBackTheRestOfItsReservation() {
        let budget = CatchUpBudget(limitBytes: 8000)
        var hold: CatchUpHold? = budget.hold(for: .address(1))
        #expect(hold?.reserve(700) == true)
        hold?.settle(CatchUpCharge(bytes: 600))
        #expect(budget.usedBytes == 600)
        #expect(budget.bytes(of: .address(1)) == 600)
        #expect(hold?.reserve(100) == true, "its own bytes next (a stream's copy of a block)")
        hold?.settle(CatchUpCharge(bytes: 100))
        #expect(budget.usedBytes == 700)
        hold = nil
        #expect(budget.usedBytes == 0)
        #expect(budget.bytes(of: .address(1)) == 0)
    }

    /// A client holds at most an eighth of the budget — except for the one catch-up it
    /// asks for while it holds nothing, which may be larger.
    @Test func aClientHoldsAtMostItsShareButForTheCatchUpOfItsFloor() {
        let budget = CatchUpBudget(limitBytes: 8000)
        #expect(budget.shareBytes == 1000)
        let big = budget.hold(for: .address(1))
        #expect(big.reserve(3000), "its floor")
        let more = budget.hold(for: .address(1))
        #expect(!more.mayTakeMore, "over its share: not even read")
        #expect(!more.reserve(1))

        let small = budget.hold(for: .address(2))
        #expect(small.reserve(500))
        let second = budget.hold(for: .address(2))
        #expect(second.mayTakeMore)
        #expect(second.reserve(500), "up to its share")
        #expect(!budget.hold(for: .address(2)).reserve(1))
        withExtendedLifetime((big, more, small, second)) {}
    }

    @Test func twoStreamsOfOneClientArrivingTogetherDoNotBothGetItsFloor() {
        let budget = CatchUpBudget(limitBytes: 8000)
        var first: CatchUpHold? = budget.hold(for: .address(1))
        var second: CatchUpHold? = budget.hold(for: .address(1))
        #expect(second?.reserve(1001) == false, "the first one, still empty, holds the floor")
        #expect(first?.reserve(5000) == true)
        first = nil
        #expect(second?.reserve(1001) == false, "whether a hold is a floor is decided when it begins")
        #expect(second?.reserve(1000) == true, "its share")
        second = nil
        #expect(budget.hold(for: .address(1)).reserve(5000), "holding nothing again: its floor again")
    }

    /// The attack of issue 45 in numbers: one client's streams that read nothing hold its
    /// floor and its share, never the budget, and a client that holds nothing still gets
    /// its catch-up — by address, or by token when one is presented (a proxy's clients all
    /// have its address).
    @Test func aClientThatHoldsNothingGetsItsCatchUpWhileAnotherHoldsAllItMay() {
        let budget = CatchUpBudget(limitBytes: 8000)
        var attacker: [CatchUpHold] = []
        for _ in 0..<20 {
            let hold = budget.hold(for: .address(1))
            if hold.reserve(900) { attacker.append(hold) }
        }
        #expect(attacker.count == 1, "its floor, then nothing past its share")
        #expect(budget.usedBytes == 900)
        let honest = budget.hold(for: .address(2))
        #expect(honest.reserve(5000))
        let behindTheSameProxy = budget.hold(for: CatchUpParty(client: 1, tokenID: "dashboard"))
        #expect(behindTheSameProxy.reserve(2000), "a token is a party of its own")
        withExtendedLifetime((attacker, honest, behindTheSameProxy)) {}
    }

    /// Clients at their floors from many addresses can fill the budget; a client that
    /// holds nothing and finds no room has the streams that hold catch-ups their peers
    /// have not taken for a while closed, so its next try finds the room. Streams that
    /// read and catch-ups being built are left alone; a client that holds something
    /// already closes nothing.
    @Test func aClientThatHoldsNothingAndFindsNoRoomHasStalledHoldersClosed() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let stalled = [FakeHolder(stalled: true), FakeHolder(stalled: true)]
        let reading = FakeHolder(stalled: false)
        let otherStalled = FakeHolder(stalled: true)
        var holds: [CatchUpHold] = []
        for (address, holder) in [(1, stalled[0]), (2, stalled[1]), (3, reading)] {
            let hold = budget.hold(for: .address(address))
            #expect(hold.reserve(2000))
            hold.settle(CatchUpCharge(bytes: 2000))
            hold.isFor(holder)
            holds.append(hold)
        }
        let building = budget.hold(for: .address(4))
        #expect(building.reserve(1000))
        let buildingFor = FakeHolder(stalled: true)
        building.isFor(buildingFor)
        let ownHold = budget.hold(for: .address(9))
        #expect(ownHold.reserve(500))
        ownHold.settle(CatchUpCharge(bytes: 500))
        ownHold.isFor(otherStalled)
        #expect(budget.usedBytes == 7500)

        let notAFloor = budget.hold(for: .address(9))
        #expect(!notAFloor.reserve(600))
        #expect(!stalled[0].wasAborted, "a client over its share closes nothing")

        let honest = budget.hold(for: .address(5))
        #expect(!honest.reserve(1000), "no room yet")
        #expect(stalled.allSatisfy { $0.wasAborted })
        #expect(otherStalled.wasAborted)
        #expect(!reading.wasAborted && !buildingFor.wasAborted)
        holds.removeFirst(2)  // what the broker does once the closed streams are gone
        #expect(budget.hold(for: .address(5)).reserve(1000), "its next try")
        withExtendedLifetime((holds, building, ownHold, notAFloor, honest)) {}
    }

    @Test func aClientThatHoldsNothingFindingTheBudgetFullBeforeReadingHasStalledHoldersClosed() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let stalled = FakeHolder(stalled: true)
        let hold = budget.hold(for: .address(1))
        #expect(hold.reserve(8000))
        hold.settle(CatchUpCharge(bytes: 8000))
        hold.isFor(stalled)
        #expect(!budget.hold(for: .address(2)).mayTakeMore)
        #expect(stalled.wasAborted)
        withExtendedLifetime(hold) {}
    }

    @Test func aSharedCatchUpIsCountedOnceAndOncePerClient() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let charge = CatchUpCharge(bytes: 3000)
        var holds = [budget.holding(charge), budget.holding(charge)]
        #expect(budget.usedBytes == 3000)
        #expect(budget.bytes(of: .address(1)) == 3000, "one client's two streams: counted once")
        holds.append(budget.hold(for: .address(1)))
        #expect(holds[2].join(charge), "free for a client that holds it already, even past its share")
        holds.append(budget.holding(charge, by: .address(2)))
        #expect(budget.usedBytes == 3000, "another client's stream: no more bytes")
        #expect(budget.bytes(of: .address(2)) == 3000, "but it holds them too")
        holds.removeFirst(3)
        #expect(budget.usedBytes == 3000, "one stream still holds it")
        #expect(budget.bytes(of: .address(1)) == 0)
        holds.removeAll()
        #expect(budget.usedBytes == 0, "nothing keeps it: let go")
    }

    @Test func joiningACatchUpAnotherClientHoldsCountsAgainstTheShare() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let charge = CatchUpCharge(bytes: 3000)
        let owner = budget.holding(charge, by: .address(1))
        let small = budget.hold(for: .address(2))
        #expect(small.reserve(100))
        #expect(!budget.hold(for: .address(2)).join(charge), "past its share, though no new bytes")
        withExtendedLifetime((owner, small)) {}
    }

    /// A catch-up no stream holds stays counted, for later streams to share, until a held
    /// one needs its room (the oldest first); then it is let go.
    @Test func anIdleCatchUpIsKeptUntilAHeldOneNeedsItsRoom() {
        let budget = CatchUpBudget(limitBytes: 8000)
        weak var firstContents: Contents?
        var first: CatchUpCharge? = {
            let contents = Contents()
            firstContents = contents
            return CatchUpCharge(bytes: 3000, contents: contents)
        }()
        let second = CatchUpCharge(bytes: 3000, contents: Contents())
        _ = budget.holding(first!)
        _ = budget.holding(second, by: .address(2))
        first = nil
        #expect(budget.usedBytes == 6000, "both idle, both kept")
        #expect(firstContents != nil)
        let again = budget.holding(second, by: .address(3))
        #expect(budget.usedBytes == 6000, "an idle one held again costs nothing new")

        let newcomer = budget.hold(for: .address(4))
        #expect(newcomer.mayTakeMore, "idle bytes are room")
        #expect(newcomer.reserve(4000))
        #expect(budget.usedBytes == 7000)
        #expect(firstContents == nil, "the idle one was let go for it")
        #expect(!budget.hold(for: .address(5)).reserve(1001), "the held ones are not")
        withExtendedLifetime((again, newcomer)) {}
    }

    @Test func aRetiredCatchUpIsLetGoOnceNoStreamHoldsIt() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let idle = CatchUpCharge(bytes: 1000, contents: Contents())
        _ = budget.holding(idle)
        #expect(budget.usedBytes == 1000)
        budget.retire(idle)
        #expect(budget.usedBytes == 0, "idle: let go at once")

        let held = CatchUpCharge(bytes: 2000, contents: Contents())
        var hold: CatchUpHold? = budget.holding(held)
        budget.retire(held)
        #expect(budget.usedBytes == 2000, "still held")
        #expect(hold != nil)
        hold = nil
        #expect(budget.usedBytes == 0)
    }

    @Test func aCatchUpLetGoWhileIdleIsCountedAgainWhenHeldAgain() {
        let budget = CatchUpBudget(limitBytes: 8000)
        let charge = CatchUpCharge(bytes: 3000, contents: Contents())
        _ = budget.holding(charge)
        budget.retire(charge)
        #expect(budget.usedBytes == 0)
        let hold = budget.holding(charge, by: .address(2))
        #expect(budget.usedBytes == 3000, "held again (it was still in a stream's hands), charged again")
        withExtendedLifetime(hold) {}
    }

    @Test func refusalsAreLoggedAsOneCountPerInterval() {
        let budget = CatchUpBudget(limitBytes: 1)
        #expect(budget.countRefusal(now: 10_000) == 1, "the first refusal is logged at once")
        #expect(budget.countRefusal(now: 10_500) == nil)
        #expect(budget.countRefusal(now: 10_999) == nil)
        #expect(budget.countRefusal(now: 11_000) == 3, "a second later, the count since the last line")
        #expect(budget.countRefusal(now: 11_001) == nil)
        #expect(budget.claimFlush(), "the refusal not logged is promised a later line")
        #expect(!budget.claimFlush(), "once")
        #expect(budget.countRefusal(now: 11_500) == nil)
        #expect(budget.flush(now: 12_001) == 2, "the end of a burst is logged too")
        #expect(budget.flush(now: 12_002) == nil)
        #expect(!budget.claimFlush(), "nothing left to log")
    }
}
