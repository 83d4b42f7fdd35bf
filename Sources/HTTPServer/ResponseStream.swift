import CMicroHTTPD
import Foundation

/// A response body written over time from any thread (an event stream). Bytes are queued
/// here and handed to libmicrohttpd when it asks; while nothing is queued the connection
/// is suspended, so an idle stream costs no CPU, and a write resumes it.
///
/// The content-reader protocol (see ENGINEERING.md): under the lock, copy queued bytes
/// out; if the stream is finished, end it; otherwise mark it suspended, suspend the
/// connection and return 0. A writer resumes only a connection marked suspended.
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
    public var bufferedBytes: Int { lock.withLock { queuedBytes } }

    /// Whether writes are still accepted (not finished, connection not gone).
    public var isOpen: Bool { lock.withLock { !finished && !closed } }

    /// Queues `bytes`; returns false (and drops them) once finished or closed.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !finished && !closed else { return false }
        guard !bytes.isEmpty else { return true }
        chunks.append(bytes)
        queuedBytes += bytes.count
        if queuedBytes > lowWaterBytes { aboveLowWater = true }
        resumeIfSuspended()
        return true
    }

    /// Ends the stream after what is queued has been sent.
    public func finish() {
        lock.lock()
        defer { lock.unlock() }
        finished = true
        resumeIfSuspended()
    }

    private func resumeIfSuspended() {
        if suspended, let connection {
            suspended = false
            MHD_resume_connection(connection)
        }
    }

    // MARK: - Called on the libmicrohttpd thread

    func attach(_ connection: OpaquePointer) { lock.withLock { self.connection = connection } }

    /// Copies up to `capacity` queued bytes to `buffer`; returns the count, 0 after
    /// suspending the connection, or -1 at the end of the stream.
    func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
        lock.lock()
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
