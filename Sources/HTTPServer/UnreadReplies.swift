import CMicroHTTPD
import Lifecycle

/// The rule of a budget of reply bytes that wait for their clients to take them: how much
/// may wait in all and per client before a new read is refused.
///
/// - a client that holds its share (a quarter of the limit) or more starts no new read;
/// - below the limit, a client under its share starts its read;
/// - a client that holds nothing starts its read until the total reaches the limit and a
///   reserve (another quarter) above it: the floor that lets an honest client read while
///   several others fill the budget.
public struct UnreadReplyBudget: Equatable, Sendable {
    /// The bytes all clients' replies may hold before only clients holding nothing read.
    public let limitBytes: Int
    /// Bytes of replies not yet taken, in all.
    public private(set) var totalBytes = 0
    /// Bytes of replies not yet taken, by client (only clients holding some).
    public private(set) var bytesByClient: [Int: Int] = [:]

    public init(limitBytes: Int) {
        self.limitBytes = limitBytes
    }

    /// The most one client may hold before its reads are refused.
    public var clientShareBytes: Int { max(1, limitBytes / 4) }

    /// How far past the limit a client holding nothing may still start a read.
    public var reserveBytes: Int { limitBytes / 4 }

    /// Bytes of `client`'s replies not yet taken.
    public func bytes(of client: Int) -> Int { bytesByClient[client] ?? 0 }

    /// Whether `client` may start a read now.
    public func admits(_ client: Int) -> Bool {
        let held = bytes(of: client)
        if held == 0 { return totalBytes < limitBytes + reserveBytes }
        return held < clientShareBytes && totalBytes < limitBytes
    }

    /// `bytes` more wait for `client`.
    public mutating func add(_ bytes: Int, client: Int) {
        guard bytes > 0 else { return }
        totalBytes += bytes
        bytesByClient[client, default: 0] += bytes
    }

    /// `bytes` of `client`'s were taken (or will never be).
    public mutating func remove(_ bytes: Int, client: Int) {
        guard bytes > 0 else { return }
        totalBytes -= bytes
        let left = (bytesByClient[client] ?? 0) - bytes
        bytesByClient[client] = left > 0 ? left : nil
    }
}

/// The replies of the request daemon's connections that their clients have not taken yet,
/// against `UnreadReplyBudget` (`--max-unsent-reply-bytes`), by client address.
///
/// Each reply is bounded (a page of tasks ends at 1 MiB), but a client that opens many
/// connections, asks for a large reply on each and never reads would otherwise hold a
/// gigabyte until the stall timeout closes them — most of it in the kernel's send buffers
/// (up to 4 MiB a socket here), which the daemon's RSS never shows and which, past the
/// kernel's TCP memory limit, slow every socket on the machine. So a reply counts from
/// the moment it is queued until its client has it: while the library still holds bytes
/// of it, its whole size; once the library has written it all, the bytes the client has
/// not acknowledged (`SIOCOUTQ`), looked at again when a verdict would be a refusal or the
/// total is asked for; it stops counting once acknowledged, or when its connection closes.
/// A client that pipelines its requests and reads none has each reply counted on the one
/// before it.
///
/// A read is admitted before its reply exists, so the total may pass the bounds by at
/// most one reply per read that runs at once.
public final class UnreadReplies: Sendable {
    private struct Entry {
        var client: Int
        var bytes: Int
        /// The library has written the whole reply: what is left is in the kernel.
        var written = false
    }

    private struct State {
        var budget: UnreadReplyBudget
        var entries: [Int32: Entry] = [:]
    }

    /// Shared by the daemons' threads (replies queued, written, closed) and the reads' threads (admission).
    private let state: Locked<State>
    /// How many bytes socket `fd` holds unacknowledged (tests replace the kernel's count).
    private let unacknowledged: @Sendable (Int32) -> Int

    public init(limitBytes: Int) {
        state = Locked(State(budget: UnreadReplyBudget(limitBytes: limitBytes)))
        unacknowledged = { fd in max(0, Int(headway_unacknowledged_bytes(fd))) }
    }

    init(limitBytes: Int, unacknowledged: @escaping @Sendable (Int32) -> Int) {
        state = Locked(State(budget: UnreadReplyBudget(limitBytes: limitBytes)))
        self.unacknowledged = unacknowledged
    }

    /// The bytes counted now, in all.
    public var totalBytes: Int {
        state.withLock { state in
            Self.recount(&state, unacknowledged)
            return state.budget.totalBytes
        }
    }

    /// Whether `client` may start a read now; when not, the bytes it and everyone hold.
    /// Before refusing, replies written to the kernel are counted again, so bytes clients
    /// took since do not refuse anyone.
    public func admits(_ client: Int) -> (admitted: Bool, clientBytes: Int, totalBytes: Int) {
        state.withLock { state in
            if !state.budget.admits(client) { Self.recount(&state, unacknowledged) }
            return (state.budget.admits(client), state.budget.bytes(of: client), state.budget.totalBytes)
        }
    }

    /// Admits `client`'s request whose reply is not made yet but will take about `bytes`
    /// (`admits`), and counts those bytes for it until `release`: requests that run side
    /// by side (batches, which the writer applies many at once) are each counted from the
    /// start, not only once their replies are queued, so a client cannot have any number
    /// admitted before the first reply counts.
    public func reserve(_ bytes: Int, client: Int) -> (admitted: Bool, clientBytes: Int, totalBytes: Int) {
        state.withLock { state in
            if !state.budget.admits(client) { Self.recount(&state, unacknowledged) }
            let admitted = state.budget.admits(client)
            if admitted { state.budget.add(bytes, client: client) }
            return (admitted, state.budget.bytes(of: client), state.budget.totalBytes)
        }
    }

    /// `bytes` reserved for `client` (`reserve`) count no more: its reply is made (and
    /// counted when queued), or none will be.
    public func release(_ bytes: Int, client: Int) {
        state.withLock { $0.budget.remove(bytes, client: client) }
    }

    /// `reserve` as a reservation that releases itself once (`ReplyReservation`), or nil
    /// with the bytes the client and everyone hold when `client` is refused.
    public func reservation(_ bytes: Int, client: Int) -> (reservation: ReplyReservation?, clientBytes: Int,
                                                           totalBytes: Int) {
        let (admitted, clientBytes, totalBytes) = reserve(bytes, client: client)
        return (admitted ? ReplyReservation(bytes, client: client, in: self) : nil, clientBytes, totalBytes)
    }

    /// A reply of `bytes` is queued on socket `fd` for `client`, after what the client has
    /// not yet acknowledged of the replies before it.
    func queued(_ bytes: Int, on fd: Int32, client: Int) {
        guard fd >= 0, bytes > 0 else { return }
        state.withLock { state in
            if let earlier = state.entries[fd] {
                if earlier.written { Self.update(fd, earlier, to: unacknowledged(fd), &state) }
                if let left = state.entries[fd], left.client != client { Self.forget(fd, &state) }
            }
            state.entries[fd, default: Entry(client: client, bytes: 0)].bytes += bytes
            state.entries[fd]?.written = false
            state.budget.add(bytes, client: client)
        }
    }

    /// The library has written the reply on `fd` to the kernel: only what the client has not
    /// acknowledged counts on.
    func written(on fd: Int32) {
        guard fd >= 0 else { return }
        state.withLock { state in
            guard var entry = state.entries[fd] else { return }
            entry.written = true
            state.entries[fd] = entry
            Self.update(fd, entry, to: unacknowledged(fd), &state)
        }
    }

    /// The replies on `fd`, if any, count no more: its connection is closing. Called before
    /// the socket is closed, so its number cannot belong to another connection meanwhile.
    func forget(_ fd: Int32) {
        guard fd >= 0 else { return }
        state.withLock { Self.forget(fd, &$0) }
    }

    private static func forget(_ fd: Int32, _ state: inout State) {
        guard let entry = state.entries.removeValue(forKey: fd) else { return }
        state.budget.remove(entry.bytes, client: entry.client)
    }

    private static func update(_ fd: Int32, _ entry: Entry, to bytes: Int, _ state: inout State) {
        let left = min(entry.bytes, bytes)
        state.budget.remove(entry.bytes - left, client: entry.client)
        if left == 0 {
            state.entries[fd] = nil
        } else {
            state.entries[fd]?.bytes = left
        }
    }

    private static func recount(_ state: inout State, _ unacknowledged: (Int32) -> Int) {
        for (fd, entry) in state.entries where entry.written {
            update(fd, entry, to: unacknowledged(fd), &state)
        }
    }
}

/// Bytes of `UnreadReplies` held for one request whose reply is not made yet, from its
/// admission until its reply is made or its exchange ends without one, whichever comes
/// first (any thread; each release after the first does nothing).
///
/// The server takes one from a batch's head, before reading its body
/// (`MicroHTTPServer.Configuration.largerBodyReplyBytes`): a client past its share is
/// refused then, its body never kept or parsed, and batches arriving side by side are
/// each counted from their heads on, so none is admitted on room another already took.
public final class ReplyReservation: Sendable {
    private let replies: UnreadReplies
    /// The client the bytes are held for (`HTTPRequest.clientAddress`).
    public let client: Int
    /// Shared by the request's thread (shrink) and whichever thread releases it first (its answer, its end).
    private let held: Locked<Int>

    init(_ bytes: Int, client: Int, in replies: UnreadReplies) {
        self.replies = replies
        self.client = client
        held = Locked(bytes)
    }

    /// The bytes held now (0 once released).
    public var bytes: Int { held.withLock { $0 } }

    /// Holds at most `bytes` from now on: the handler has learnt its reply's size (a
    /// batch's items, once parsed), smaller than what its head could announce.
    public func shrink(to bytes: Int) {
        let freed = held.withLock { held -> Int in
            let freed = max(0, held - max(0, bytes))
            held -= freed
            return freed
        }
        replies.release(freed, client: client)
    }

    /// Holds nothing more: the reply is made (it counts once queued), or none will be.
    public func release() {
        let freed = held.withLock { held -> Int in
            defer { held = 0 }
            return held
        }
        replies.release(freed, client: client)
    }
}
