import Lifecycle
import Dispatch

/// A few reader connections that serve queued reads off the caller's thread: a read waits
/// for a free connection and runs on a thread of the pool, so a slow read holds one
/// connection, never the thread that asked (the HTTP server's) nor the reads behind it
/// while another connection is free. Waiting reads are served first come, first served
/// for each client, the clients in turns, so one client's queue of heavy reads does not
/// hold another's. At most `maximumWaiting` reads wait; past that a read is refused, so a
/// flood costs a bounded queue, not memory.
///
/// `refuseWaiting()` (a stop begins) refuses new reads and those still waiting; `close()`
/// refuses new reads, waits for every read accepted (running or waiting), then closes the
/// connections.
public final class ReadPool: Sendable {
    /// A read: gets a connection of the pool for as long as it runs.
    public typealias Job = @Sendable (DatabaseReader) -> Void
    /// What a read that waited says instead when `refuseWaiting()` refuses it.
    public typealias Refused = @Sendable () -> Void

    /// Why a read was not accepted.
    public enum Refusal: Error, Equatable, Sendable {
        /// `maximumWaiting` reads already wait for a connection.
        case busy
        /// The pool is closing.
        case closed
    }

    /// Counts, for tests and measurements.
    public struct Statistics: Equatable, Sendable {
        /// Reads accepted.
        public var accepted = 0
        /// Reads refused because too many already waited.
        public var refusedBusy = 0
        /// The most reads that waited at once.
        public var mostWaiting = 0
    }

    private struct State {
        var idle: [DatabaseReader]
        /// Reads waiting for a connection, a queue per client, taken in turns.
        var waiting = FairQueue()
        var closing = false
        var statistics = Statistics()
    }

    /// Reads waiting, one first-come-first-served queue per client, the clients served in
    /// turns: a client's read waits behind one read of each other client waiting, never
    /// behind a queue that another client filled.
    struct FairQueue {
        typealias Entry = (job: Job, refused: Refused?)

        /// One client's reads, oldest from `first` on.
        private struct Queue {
            var entries: [Entry] = []
            var first = 0
        }

        private var queues: [Int: Queue] = [:]
        /// The clients with reads waiting, in the order of their next turn, from `firstTurn` on.
        private var turns: [Int] = []
        private var firstTurn = 0
        private(set) var count = 0

        mutating func append(_ entry: Entry, client: Int) {
            if queues[client] == nil { turns.append(client) }
            queues[client, default: Queue()].entries.append(entry)
            count += 1
        }

        /// The oldest read of the client whose turn it is, if any read waits.
        mutating func takeNext() -> Entry? {
            guard firstTurn < turns.count else { return nil }
            let client = turns[firstTurn]
            firstTurn += 1
            if firstTurn == turns.count || firstTurn > 256 {
                turns.removeFirst(firstTurn)
                firstTurn = 0
            }
            guard var queue = queues.removeValue(forKey: client) else { return nil }
            let entry = queue.entries[queue.first]
            queue.first += 1
            count -= 1
            if queue.first < queue.entries.count {
                if queue.first > 256 {
                    queue.entries.removeFirst(queue.first)
                    queue.first = 0
                }
                queues[client] = queue
                turns.append(client)
            }
            return entry
        }

        /// Takes every waiting read with its client, in the order they would have run.
        mutating func takeAll() -> [(entry: Entry, client: Int)] {
            var all: [(entry: Entry, client: Int)] = []
            while let client = nextClient, let entry = takeNext() { all.append((entry, client)) }
            return all
        }

        /// The client whose turn is next, if any read waits.
        private var nextClient: Int? { firstTurn < turns.count ? turns[firstTurn] : nil }
    }

    /// The connections (each used by one read at a time).
    public let readers: [DatabaseReader]
    /// Reads that may wait for a connection at once.
    public let maximumWaiting: Int
    /// Shared by the threads that ask for reads (the daemons') and the reads' threads (a reader freed).
    private let state: Locked<State>
    /// Where reads run: concurrent, but never more at once than there are connections.
    private let queue: DispatchQueue
    /// Entered for every read accepted, left when it has run: what `close()` waits for.
    private let inProgress = DispatchGroup()

    /// Opens `connections` reader connections to the database at `path`.
    public init(path: String, connections: Int, maximumWaiting: Int, label: String) throws(DatabaseError) {
        precondition(connections > 0, "a read pool needs a connection")
        var readers: [DatabaseReader] = []
        for _ in 0..<connections { readers.append(try DatabaseReader(path: path)) }
        self.readers = readers
        self.maximumWaiting = maximumWaiting
        state = Locked(State(idle: readers))
        queue = DispatchQueue(label: label, attributes: .concurrent)
    }

    /// Runs `job` on a connection as soon as one is free; throws (and never runs it) when
    /// `maximumWaiting` reads already wait, or once the pool is closing. Reads wait in a
    /// queue per `client` (a number standing for who asked), served in turns. A read that
    /// waits and is then refused by `refuseWaiting()` runs `refused` instead, if given.
    public func submit(_ job: @escaping Job, client: Int = 0, refused: Refused? = nil) throws(Refusal) {
        let reader = try state.withLock { state throws(Refusal) -> DatabaseReader? in
            guard !state.closing else { throw .closed }
            if let reader = state.idle.popLast() {
                state.statistics.accepted += 1
                inProgress.enter()
                return reader
            }
            guard state.waiting.count < maximumWaiting else {
                state.statistics.refusedBusy += 1
                throw .busy
            }
            state.waiting.append((job, refused), client: client)
            state.statistics.accepted += 1
            // Under the lock: a connection may take the read as soon as it is released.
            inProgress.enter()
            state.statistics.mostWaiting = max(state.statistics.mostWaiting, state.waiting.count)
            return nil
        }
        guard let reader else { return }
        queue.async { [self] in serve(job, with: reader) }
    }

    /// Runs `job`, then the reads waiting, on `reader` until none waits; then gives the
    /// connection back.
    private func serve(_ job: @escaping Job, with reader: DatabaseReader) {
        var next: Job? = job
        while let current = next {
            current(reader)
            inProgress.leave()
            next = state.withLock { state in
                let waiting = state.waiting.takeNext()
                if waiting == nil { state.idle.append(reader) }
                return waiting?.job
            }
        }
    }

    /// Reads waiting for a connection now.
    public var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Whether the pool refuses new reads (`refuseWaiting()` or `close()` has begun).
    public var isClosing: Bool { state.withLock { $0.closing } }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// A stop begins: refuses new reads, and each read still waiting for a connection that
    /// can be refused (it was given a `refused`) is refused too: its `refused` runs, on the
    /// caller's thread, instead of the read, so that a stop waits for the reads running,
    /// not for a queue one client may have filled. Reads running go on, and so do the
    /// waiting reads given no `refused` (nothing would answer for them); `close()` waits
    /// for them.
    public func refuseWaiting() {
        let refused = state.withLock { state in
            state.closing = true
            var refused: [Refused] = []
            var kept = FairQueue()
            for (entry, client) in state.waiting.takeAll() {
                if let answer = entry.refused { refused.append(answer) } else { kept.append(entry, client: client) }
            }
            state.waiting = kept
            return refused
        }
        for answer in refused {
            answer()
            inProgress.leave()
        }
    }

    /// Refuses new reads, waits for every read accepted to have run, then closes the
    /// connections.
    public func close() {
        state.withLock { $0.closing = true }
        inProgress.wait()
        readers.forEach { $0.close() }
    }
}
