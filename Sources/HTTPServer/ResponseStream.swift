import CMicroHTTPD
import Foundation
import Synchronization

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
/// single `send`, where a resume costs a wake-up, two epoll changes, a walk of the
/// library's suspended list and a copy. What the socket cannot take at once waits here
/// and is sent when it can (`WritableWatcher`). To end the stream, or when the peer is
/// gone, the connection is resumed and the library finishes or closes it.
public final class ResponseStream: Sendable {
    /// Everything the writers (any thread) and libmicrohttpd's thread share.
    private struct State: @unchecked Sendable {  // libmicrohttpd's connection handle; used under `state` only
        var chunks: [[UInt8]] = []
        var firstChunk = 0
        var offsetInFirstChunk = 0
        var queuedBytes = 0
        var finished = false
        var closed = false
        var suspended = false
        var connection: OpaquePointer?
        var closeHandlers: [@Sendable () -> Void] = []
        var drainHandler: (@Sendable () -> Void)?
        var aboveLowWater = false
        /// The connection's socket, when the body goes out chunked (else -1).
        var directSocket: Int32 = -1
        var watcher: WritableWatcher?
        /// Whether writes go straight to the socket.
        var isDirect = false
        /// Framed bytes the socket has not taken yet (direct mode), from `unsentOffset` on.
        var unsent: [UInt8] = []
        var unsentOffset = 0
        /// The socket refused a write (the peer is gone).
        var broken = false

        /// Bytes written and not yet handed to the connection.
        var bufferedBytes: Int { queuedBytes + unsent.count - unsentOffset }

        mutating func resumeIfSuspended() {
            if suspended, let connection {
                suspended = false
                MHD_resume_connection(connection)
            }
        }

        /// Appends a chunk's size line (hexadecimal, CRLF) to `unsent`.
        mutating func appendChunkSize(_ count: Int) {
            let digits = Array("0123456789abcdef".utf8)
            var shift = (Int.bitWidth - count.leadingZeroBitCount + 3) / 4 * 4
            repeat {
                shift -= 4
                unsent.append(digits[(count >> shift) & 0xF])
            } while shift > 0
            unsent.append(contentsOf: [13, 10])
        }

        /// Sends what the socket takes of `unsent` (direct mode); has `owner` called back
        /// when the socket takes more, ends the stream when finished, gives up when the peer
        /// is gone. Returns the drain handler when it should run (after the lock).
        mutating func sendUnsent(lowWaterBytes: Int, owner: ResponseStream) -> (@Sendable () -> Void)? {
            while unsentOffset < unsent.count {
                let sent = unsent.withUnsafeBytes { raw in
                    send(directSocket, raw.baseAddress! + unsentOffset, raw.count - unsentOffset,
                         Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                }
                if sent > 0 {
                    unsentOffset += sent
                } else if sent < 0 && errno == EINTR {
                    continue
                } else if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if unsent.count - unsentOffset > lowWaterBytes { aboveLowWater = true }
                    watcher?.watch(directSocket) { [weak owner] in owner?.sendWhenWritable() }
                    return nil
                } else {
                    broken = true
                    unsent = []
                    unsentOffset = 0
                    resumeIfSuspended()
                    return nil
                }
            }
            unsent = []
            unsentOffset = 0
            if finished { resumeIfSuspended() }
            guard aboveLowWater else { return nil }
            aboveLowWater = false
            return drainHandler
        }
    }

    private let state = Mutex(State())
    /// When queued bytes fall to this after being above it, the drain handler runs.
    public let lowWaterBytes: Int

    public init(lowWaterBytes: Int = 16 * 1024) {
        self.lowWaterBytes = lowWaterBytes
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

    /// Runs `handler` on the server's thread when the queue drains to `lowWaterBytes`.
    public func onDrain(_ handler: @escaping @Sendable () -> Void) { state.withLock { $0.drainHandler = handler } }

    /// Bytes queued and not yet handed to the connection.
    public var bufferedBytes: Int { state.withLock { $0.bufferedBytes } }

    /// Whether writes are still accepted (not finished, connection not gone).
    public var isOpen: Bool { state.withLock { !$0.finished && !$0.closed && !$0.broken } }

    /// Queues `bytes`; returns false (and drops them) once finished or closed.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool { write(contentsOf: [bytes]) }

    /// Queues several pieces at once (one lock, one resume or one `send`); returns false
    /// (and drops them) once finished or closed, or when more than `limit` bytes are
    /// already waiting.
    @discardableResult
    public func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int = .max) -> Bool {
        let (accepted, drained) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard !state.finished && !state.closed && !state.broken, state.bufferedBytes <= limit else {
                return (false, nil)
            }
            if state.isDirect {
                let count = pieces.reduce(0) { $0 + $1.count }
                guard count > 0 else { return (true, nil) }
                state.appendChunkSize(count)
                for bytes in pieces { state.unsent += bytes }
                state.unsent += [13, 10]
                return (true, state.sendUnsent(lowWaterBytes: lowWaterBytes, owner: self))
            }
            for bytes in pieces where !bytes.isEmpty {
                state.chunks.append(bytes)
                state.queuedBytes += bytes.count
            }
            if state.queuedBytes > lowWaterBytes { state.aboveLowWater = true }
            if state.queuedBytes > 0 { state.resumeIfSuspended() }
            return (true, nil)
        }
        drained?()
        return accepted
    }

    /// Ends the stream after what is queued has been sent.
    public func finish() {
        state.withLock { state in
            state.finished = true
            if !state.isDirect || state.unsent.count == state.unsentOffset { state.resumeIfSuspended() }
        }
    }

    /// Ends the stream at once, dropping what is not sent (the connection is closed).
    public func abort() {
        state.withLock { state in
            state.finished = true
            state.broken = true
            state.resumeIfSuspended()
        }
    }

    /// Called by the watcher when the socket takes bytes again.
    private func sendWhenWritable() {
        let drained = state.withLock { state in
            state.isDirect && !state.closed && !state.broken
                ? state.sendUnsent(lowWaterBytes: lowWaterBytes, owner: self) : nil
        }
        drained?()
    }

    // MARK: - Called on the libmicrohttpd thread

    /// Binds the stream to its connection; with a socket, writes go to it directly once
    /// the library has sent everything before them.
    func attach(_ connection: OpaquePointer, directSocket: Int32 = -1, watcher: WritableWatcher? = nil) {
        state.withLock { state in
            state.connection = connection
            state.directSocket = directSocket
            state.watcher = watcher
        }
    }

    /// Copies up to `capacity` queued bytes to `buffer`; returns the count, 0 after
    /// suspending the connection, or -1 at the end of the stream.
    func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
        let (result, drained) = state.withLock { state -> (Int, (@Sendable () -> Void)?) in
            if state.isDirect {
                // Resumed to end: cleanly if everything went out, else by closing.
                if state.broken || state.unsent.count > state.unsentOffset { return (-2, nil) }
                if state.finished { return (-1, nil) }
                state.suspended = true
                if let connection = state.connection { MHD_suspend_connection(connection) }
                return (0, nil)
            }
            var copied = 0
            while copied < capacity && state.firstChunk < state.chunks.count {
                let chunk = state.chunks[state.firstChunk]
                let count = min(capacity - copied, chunk.count - state.offsetInFirstChunk)
                chunk.withUnsafeBytes { source in
                    (buffer + copied).copyMemory(from: source.baseAddress! + state.offsetInFirstChunk, byteCount: count)
                }
                copied += count
                state.offsetInFirstChunk += count
                if state.offsetInFirstChunk == chunk.count {
                    state.firstChunk += 1
                    state.offsetInFirstChunk = 0
                }
            }
            if state.firstChunk == state.chunks.count || state.firstChunk > 64 {
                state.chunks.removeFirst(state.firstChunk)
                state.firstChunk = 0
            }
            state.queuedBytes -= copied
            var drained: (@Sendable () -> Void)?
            if state.aboveLowWater && state.queuedBytes <= lowWaterBytes {
                state.aboveLowWater = false
                drained = state.drainHandler
            }
            if copied > 0 { return (copied, drained) }
            if state.finished { return (-1, drained) }
            // Everything handed over so far has been sent: later writes may go direct.
            if state.directSocket >= 0 { state.isDirect = true }
            state.suspended = true
            if let connection = state.connection { MHD_suspend_connection(connection) }
            return (0, drained)
        }
        drained?()
        return result
    }

    /// The connection is gone (the response was released), or the stream was never sent:
    /// runs the close handlers.
    func connectionClosed() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            state.suspended = false
            state.chunks = []
            state.queuedBytes = 0
            state.unsent = []
            state.unsentOffset = 0
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
    /// suspended connection notices a close only when it next writes; this lets work
    /// meant for the client (reading its catch-up) be skipped once it has left.
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
