import Testing
@testable import Daemon

/// How many event streams an open-file limit holds (the real limit, raised by a real
/// daemon, is `Tests/integration/test_open_files.py`'s).
@Suite struct OpenFileBudgetTests {
    @Test func aLimitThatHoldsEverySubscriberServesThemAll() {
        let budget = OpenFileBudget(configuredSubscribers: 50_000, openFiles: 131_072)
        #expect(budget.wanted == 50_000 + 1024 + 64)
        #expect(budget.subscribers == 50_000)
        #expect(budget.holdsConfiguredSubscribers)
        #expect(OpenFileBudget(configuredSubscribers: 50_000, openFiles: 51_088).holdsConfiguredSubscribers)
    }

    @Test func aLowerLimitServesWhatItHoldsBesideTheReserve() {
        let budget = OpenFileBudget(configuredSubscribers: 50_000, openFiles: 20_000)
        #expect(budget.apiConnections == 1024)
        #expect(budget.subscribers == 20_000 - 1088)
        #expect(!budget.holdsConfiguredSubscribers)
        #expect(OpenFileBudget(configuredSubscribers: 50_000, openFiles: 51_087).subscribers == 49_999)
    }

    /// Under a limit below the whole reserve, streams and API connections share what the
    /// other files leave, three to one.
    @Test func aLimitBelowTheReserveSharesWhatTheOtherFilesLeave() {
        let budget = OpenFileBudget(configuredSubscribers: 50_000, openFiles: 1024)
        #expect(budget.apiConnections == 240)
        #expect(budget.subscribers == 720)
        #expect(OpenFileBudget(configuredSubscribers: 10, openFiles: 1024).holdsConfiguredSubscribers)
        #expect(OpenFileBudget(configuredSubscribers: 10, openFiles: 64).subscribers == 0)
        #expect(OpenFileBudget(configuredSubscribers: 10, openFiles: 20).subscribers == 0)
    }

    /// The process's own limit: raised toward what is wanted, never lowered.
    @Test func raisingNeverLowersTheLimit() {
        let now = OpenFileBudget.raise(toward: 0)
        #expect(now > 0)
        #expect(OpenFileBudget.raise(toward: 16) == now)
    }
}
