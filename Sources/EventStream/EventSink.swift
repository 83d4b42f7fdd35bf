import HTTPServer

/// Where a subscriber's frames go: the few calls the event broker makes on a response
/// stream, so that subscribers can be tested without sockets. Every call may come from
/// any thread.
package protocol EventSink: AnyObject, Sendable {
    /// Writes several pieces at once; returns false (and drops them) when the sink is no
    /// longer open, or when more than `limit` bytes (shared ones included) are already
    /// waiting.
    @discardableResult
    func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int) -> Bool

    /// Writes immutable pieces other sinks may hold too (a catch-up): referenced, not
    /// copied, and not counted in `ownedBytes`.
    @discardableResult
    func writeShared(contentsOf pieces: [[UInt8]]) -> Bool

    /// Bytes written and not yet taken by the peer, shared ones included.
    var bufferedBytes: Int { get }

    /// Bytes written and not yet taken by the peer, less those written shared.
    var ownedBytes: Int { get }

    /// Bytes written shared and not yet taken by the peer.
    var sharedBytes: Int { get }

    /// Whether writes are still accepted.
    var isOpen: Bool { get }

    /// Whether it was closed because its peer took nothing for the stall timeout.
    var hasStalled: Bool { get }

    /// Ends at once, dropping what is not sent (a subscriber cut off for being too slow).
    func abort()

    /// Ends after what is written has been sent.
    func finish()

    /// Adds `handler`, run once when the peer is gone (at once, if it is gone already).
    func onClose(_ handler: @escaping @Sendable () -> Void)

    /// Sets `handler`, run when what waits in the sink falls to `lowWaterBytes` after
    /// being above, and when the last byte written shared has been taken.
    func onDrain(atOrBelow lowWaterBytes: Int, _ handler: @escaping @Sendable () -> Void)
}

extension ResponseStream: EventSink {}
