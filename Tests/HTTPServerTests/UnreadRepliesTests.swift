import Lifecycle
import Testing
@testable import HTTPServer

/// `--max-unsent-reply-bytes`: replies that wait for their clients to take them are bounded
/// in all and per client, and a client holding none still reads.
@Suite struct UnreadReplyBudgetTests {
    @Test func aClientAtItsShareStartsNoReadOthersStillDo() {
        var budget = UnreadReplyBudget(limitBytes: 400)
        #expect(budget.clientShareBytes == 100 && budget.reserveBytes == 100)
        #expect(budget.admits(1))
        budget.add(60, client: 1)
        #expect(budget.admits(1), "under its share")
        budget.add(40, client: 1)
        #expect(!budget.admits(1), "at its share")
        #expect(budget.admits(2))
        budget.remove(40, client: 1)
        #expect(budget.admits(1))
        #expect(budget.bytes(of: 1) == 60 && budget.totalBytes == 60)
    }

    @Test func pastTheLimitOnlyClientsHoldingNothingReadUpToTheReserve() {
        var budget = UnreadReplyBudget(limitBytes: 400)
        for client in 1...4 { budget.add(99, client: client) }  // 396: every client under its share
        #expect(budget.admits(1), "396 < 400")
        budget.add(10, client: 5)
        #expect(budget.totalBytes == 406)
        #expect(!budget.admits(1) && !budget.admits(5), "past the limit a client holding some is refused")
        #expect(budget.admits(6), "a client holding nothing reads on, within the reserve")
        budget.add(95, client: 6)
        #expect(budget.totalBytes == 501)
        #expect(!budget.admits(7), "the reserve is spent too")
        for client in 1...6 { budget.remove(budget.bytes(of: client), client: client) }
        #expect(budget.totalBytes == 0 && budget.bytesByClient.isEmpty, "nothing is kept for clients holding nothing")
    }
}

/// `UnreadReplies`: a reply counts whole while the library holds it, then as what the
/// kernel says its client has not acknowledged, until that is nothing or the socket closes.
@Suite struct UnreadRepliesTests {
    /// The kernel's count of unacknowledged bytes by socket, as the test sets it.
    private final class Kernel: Sendable {
        let counts = Locked<[Int32: Int]>([:])
        func set(_ fd: Int32, _ bytes: Int) { counts.withLock { $0[fd] = bytes } }
        func count(_ fd: Int32) -> Int { counts.withLock { $0[fd] ?? 0 } }
    }

    @Test func aReplyCountsUntilItsClientHasIt() {
        let kernel = Kernel()
        let replies = UnreadReplies(limitBytes: 400, unacknowledged: { kernel.count($0) })
        replies.queued(150, on: 7, client: 1)
        #expect(replies.totalBytes == 150, "held by the library: counted whole")
        #expect(!replies.admits(1).admitted, "past its share (100)")
        #expect(replies.admits(2).admitted)
        kernel.set(7, 120)
        replies.written(on: 7)
        #expect(replies.totalBytes == 120, "written: what the client has not acknowledged")
        kernel.set(7, 30)
        #expect(replies.admits(1) == (true, 30, 30), "counted again before a refusal")
        kernel.set(7, 0)
        #expect(replies.totalBytes == 0)
    }

    @Test func pipelinedRepliesAddUpAndACloseForgetsThem() {
        let kernel = Kernel()
        let replies = UnreadReplies(limitBytes: 400, unacknowledged: { kernel.count($0) })
        kernel.set(7, 80)
        replies.queued(80, on: 7, client: 1)
        replies.written(on: 7)
        replies.queued(50, on: 7, client: 1)
        #expect(replies.totalBytes == 130, "the next reply counts on the one before, still unacknowledged")
        #expect(!replies.admits(1).admitted)
        replies.queued(10, on: 8, client: 2)
        replies.forget(7)
        #expect(replies.totalBytes == 10)
        #expect(replies.admits(1) == (true, 0, 10))
        replies.written(on: 7)
        #expect(replies.totalBytes == 10, "a socket forgotten stays forgotten")
    }

    @Test func aReservationHoldsItsBytesUntilReleasedOnceAndShrinksToTheReplysSize() {
        let replies = UnreadReplies(limitBytes: 400, unacknowledged: { _ in 0 })
        let first = replies.reservation(300, client: 1)
        #expect(first.reservation != nil, "a client holding nothing is admitted")
        #expect(replies.totalBytes == 300)
        let second = replies.reservation(10, client: 1)
        #expect(second.reservation == nil && second.clientBytes == 300 && second.totalBytes == 300,
                "past its share (100): refused, holding nothing more")
        first.reservation?.shrink(to: 60)
        #expect(replies.totalBytes == 60 && first.reservation?.bytes == 60)
        first.reservation?.shrink(to: 90)
        #expect(replies.totalBytes == 60, "it never grows")
        first.reservation?.release()
        first.reservation?.release()
        #expect(replies.totalBytes == 0, "released once")
        first.reservation?.shrink(to: 0)
        #expect(replies.admits(1) == (true, 0, 0))
    }
}
