import CMicroHTTPD
import Foundation

/// Wakes the thread of a libmicrohttpd epoll daemon from outside: an eventfd of ours in the
/// daemon's own epoll set, edge-triggered, with a null data pointer, which the library's
/// loop passes over (`MHD_epoll`: "shutdown signal", `continue`) after waking.
///
/// Why it is needed: libmicrohttpd 0.9.75's `MHD_epoll` takes at most 128 events from one
/// `epoll_wait`, and when it gets exactly 128 it waits again, with the timeout it computed
/// before the first wait, before it serves any of them. If nothing else happens, those
/// connections wait (edge-triggered, they report nothing more) until another connection
/// stirs or the earliest connection's timeout: 128 subscribers handed over at once, their
/// whole heads already read by the sorter, would wait until their head deadline closed
/// them. A nudge ends that second wait; the accept loop sends one every
/// `ConnectionSorter.Limits.nudgeIntervalNanoseconds` while connections are open.
final class EpollDaemonNudge: Sendable {
    private let eventFD: Int32

    /// Joins the epoll set of `daemon`; nil for a daemon that waits in poll(2) (under TLS),
    /// whose loop has no such limit, or if no eventfd could be made.
    init?(daemon: OpaquePointer) {
        let epollFD = headway_mhd_epoll_fd(daemon)
        guard epollFD >= 0 else { return nil }
        eventFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard eventFD >= 0 else { return nil }
        var event = epoll_event()
        // Edge-triggered: each write reports once, so the library never has to read it.
        event.events = EPOLLIN.rawValue | EPOLLET.rawValue
        event.data.u64 = 0  // the null pointer the library skips
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, eventFD, &event) == 0 else {
            close(eventFD)
            return nil
        }
    }

    /// Closing the eventfd also takes it out of the daemon's epoll set, if that still exists.
    deinit { close(eventFD) }

    /// Wakes the daemon's thread if it is waiting; harmless if it is not.
    func nudge() {
        var one: UInt64 = 1
        if write(eventFD, &one, 8) < 0, errno == EAGAIN {
            // The counter is full (after 2^64 - 2 nudges): empty it, then nudge.
            var value: UInt64 = 0
            _ = read(eventFD, &value, 8)
            _ = write(eventFD, &one, 8)
        }
    }
}
