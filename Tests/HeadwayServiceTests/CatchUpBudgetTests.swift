import HeadwayCore
import Testing
@testable import HeadwayService

/// The bound on catch-up bytes held in memory: charges, holds, and the refusal log lines.
@Suite struct CatchUpBudgetTests {
    @Test func aCatchUpIsReadBelowTheLimitAndNotAtIt() {
        let budget = CatchUpBudget(limitBytes: 100)
        let first = budget.hold(CatchUpCharge(bytes: 99))
        #expect(budget.admits, "one byte below the limit")
        let second = budget.hold(CatchUpCharge(bytes: 1))
        #expect(!budget.admits, "at the limit")
        let third = budget.hold(CatchUpCharge(bytes: 50))
        #expect(budget.usedBytes == 150, "a catch-up read while there was room passes the limit once")
        withExtendedLifetime((first, second, third)) {}
    }

    @Test func aSharedCatchUpIsChargedOnceUntilItsLastHolderLetsGo() {
        let budget = CatchUpBudget(limitBytes: 1000)
        let charge = CatchUpCharge(bytes: 600)
        var holds: [CatchUpHold] = (0..<3).map { _ in budget.hold(charge) }
        #expect(budget.usedBytes == 600)
        holds.removeLast(2)
        #expect(budget.usedBytes == 600, "one stream still holds it")
        holds.removeAll()
        #expect(budget.usedBytes == 0)
        #expect(budget.admits)
        let again = budget.hold(charge)
        #expect(budget.usedBytes == 600, "held again (from the cache), charged again")
        withExtendedLifetime(again) {}
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
