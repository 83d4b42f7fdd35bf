import Foundation
import Lifecycle

/// Which tasks an event stream carries (`GET /v1/events`): all when empty.
public struct EventFilter: Sendable, Equatable {
    /// These tasks.
    public var taskIDs: [String]
    /// The children of this task (besides `taskIDs`).
    public var parentID: String?
    /// Tasks younger than this many seconds are held back; those that finish sooner never show.
    public var minDurationSeconds: Double?

    /// A filter; the defaults select every task, however young.
    public init(taskIDs: [String] = [], parentID: String? = nil, minDurationSeconds: Double? = nil) {
        self.taskIDs = taskIDs
        self.parentID = parentID
        self.minDurationSeconds = minDurationSeconds
    }

    var path: String {
        var items = taskIDs.map { ("task", $0) }
        if let parentID { items.append(("parent_id", parentID)) }
        if let minDurationSeconds { items.append(("min_duration", String(format: "%.3f", minDurationSeconds))) }
        return "/v1/events" + HeadwayClient.query(items)
    }
}

/// One event of the stream.
public enum HeadwayEvent: Sendable, Equatable {
    /// The tasks as they are when a stream starts afresh (a first connection, or a resume
    /// from an id the server no longer knows): the unfinished ones and those finished in
    /// the last minute.
    case snapshot([HeadwayTask], eventID: String)
    /// A change of one task, whole as it is after the change.
    case task(Kind, HeadwayTask, eventID: String)
    /// An event this client does not know, as it came.
    case other(name: String, data: String, eventID: String)

    /// What happened to a task: the event's name (`task.updated`).
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The event's name (`task.updated`).
        public let rawValue: String
        /// The kind named `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The event's name.
        public var description: String { rawValue }

        public static let created = Kind(rawValue: "task.created")
        public static let updated = Kind(rawValue: "task.updated")
        public static let stalled = Kind(rawValue: "task.stalled")
        public static let recovered = Kind(rawValue: "task.recovered")
        public static let cancelRequested = Kind(rawValue: "task.cancel_requested")
        public static let finished = Kind(rawValue: "task.finished")
        public static let deleted = Kind(rawValue: "task.deleted")
    }

    /// The stream's id for the event: pass it as `lastEventID` to resume after it (empty
    /// when the server gave none yet).
    public var eventID: String {
        switch self {
        case .snapshot(_, let id), .task(_, _, let id), .other(_, _, let id): id
        }
    }

    /// The typed form of `event`, whose stream id is `eventID`.
    init(_ event: SSEParser.Event, eventID: String) throws(HeadwayError) {
        let data = Array(event.data.utf8)
        if event.name == "snapshot" {
            struct Snapshot: Decodable { var tasks: [HeadwayTask] }
            self = .snapshot(try WireJSON.decode(Snapshot.self, from: data, what: "a snapshot").tasks, eventID: eventID)
        } else if event.name.hasPrefix("task.") {
            self = .task(Kind(rawValue: event.name), try WireJSON.decode(HeadwayTask.self, from: data, what: "a task"),
                         eventID: eventID)
        } else {
            self = .other(name: event.name, data: event.data, eventID: eventID)
        }
    }
}

extension HeadwayClient {
    /// The event stream of the tasks `filter` selects, from after `lastEventID` (nil: from a
    /// fresh snapshot). A dropped or silent connection (nothing for `idleTimeout`; the
    /// server sends a keep-alive every 15 s) is resumed where it stopped, with
    /// `Last-Event-ID`: nothing is skipped and nothing comes twice. Ends with an error
    /// when the first connection fails, when the server refuses the stream, or, once
    /// connected, refuses it for anything but being busy.
    ///
    /// ```swift
    /// for try await event in client.events(EventFilter(taskIDs: ["backup-db-3"])) {
    ///     if case .task(.finished, let task, _) = event { print(task.state) }
    /// }
    /// ```
    public func events(_ filter: EventFilter = EventFilter(), lastEventID: String? = nil,
                       idleTimeout: Duration = .seconds(60)) -> HeadwayEvents {
        HeadwayEvents(client: with(totalTimeoutSeconds: 0, idleTimeoutSeconds: max(1, Int(idleTimeout.components.seconds))),
                      path: filter.path, lastEventID: lastEventID)
    }
}

/// The events of a stream, read from a thread of its own as they arrive; the thread waits
/// while the reader has more than a few hundred events to take (so a slow reader slows the
/// stream, and the server coalesces or resumes it), and stops when the iterator goes.
public struct HeadwayEvents: AsyncSequence, Sendable {
    public typealias Element = HeadwayEvent
    public typealias Failure = HeadwayError

    let client: HeadwayClient
    let path: String
    let lastEventID: String?

    /// An iterator that connects at its first `next()`; each iterator reads a stream of its own.
    public func makeAsyncIterator() -> Iterator {
        Iterator(channel: EventChannel(), sequence: self)
    }

    /// Takes the events one at a time; dropping it closes the stream.
    public final class Iterator: AsyncIteratorProtocol {
        public typealias Element = HeadwayEvent
        public typealias Failure = HeadwayError

        private let channel: EventChannel
        private let sequence: HeadwayEvents
        private var started = false

        init(channel: EventChannel, sequence: HeadwayEvents) {
            self.channel = channel
            self.sequence = sequence
        }

        deinit { channel.close() }

        /// The next event; nil once the stream has ended (or the awaiting task was canceled).
        public func next(isolation actor: isolated (any Actor)?) async throws(HeadwayError) -> HeadwayEvent? {
            if !started {
                started = true
                let reader = EventReader(client: sequence.client, path: sequence.path, lastEventID: sequence.lastEventID,
                                         channel: channel)
                let thread = Thread { reader.run() }
                thread.name = "headway-events"
                thread.start()
            }
            return try await channel.take()
        }

        /// The next event (see `next(isolation:)`).
        public func next() async throws(HeadwayError) -> HeadwayEvent? {
            try await next(isolation: nil)
        }
    }
}

/// Hands events from the reading thread to the async reader: at most `capacity` wait;
/// past it the reading thread blocks (it is a thread of its own, never the pool's).
final class EventChannel: Sendable {
    private struct State {
        var buffer: [HeadwayEvent] = []
        var head = 0
        var waiting: CheckedContinuation<Result<HeadwayEvent?, HeadwayError>, Never>?
        var failure: HeadwayError?
        var ended = false
        var closed = false
    }

    static let capacity = 256
    private let state = Locked(State())
    private let room = NSCondition()
    /// Set when the reader goes: ends the transfer even while the server sends nothing.
    let stop = TransferStop()

    /// Whether the reader has gone: the reading thread should stop.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Offers `event` to the reader, waiting while the buffer is full; false once closed.
    func put(_ event: HeadwayEvent) -> Bool {
        room.lock()
        defer { room.unlock() }
        while true {
            let (accepted, resume) = state.withLock { state -> (Bool?, CheckedContinuation<Result<HeadwayEvent?, HeadwayError>, Never>?) in
                if state.closed { return (false, nil) }
                if let waiting = state.waiting {
                    state.waiting = nil
                    return (true, waiting)
                }
                guard state.buffer.count - state.head < Self.capacity else { return (nil, nil) }
                state.buffer.append(event)
                return (true, nil)
            }
            resume?.resume(returning: .success(event))
            if let accepted { return accepted }
            _ = room.wait(until: Date().addingTimeInterval(1))
        }
    }

    /// Ends the stream: with `failure`, or (nil) cleanly.
    func end(_ failure: HeadwayError?) {
        let waiting = state.withLock { state in
            state.ended = true
            state.failure = failure
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume(returning: failure.map { .failure($0) } ?? .success(nil))
    }

    /// The reader has gone, or its task was canceled.
    func close() {
        let waiting = state.withLock { state in
            state.closed = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume(returning: .success(nil))
        stop.set()
        makeRoom()
    }

    /// Wakes the reading thread waiting in `put`.
    private func makeRoom() {
        room.lock()
        room.broadcast()
        room.unlock()
    }

    func take() async throws(HeadwayError) -> HeadwayEvent? {
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HeadwayEvent?, HeadwayError>, Never>) in
                let ready: Result<HeadwayEvent?, HeadwayError>? = state.withLock { state in
                    if state.head < state.buffer.count {
                        let event = state.buffer[state.head]
                        state.head += 1
                        if state.head >= 64 && state.head * 2 >= state.buffer.count {
                            state.buffer.removeFirst(state.head)
                            state.head = 0
                        }
                        return .success(event)
                    }
                    if state.closed { return .success(nil) }
                    if state.ended {
                        defer { state.failure = nil }
                        return state.failure.map { .failure($0) } ?? .success(nil)
                    }
                    state.waiting = continuation
                    return nil
                }
                if let ready {
                    continuation.resume(returning: ready)
                    makeRoom()
                }
            }
        } onCancel: {
            close()
        }
        return try result.get()
    }
}

/// Reads the stream on its own thread: connects, parses, hands each event over, and
/// reconnects with `Last-Event-ID` (a bounded backoff, as `headway watch` does) when the
/// connection drops.
final class EventReader: Sendable {
    let client: HeadwayClient
    let path: String
    let channel: EventChannel
    private let lastEventID: Locked<String>

    /// The shortest and longest waits before reconnecting.
    static let firstDelay = 0.25, maximumDelay = 4.0

    init(client: HeadwayClient, path: String, lastEventID: String?, channel: EventChannel) {
        self.client = client
        self.path = path
        self.channel = channel
        self.lastEventID = Locked(lastEventID ?? "")
    }

    func run() {
        var delay = Self.firstDelay
        var connectedOnce = false
        let stop = channel.stop
        while !channel.isClosed {
            // A parser per connection: a half-received event of a dropped one is dropped
            // with it, and comes again after the resume.
            let connection = Connection(reader: self)
            let outcome = Result { () throws(TransportError) in
                try client.stream(path, lastEventID: lastEventID.withLock { $0 }, receiver: BodyReceiver(connection.receive),
                                  stop: stop)
            }
            if channel.isClosed { return }
            if let failure = connection.failure { return channel.end(failure) }
            switch outcome {
            case .success(let (status, contentType)):
                // Once streaming, a server that is busy or restarting (503, 502, 504, 429)
                // is waited for, as a dropped connection is.
                let transient = [429, 502, 503, 504].contains(status) && connectedOnce
                if !(200..<300).contains(status) && !transient {
                    return channel.end(HeadwayError.refusal(status: status, contentType: contentType, body: connection.raw))
                }
            case .failure(let error):
                if !connectedOnce && !connection.receivedBytes { return channel.end(.unreachable(error.message)) }
            }
            if connection.receivedBytes {
                connectedOnce = true
                delay = Self.firstDelay
            }
            let deadline = Date().addingTimeInterval(delay)
            while !channel.isClosed && Date() < deadline { usleep(20_000) }
            delay = min(delay * 2, Self.maximumDelay)
        }
    }

    /// One connection's parser and what it has seen; used on the reading thread only.
    final class Connection {
        let reader: EventReader
        var parser = SSEParser()
        var raw: [UInt8] = []
        var receivedBytes = false
        var failure: HeadwayError?

            init(reader: EventReader) { self.reader = reader }

        func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
            if !chunk.isEmpty { receivedBytes = true }
            if raw.count < 65_536 { raw.append(contentsOf: chunk.prefix(65_536 - raw.count)) }
            for event in parser.feed(chunk) {
                // A resumed stream's events before its first `id:` line (tasks a
                // `min_duration` release sends) still resume from the id held.
                let eventID = event.lastEventID.isEmpty ? reader.lastEventID.withLock { $0 } : event.lastEventID
                let decoded: HeadwayEvent
                do {
                    decoded = try HeadwayEvent(event, eventID: eventID)
                } catch {
                    failure = error
                    return false
                }
                guard reader.channel.put(decoded) else { return false }
                reader.lastEventID.withLock { $0 = eventID }
            }
            if parser.overflowed {
                failure = .invalidReply("an event of the stream is larger than \(parser.maximumEventBytes >> 20) MiB")
                return false
            }
            return !reader.channel.isClosed
        }
    }
}
