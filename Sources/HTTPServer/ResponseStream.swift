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
/// single `send`, where a resume costs a wake-up, two epoll changes, a walk of the
/// library's suspended list and a copy. What the socket cannot take at once waits here
/// and is sent when it can (`WritableWatcher`). To end the stream, or when the peer is
/// gone, the connection is resumed and the library finishes or closes it.
public final class ResponseStream: @unchecked Sendable {
    private let lock = NSLock()
    private var chunks: [[UInt8]] = []
    private var firstChunk = 0
    private var offsetInFirstChunk = 0
    private var queuedBytes = 0
    private var finished = false
    private var closed = false
    private var suspended = false
    private var connection: OpaquePointer?
    private var closeHandlers: [@Sendable () -> Void] = []
    private var drainHandler: (@Sendable () -> Void)?
    private var aboveLowWater = false
    /// The connection's socket, when the body goes out chunked (else -1).
    private var directSocket: Int32 = -1
    private var watcher: WritableWatcher?
    /// Whether writes go straight to the socket.
    private var isDirect = false
    /// Framed bytes the socket has not taken yet (direct mode), from `unsentOffset` on.
    private var unsent: [UInt8] = []
    private var unsentOffset = 0
    /// The socket refused a write (the peer is gone).
    private var broken = false
    /// When queued bytes fall to this after being above it, the drain handler runs.
    public let lowWaterBytes: Int

    public init(lowWaterBytes: Int = 16 * 1024) {
        self.lowWaterBytes = lowWaterBytes
    }

    /// Adds `handler`, run once on the server's thread when the connection is gone (at
    /// once, if it is gone already).
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let alreadyClosed = lock.withLock { () -> Bool in
            if !closed { closeHandlers.append(handler) }
            return closed
        }
        if alreadyClosed { handler() }
    }

    /// Runs `handler` on the server's thread when the queue drains to `lowWaterBytes`.
    public func onDrain(_ handler: @escaping @Sendable () -> Void) { lock.withLock { drainHandler = handler } }

    /// Bytes queued and not yet handed to the connection.
    public var bufferedBytes: Int { lock.withLock { queuedBytes + unsent.count - unsentOffset } }

    /// Whether writes are still accepted (not finished, connection not gone).
    public var isOpen: Bool { lock.withLock { !finished && !closed && !broken } }

    /// Queues `bytes`; returns false (and drops them) once finished or closed.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool { write(contentsOf: [bytes]) }

    /// Queues several pieces at once (one lock, one resume or one `send`); returns false
    /// (and drops them) once finished or closed, or when more than `limit` bytes are
    /// already waiting.
    @discardableResult
    public func write(contentsOf pieces: [[UInt8]], unlessMoreThan limit: Int = .max) -> Bool {
        lock.lock()
        guard !finished && !closed && !broken, queuedBytes + unsent.count - unsentOffset <= limit else {
            lock.unlock()
            return false
        }
        var drained: (@Sendable () -> Void)?
        if isDirect {
            let count = pieces.reduce(0) { $0 + $1.count }
            if count > 0 {
                appendChunkSize(count)
                for bytes in pieces { unsent += bytes }
                unsent += [13, 10]
                drained = sendUnsent()
            }
        } else {
            for bytes in pieces where !bytes.isEmpty {
                chunks.append(bytes)
                queuedBytes += bytes.count
            }
            if queuedBytes > lowWaterBytes { aboveLowWater = true }
            if queuedBytes > 0 { resumeIfSuspended() }
        }
        lock.unlock()
        drained?()
        return true
    }

    /// Appends a chunk's size line (hexadecimal, CRLF) to `unsent`.
    private func appendChunkSize(_ count: Int) {
        let digits = Array("0123456789abcdef".utf8)
        var shift = (Int.bitWidth - count.leadingZeroBitCount + 3) / 4 * 4
        repeat {
            shift -= 4
            unsent.append(digits[(count >> shift) & 0xF])
        } while shift > 0
        unsent.append(contentsOf: [13, 10])
    }

    /// Ends the stream after what is queued has been sent.
    public func finish() {
        lock.lock()
        defer { lock.unlock() }
        finished = true
        if !isDirect || unsent.count == unsentOffset { resumeIfSuspended() }
    }

    /// Ends the stream at once, dropping what is not sent (the connection is closed).
    public func abort() {
        lock.lock()
        defer { lock.unlock() }
        finished = true
        broken = true
        resumeIfSuspended()
    }

    private func resumeIfSuspended() {
        if suspended, let connection {
            suspended = false
            MHD_resume_connection(connection)
        }
    }

    /// Sends what the socket takes of `unsent` (direct mode, under the lock); waits for
    /// the socket to take the rest, ends the stream when finished, gives up when the peer
    /// is gone. Returns the drain handler when it should run (after the lock).
    private func sendUnsent() -> (@Sendable () -> Void)? {
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
                watcher?.watch(directSocket) { [weak self] in self?.sendWhenWritable() }
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

    /// Called by the watcher when the socket takes bytes again.
    private func sendWhenWritable() {
        lock.lock()
        let drained = isDirect && !closed && !broken ? sendUnsent() : nil
        lock.unlock()
        drained?()
    }

    // MARK: - Called on the libmicrohttpd thread

    /// Binds the stream to its connection; with a socket, writes go to it directly once
    /// the library has sent everything before them.
    func attach(_ connection: OpaquePointer, directSocket: Int32 = -1, watcher: WritableWatcher? = nil) {
        lock.withLock {
            self.connection = connection
            self.directSocket = directSocket
            self.watcher = watcher
        }
    }

    /// Copies up to `capacity` queued bytes to `buffer`; returns the count, 0 after
    /// suspending the connection, or -1 at the end of the stream.
    func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
        lock.lock()
        if isDirect {
            // Resumed to end: cleanly if everything went out, else by closing.
            let result: Int
            if broken || unsent.count > unsentOffset {
                result = -2
            } else if finished {
                result = -1
            } else {
                suspended = true
                if let connection { MHD_suspend_connection(connection) }
                result = 0
            }
            lock.unlock()
            return result
        }
        var copied = 0
        while copied < capacity && firstChunk < chunks.count {
            let chunk = chunks[firstChunk]
            let count = min(capacity - copied, chunk.count - offsetInFirstChunk)
            chunk.withUnsafeBytes { source in
                (buffer + copied).copyMemory(from: source.baseAddress! + offsetInFirstChunk, byteCount: count)
            }
            copied += count
            offsetInFirstChunk += count
            if offsetInFirstChunk == chunk.count {
                firstChunk += 1
                offsetInFirstChunk = 0
            }
        }
        if firstChunk == chunks.count || firstChunk > 64 {
            chunks.removeFirst(firstChunk)
            firstChunk = 0
        }
        queuedBytes -= copied
        var drained: (@Sendable () -> Void)?
        if aboveLowWater && queuedBytes <= lowWaterBytes {
            aboveLowWater = false
            drained = drainHandler
        }
        let result: Int
        if copied > 0 {
            result = copied
        } else if finished {
            result = -1
        } else {
            // Everything handed over so far has been sent: later writes may go direct.
            if directSocket >= 0 { isDirect = true }
            suspended = true
            if let connection { MHD_suspend_connection(connection) }
            result = 0
        }
        lock.unlock()
        drained?()
        return result
    }

    /// The connection is gone (the response was released).
    func connectionClosed() {
        lock.lock()
        closed = true
        suspended = false
        chunks = []
        queuedBytes = 0
        unsent = []
        unsentOffset = 0
        if isDirect { watcher?.forget(directSocket) }
        let handlers = closeHandlers
        closeHandlers = []
        drainHandler = nil
        lock.unlock()
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
