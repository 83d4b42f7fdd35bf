import Lifecycle
import CMicroHTTPD
import Foundation

/// A response body written over time from any thread (an event stream).
///
/// It starts out the libmicrohttpd way: bytes are queued here and handed over when the
/// library asks; while nothing is queued the connection is suspended, so an idle stream
/// costs no CPU, and a write resumes it (libmicrohttpd's pattern: under the lock, copy queued
/// bytes out; if the stream is finished, end it; otherwise mark it suspended, suspend the
/// connection and return 0; a writer resumes only a connection marked suspended).
///
/// Once the library has sent the headers and everything queued (it asks for more only
/// then) and the body is chunked, the stream is *direct*: the connection stays suspended
/// and each write goes straight to the socket as one chunk from the writer's thread — a
/// single `sendmsg`, where a resume costs a wake-up, two epoll changes, a walk of the
/// library's suspended list and a copy. What the socket cannot take at once waits here
/// as references to the writers' arrays (`UnsentBytes`: a catch-up written to many
/// streams is held once) and is sent when it can (`WritableWatcher`, which also closes a
/// stream whose socket has taken nothing for the stall timeout, and one whose peer hangs
/// up — at once, not at its next write). To end the stream, or when the peer is gone, the
/// connection is resumed and the library finishes or closes it.
public final class ResponseStream: Sendable {
    /// Everything the writers (any thread) and libmicrohttpd's thread share.
    private struct State: @unchecked Sendable {  // libmicrohttpd's connection handle; used under `state` only
        /// Bytes written and not yet handed over: to the library (before the stream is
        /// direct, unframed) or to the socket (direct, framed as chunks).
        var unsent = UnsentBytes()
        var finished = false
        var closed = false
        var suspended = false
        var connection: OpaquePointer?
        var closeHandlers: [@Sendable () -> Void] = []
        var drainHandler: (@Sendable () -> Void)?
        /// When unsent bytes fall to this after being above it, the drain handler runs.
        var lowWaterBytes: Int
        var aboveLowWater = false
        /// Shared bytes wait: the drain handler runs when the last of them is sent.
        var holdsShared = false
        /// The connection's socket, when the body goes out chunked (else -1).
        var directSocket: Int32 = -1
        var watcher: WritableWatcher?
        /// The loop that drives the connection's daemon, if one does: a resume must wake it
        /// (in libmicrohttpd's external-loop mode a resume alone wakes no one).
        var loop: RequestDaemonLoop?
        /// Whether writes go straight to the socket.
        var isDirect = false
        /// The socket refused a write (the peer is gone), or the stream was aborted.
        var broken = false
        /// Direct mode: bytes wait for the socket to take them.
        var isWaiting = false
        /// Direct mode: when the socket last took bytes, or when bytes began to wait
        /// (the watcher's monotonic clock, in nanoseconds).
        var lastProgress: UInt64 = 0
        /// Closed because the socket took nothing for the stall timeout.
        var stalled = false

        mutating func resumeIfSuspended() {
            if suspended, let connection {
                suspended = false
                MHD_resume_connection(connection)
                loop?.wake()
            }
        }

        /// Drops what is unsent and has the connection closed (resumed, the library reads
        /// the end of the stream as an error).
        mutating func breakOff() {
            broken = true
            finished = true
            isWaiting = false
            unsent.removeAll()
            resumeIfSuspended()
        }

        /// Sends what the socket takes of `unsent` (direct mode); has `owner` called back
        /// when the socket takes more, ends the stream when finished, gives up when the peer
        /// is gone. Returns the drain handler when it should run (after the lock).
        mutating func sendUnsent(owner: ResponseStream) -> (@Sendable () -> Void)? {
            var progressed = false
            while !unsent.isEmpty {
                let (sent, failure) = unsent.withIOVectors { send($0) }
                if sent > 0 {
                    unsent.removeFirst(sent)
                    progressed = true
                } else if sent < 0 && failure == EINTR {
                    continue
                } else if sent < 0 && (failure == EAGAIN || failure == EWOULDBLOCK) {
                    if unsent.count > lowWaterBytes { aboveLowWater = true }
                    if progressed || !isWaiting, let watcher {
                        lastProgress = watcher.now()
                        isWaiting = true
                    }
                    watcher?.watch(directSocket, owner, writable: true)
                    return dueDrainHandler()
                } else {
                    breakOff()
                    return nil
                }
            }
            isWaiting = false
            if finished { resumeIfSuspended() }
            return dueDrainHandler()
        }

        /// Direct mode with nothing waiting: sends `pieces` as one chunk straight from their
        /// arrays, and only what the socket does not take waits (`sendUnsent`). A socket
        /// with room, the common case, so costs one `sendmsg` and no allocation.
        mutating func sendChunk(_ pieces: [[UInt8]], shared: Bool, owner: ResponseStream) -> (@Sendable () -> Void)? {
            let size = pieces.reduce(0) { $0 + $1.count }
            guard size > 0 else { return nil }
            var sent = -1
            if pieces.count <= UnsentBytes.maximumVectors - 2 {
                var chunkBytes = 0
                let failure: Int32
                (sent, failure) = UnsentBytes.withChunkVectors(pieces, size: size) { vectors in
                    chunkBytes = vectors.reduce(0) { $0 + $1.iov_len }
                    return send(vectors)
                }
                if sent == chunkBytes { return dueDrainHandler() }
                if sent < 0 && failure != EINTR && failure != EAGAIN && failure != EWOULDBLOCK {
                    breakOff()
                    return nil
                }
            }
            unsent.appendChunk(pieces, shared: shared)
            if sent > 0 { unsent.removeFirst(sent) }
            return sendUnsent(owner: owner)
        }

        /// One `sendmsg` of `vectors` to the socket, without blocking: the bytes it took, or
        /// -1 and its `errno` (read at once, before anything else may change it).
        func send(_ vectors: UnsafeMutableBufferPointer<iovec>) -> (sent: Int, failure: Int32) {
            var message = msghdr()
            message.msg_iov = vectors.baseAddress
            message.msg_iovlen = vectors.count
            let sent = sendmsg(directSocket, &message, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            return (sent, sent < 0 ? errno : 0)
        }

        /// The drain handler, when it is due: unsent bytes fell to the low water after
        /// being above it, or the last shared byte has been sent.
        mutating func dueDrainHandler() -> (@Sendable () -> Void)? {
            let belowLowWater = aboveLowWater && unsent.count <= lowWaterBytes
            let sharedSent = holdsShared && unsent.sharedCount == 0
            guard belowLowWater || sharedSent else { return nil }
            if belowLowWater { aboveLowWater = false }
            if sharedSent { holdsShared = false }
            return drainHandler
        }
    }

    /// Shared by the writers (the broker's thread, a catch-up's) and libmicrohttpd's or the watcher's thread.
    private let state: Locked<State>

    public init(lowWaterBytes: Int = 16 * 1024) {
        state = Locked(State(lowWaterBytes: lowWaterBytes))
    }

    /// Adds `handler`, run once on the server's thread when the connection is gone (at
    /// once, if it is gone already).
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let alreadyClosed = state.withLock { state -> Bool in
            if !state.closed { state.closeHandlers.append(handler) }
            return state.closed
        }
        if alreadyClosed { handler() }
    }

    /// Runs `handler` when unsent bytes fall to `lowWaterBytes` after being above, and when
    /// the last byte written shared has been sent.
    public func onDrain(atOrBelow lowWaterBytes: Int, _ handler: @escaping @Sendable () -> Void) {
        state.withLock {
            $0.lowWaterBytes = lowWaterBytes
            $0.drainHandler = handler
        }
    }

    /// Bytes written and not yet handed to the connection, shared ones included.
    public var bufferedBytes: Int { state.withLock { $0.unsent.count } }

    /// Bytes written and not yet handed to the connection that this stream owns: all but
    /// those written with `writeShared` (which it only references).
    public var ownedBytes: Int { state.withLock { $0.unsent.ownedCount } }

    /// Bytes written with `writeShared` and not yet handed to the connection.
    public var sharedBytes: Int { state.withLock { $0.unsent.sharedCount } }

    /// Whether writes are still accepted (not finished, connection not gone).
    public var isOpen: Bool { state.withLock { !$0.finished && !$0.closed && !$0.broken } }

    /// Whether the stream was closed because its socket took nothing for the stall timeout.
    public var hasStalled: Bool { state.withLock { $0.stalled } }

    /// Whether bytes have waited `nanoseconds` or more without the socket taking any
    /// (known for a direct stream only: false for any other).
    public func hasTakenNothing(forNanoseconds nanoseconds: UInt64) -> Bool {
        state.withLock { state in
            guard state.isWaiting, !state.closed, !state.broken, let watcher = state.watcher else { return false }
            let now = watcher.now()
            return now >= state.lastProgress && now - state.lastProgress >= nanoseconds
        }
    }

    /// Queues `bytes`; returns false (and drops them) once finished or closed.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool { write(contentsOf: [bytes]) }

    /// Queues several pieces at once (one lock, one resume or one `send`); returns false
    /// (and drops them) once finished or closed, or when more than `limit` bytes (shared
    /// ones included) are already waiting. The pieces are referenced, not copied.
    @discardableResult
    public func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int = .max) -> Bool {
        append(pieces, unlessMoreThan: limit, shared: false)
    }

    /// Queues immutable pieces that other streams may send too (a catch-up read once for
    /// several subscribers): referenced, never copied, and not counted in `ownedBytes`.
    /// Returns false (and drops them) once finished or closed.
    @discardableResult
    public func writeShared(contentsOf pieces: [[UInt8]]) -> Bool {
        append(pieces, unlessMoreThan: .max, shared: true)
    }

    private func append(_ pieces: [[UInt8]], unlessMoreThan limit: Int, shared: Bool) -> Bool {
        let (accepted, drained) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard !state.finished && !state.closed && !state.broken, state.unsent.count <= limit else {
                return (false, nil)
            }
            if shared && pieces.contains(where: { !$0.isEmpty }) { state.holdsShared = true }
            if state.isDirect {
                if state.unsent.isEmpty { return (true, state.sendChunk(pieces, shared: shared, owner: self)) }
                state.unsent.appendChunk(pieces, shared: shared)
                return (true, state.sendUnsent(owner: self))
            }
            for piece in pieces { state.unsent.append(piece, shared: shared) }
            if state.unsent.count > state.lowWaterBytes { state.aboveLowWater = true }
            if !state.unsent.isEmpty { state.resumeIfSuspended() }
            return (true, nil)
        }
        drained?()
        return accepted
    }

    /// Ends the stream after what is queued has been sent.
    public func finish() {
        state.withLock { state in
            state.finished = true
            if !state.isDirect || state.unsent.isEmpty { state.resumeIfSuspended() }
        }
    }

    /// Ends the stream at once, dropping what is not sent (the connection is closed).
    public func abort() {
        state.withLock { $0.breakOff() }
    }

    /// Called by the watcher when the socket takes bytes again: sends what waits, and
    /// watches for the peer's hang-up again once nothing does.
    func sendWhenWritable() {
        let drained = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.isDirect && !state.closed && !state.broken else { return nil }
            let drained = state.sendUnsent(owner: self)
            if !state.broken && !state.isWaiting { state.watcher?.watch(state.directSocket, self, writable: false) }
            return drained
        }
        drained?()
    }

    /// Called by the watcher with the socket's ready `events` (`epoll`'s): a peer that hung
    /// up (or a socket that failed) closes the stream at once, dropping what waits; a
    /// socket that takes bytes again gets them.
    func socketIsReady(_ events: UInt32) {
        let peerGone = events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
        guard peerGone else { return sendWhenWritable() }
        state.withLock { state in
            guard state.isDirect && !state.closed && !state.broken else { return }
            state.breakOff()
        }
    }

    /// Closes the stream (as `abort`) if bytes have waited `timeout` nanoseconds or more
    /// at `now` without the socket taking any; returns whether it did.
    @discardableResult
    func closeIfStalled(now: UInt64, timeout: UInt64) -> Bool {
        state.withLock { state in
            guard state.isWaiting, !state.closed, !state.broken,
                  now >= state.lastProgress, now - state.lastProgress >= timeout else { return false }
            state.stalled = true
            state.breakOff()
            return true
        }
    }

    // MARK: - Called on the libmicrohttpd thread

    /// Binds the stream to its connection (nil in tests without a library); with a
    /// socket, writes go to it directly once the library has sent everything before them.
    func attach(_ connection: OpaquePointer?, directSocket: Int32 = -1, watcher: WritableWatcher? = nil,
                loop: RequestDaemonLoop? = nil) {
        state.withLock { state in
            state.connection = connection
            state.directSocket = directSocket
            state.watcher = watcher
            state.loop = loop
        }
    }

    /// Copies up to `capacity` queued bytes to `buffer`; returns the count, 0 after
    /// suspending the connection, or -1 at the end of the stream.
    func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
        let (result, drained, loop) = state.withLock { state -> (Int, (@Sendable () -> Void)?, RequestDaemonLoop?) in
            if state.isDirect {
                // Resumed to end: cleanly if everything went out, else by closing.
                if state.broken || !state.unsent.isEmpty { return (-2, nil, state.loop) }
                if state.finished { return (-1, nil, state.loop) }
                state.suspended = true
                if let connection = state.connection { MHD_suspend_connection(connection) }
                return (0, nil, state.loop)
            }
            if state.broken { return (-2, nil, state.loop) }
            let copied = state.unsent.copy(into: buffer, capacity: capacity)
            let drained = state.dueDrainHandler()
            if copied > 0 { return (copied, drained, state.loop) }
            if state.finished { return (-1, drained, state.loop) }
            // Everything handed over so far has been sent: later writes may go direct, and
            // the peer's hang-up is watched for from now on.
            if state.directSocket >= 0 {
                state.isDirect = true
                state.watcher?.watch(state.directSocket, self, writable: false)
            }
            state.suspended = true
            if let connection = state.connection { MHD_suspend_connection(connection) }
            return (0, drained, state.loop)
        }
        // A block handed to the library, or the end: the library has sending to do, which
        // the loop driving its daemon must not sleep through.
        if result != 0 { loop?.noteProgress() }
        drained?()
        return result
    }

    /// The connection is gone (the response was released), or the stream was never sent:
    /// runs the close handlers.
    func connectionClosed() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            state.suspended = false
            state.isWaiting = false
            state.unsent.removeAll()
            if state.isDirect { state.watcher?.forget(state.directSocket) }
            defer { state.closeHandlers = [] }
            state.drainHandler = nil
            return state.closeHandlers
        }
        handlers.forEach { $0() }
    }
}

let streamReaderCallback: MHD_ContentReaderCallback = { context, _, buffer, capacity in
    guard let context, let buffer else { return -2 }
    let stream = Unmanaged<ResponseStream>.fromOpaque(context).takeUnretainedValue()
    return stream.read(into: buffer, capacity: capacity)
}

let streamFreeCallback: MHD_ContentReaderFreeCallback = { context in
    guard let context else { return }
    let stream = Unmanaged<ResponseStream>.fromOpaque(context).takeRetainedValue()
    stream.connectionClosed()
}

// MARK: - Whether the peer is still there

extension ResponseStream {
    /// Whether the client is still there: the stream is open and, when its socket is
    /// known, the peer has not closed it (a peek at the socket finds no end of file). A
    /// stream not yet direct notices a close only when it next writes (a direct one at
    /// once, through the watcher); this lets work meant for the client (reading its
    /// catch-up) be skipped once it has left.
    public var isPeerConnected: Bool {
        state.withLock { state in
            guard !state.finished && !state.closed && !state.broken else { return false }
            guard state.directSocket >= 0 else { return true }
            var byte: UInt8 = 0
            let peeked = recv(state.directSocket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
            if peeked > 0 { return true }
            if peeked == 0 { return false }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
        }
    }
}
