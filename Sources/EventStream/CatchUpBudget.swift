import Lifecycle
import HTTPServer
import HeadwayCore

/// Who a catch-up is counted against: the token the stream was opened with, or, without
/// one, the client's address. A token is the finer identity — behind a reverse proxy
/// every client has the proxy's address — and one that only an admin can multiply.
package enum CatchUpParty: Hashable, Sendable {
    /// A number standing for the client's address (`HTTPRequest.client`).
    case address(Int)
    /// A token's id.
    case token(String)

    /// The party of a stream opened from `client` with the token `tokenID`, if any.
    package init(client: Int, tokenID: String?) {
        self = tokenID.map { .token($0) } ?? .address(client)
    }
}

/// The stream a catch-up is held for, as the budget sees it.
package protocol CatchUpHolder: AnyObject, Sendable {
    /// Whether bytes have waited `nanoseconds` or more without its peer taking any.
    func hasTakenNothing(forNanoseconds nanoseconds: UInt64) -> Bool
    /// Closes it at once (its catch-up is let go once the broker has seen it close).
    func abort()
}

extension ResponseStream: CatchUpHolder {}

/// The global bound on catch-up bytes held in memory (`--max-catch-up-bytes`), shared out
/// fairly. A catch-up is written to its stream *shared* and does not count against the
/// stream's own cap, so without this bound memory would grow with subscribers × catch-up
/// size; and without shares one client that opens streams and reads none of them would
/// hold the whole bound, so that every other client's catch-up is refused.
///
/// The rules (each unit-tested, no sockets):
/// - **Counted once.** A catch-up read once and sent to several streams (`CatchUpCharge`)
///   counts once however many streams hold it, and once for a party that holds it
///   through several streams.
/// - **Reserved before it is built.** A catch-up's bytes are reserved as it is built, each
///   part before it is made (`CatchUpHold.reserve`): the bytes counted never pass the
///   limit. A reservation that does not fit ends the build, and the stream gets `retry:`
///   and ends; nothing is read at all while the party or the whole budget has no room.
///   (The rows a read holds while it builds are not counted: one read at a time per
///   catch-up connection, `--read-connections`.)
/// - **A fair share.** A party holds at most `shareBytes`, an eighth of the limit...
/// - **A floor.** ...but a stream whose party holds nothing may have a catch-up larger
///   than that (a snapshot of many tasks), within the limit. When there is no room for
///   it, the streams of other parties that hold catch-ups and whose peers have taken
///   nothing for `stalledNanoseconds` are closed (`CatchUpHolder`), so that its client
///   finds the room when it comes back after `retry:`. So a client that holds nothing is
///   refused twice in a row only while others fill the budget with catch-ups their peers
///   are taking: at least eight clients at their shares, or fewer whose single catch-ups
///   are larger than a share.
/// - **Kept while there is room.** A catch-up no stream holds any more stays in memory,
///   counted, for streams that will want the same one (`CatchUpCache`), until a catch-up
///   that is held needs its room (the oldest goes first) or a newer one replaces it.
///
/// A stream holds its catch-up (`CatchUpHold`) from just before it is built until the
/// stream has sent it or closed; a stream that reads nothing is closed by the stall
/// timeout. Refusals are logged as one count a second.
package final class CatchUpBudget: Sendable {
    /// One catch-up in memory, as counted.
    private struct Charged {
        /// Kept while counted: its identity is the key.
        let charge: CatchUpCharge
        /// How many streams of each party hold it.
        var holders: [CatchUpParty: Int] = [:]
        /// Whether it stays in memory, counted, once no stream holds it.
        var keptWhenIdle: Bool
    }

    /// What one party holds.
    private struct PartyState {
        /// Its charges (each once) and its reservations.
        var bytes = 0
        /// Its holds not yet let go (a hold that is still empty counts: the party is busy).
        var holds = 0
    }

    /// What one hold has taken.
    private struct HoldState {
        let party: CatchUpParty
        /// Whether the party held nothing when the hold began (see "A floor").
        let isFloor: Bool
        var reserved = 0
        var charges: [ObjectIdentifier] = []
        /// The stream it is for, once known.
        weak var holder: (any CatchUpHolder)?
    }

    /// What became of a request for bytes.
    private enum Answer {
        case granted
        case refused
        /// Refused to a floor for want of room: stalled holders are closed.
        case refusedRoom(CatchUpParty)
    }

    private struct State {
        var usedBytes = 0
        var peakBytes = 0
        var charged: [ObjectIdentifier: Charged] = [:]
        /// Charges no stream holds, kept while there is room, oldest first.
        var idle: [ObjectIdentifier] = []
        var idleBytes = 0
        var parties: [CatchUpParty: PartyState] = [:]
        var holds: [Int: HoldState] = [:]
        var lastHold = 0
        /// Catch-ups refused since the last log line, and when that line was written.
        var refusedSinceLine = 0
        var lastLine: EpochMilliseconds?
        /// A later line is promised for refusals not yet logged (`claimFlush`).
        var flushClaimed = false
        /// Charges no longer counted, freed once the lock is let go (freeing a large
        /// catch-up takes a while).
        var letGo: [CatchUpCharge] = []

        mutating func add(_ bytes: Int) {
            usedBytes += bytes
            peakBytes = max(peakBytes, usedBytes)
        }

        /// Makes room for `bytes` more, letting go of idle catch-ups (oldest first) if need
        /// be; false when even that would not make enough.
        mutating func makeRoom(_ bytes: Int, limit: Int) -> Bool {
            guard usedBytes - idleBytes + bytes <= limit else { return false }
            while usedBytes + bytes > limit, !idle.isEmpty {
                forgetIdle(idle.removeFirst())
            }
            return true
        }

        /// Stops counting a charge that no stream holds.
        mutating func forgetIdle(_ key: ObjectIdentifier) {
            guard let charged = charged.removeValue(forKey: key) else { return }
            usedBytes -= charged.charge.bytes
            idleBytes -= charged.charge.bytes
            letGo.append(charged.charge)
        }
    }

    /// The most catch-up bytes held at once.
    package let limitBytes: Int
    /// The most one party holds, but for the catch-up it asks for while it holds nothing.
    let shareBytes: Int
    /// How many shares the limit is cut into.
    static let shares = 8
    /// How long a stream's peer must have taken nothing for its catch-up to be given up
    /// to a client that holds nothing (the stall timeout closes it later anyway).
    static let stalledNanoseconds: UInt64 = 5_000_000_000
    /// Log lines of refusals are at least this far apart.
    package static let lineIntervalMilliseconds: Int64 = 1000
    private let state = Locked(State())

    package init(limitBytes: Int) {
        self.limitBytes = limitBytes
        shareBytes = limitBytes / Self.shares
    }

    /// Runs `body` under the lock, then frees what it let go.
    private func withState<Result>(_ body: (inout State) -> Result) -> Result {
        var letGo: [CatchUpCharge] = []
        let result = state.withLock { state in
            defer { swap(&letGo, &state.letGo) }
            return body(&state)
        }
        withExtendedLifetime(letGo) {}
        return result
    }

    /// The bytes counted now (reservations and idle catch-ups included).
    package var usedBytes: Int { state.withLock { $0.usedBytes } }

    /// The most bytes ever counted at once.
    var peakBytes: Int { state.withLock { $0.peakBytes } }

    /// The bytes `party` holds now.
    func bytes(of party: CatchUpParty) -> Int { state.withLock { $0.parties[party]?.bytes ?? 0 } }

    /// Begins the hold of one stream's catch-up for `party`: nothing is counted yet, but
    /// whether the party held nothing (its floor) is decided now, so that two streams of
    /// a party that arrive together do not both pass its share.
    package func hold(for party: CatchUpParty) -> CatchUpHold {
        let id = state.withLock { state in
            var partyState = state.parties[party] ?? PartyState()
            let isFloor = partyState.bytes == 0 && partyState.holds == 0
            partyState.holds += 1
            state.parties[party] = partyState
            state.lastHold += 1
            state.holds[state.lastHold] = HoldState(party: party, isFloor: isFloor)
            return state.lastHold
        }
        return CatchUpHold(budget: self, id: id)
    }

    /// Whether hold `id` may take anything more at all: its party is below its share (or
    /// this is its floor) and the budget is not full of catch-ups that are held. Asked
    /// before reading, so that a flood of subscribers costs no reads.
    fileprivate func mayTakeMore(_ id: Int) -> Bool {
        answer(state.withLock { state in
            guard let hold = state.holds[id] else { return .refused }
            let partyBytes = state.parties[hold.party]?.bytes ?? 0
            guard hold.isFloor || partyBytes < shareBytes else { return .refused }
            guard state.usedBytes - state.idleBytes < limitBytes else { return hold.isFloor ? .refusedRoom(hold.party) : .refused }
            return .granted
        })
    }

    /// Counts `charge` for hold `id`: free when its party holds it already; else within
    /// the party's share (or its floor), and new bytes to the budget only when the charge
    /// is not counted already (held by another party, or idle).
    fileprivate func join(_ id: Int, _ charge: CatchUpCharge) -> Bool {
        let key = ObjectIdentifier(charge)
        return answer(withState { state in
            guard var hold = state.holds[id], var partyState = state.parties[hold.party] else { return .refused }
            if hold.charges.contains(key) { return .granted }
            let partyHoldsIt = state.charged[key]?.holders[hold.party] != nil
            if !partyHoldsIt {
                guard hold.isFloor || partyState.bytes + charge.bytes <= shareBytes else { return .refused }
                partyState.bytes += charge.bytes
            }
            if var charged = state.charged[key] {
                if charged.holders.isEmpty, let index = state.idle.firstIndex(of: key) {
                    state.idle.remove(at: index)
                    state.idleBytes -= charge.bytes
                }
                charged.holders[hold.party, default: 0] += 1
                state.charged[key] = charged
            } else {
                guard state.makeRoom(charge.bytes, limit: limitBytes) else {
                    return hold.isFloor ? .refusedRoom(hold.party) : .refused
                }
                state.add(charge.bytes)
                state.charged[key] = Charged(charge: charge, holders: [hold.party: 1], keptWhenIdle: charge.contents != nil)
            }
            state.parties[hold.party] = partyState
            hold.charges.append(key)
            state.holds[id] = hold
            return .granted
        })
    }

    /// Reserves `bytes` more for what hold `id` is building, within its party's share (or
    /// its floor) and the limit.
    fileprivate func reserve(_ id: Int, _ bytes: Int) -> Bool {
        answer(withState { state in
            guard var hold = state.holds[id], var partyState = state.parties[hold.party] else { return .refused }
            guard hold.isFloor || partyState.bytes + bytes <= shareBytes else { return .refused }
            guard state.makeRoom(bytes, limit: limitBytes) else { return hold.isFloor ? .refusedRoom(hold.party) : .refused }
            state.add(bytes)
            partyState.bytes += bytes
            hold.reserved += bytes
            state.parties[hold.party] = partyState
            state.holds[id] = hold
            return .granted
        })
    }

    /// Whether `answer` grants; a floor refused for want of room has the stalled holders
    /// of other parties closed first (see "A floor").
    private func answer(_ answer: Answer) -> Bool {
        switch answer {
        case .granted: return true
        case .refused: return false
        case .refusedRoom(let party):
            closeStalledHolders(except: party)
            return false
        }
    }

    /// Closes the streams of parties other than `party` that hold catch-ups and whose
    /// peers have taken nothing for `stalledNanoseconds`; returns how many.
    @discardableResult
    func closeStalledHolders(except party: CatchUpParty) -> Int {
        // The streams are asked outside the lock: they have locks of their own.
        let holders = state.withLock { state in
            state.holds.values.filter { $0.party != party && !$0.charges.isEmpty }.compactMap(\.holder)
        }
        let stalled = holders.filter { $0.hasTakenNothing(forNanoseconds: Self.stalledNanoseconds) }
        for holder in stalled { holder.abort() }
        return stalled.count
    }

    /// Names the stream hold `id` is for.
    fileprivate func setHolder(_ id: Int, _ holder: any CatchUpHolder) {
        state.withLock { $0.holds[id]?.holder = holder }
    }

    /// Turns `charge.bytes` of what hold `id` reserved into `charge`, held by it, and gives
    /// back the rest of the reservation.
    fileprivate func settle(_ id: Int, _ charge: CatchUpCharge) {
        state.withLock { state in
            guard var hold = state.holds[id], var partyState = state.parties[hold.party] else { return }
            precondition(charge.bytes <= hold.reserved, "a catch-up built larger than its reservation")
            let unused = hold.reserved - charge.bytes
            state.usedBytes -= unused
            partyState.bytes -= unused
            hold.reserved = 0
            let key = ObjectIdentifier(charge)
            state.charged[key] = Charged(charge: charge, holders: [hold.party: 1], keptWhenIdle: charge.contents != nil)
            hold.charges.append(key)
            state.parties[hold.party] = partyState
            state.holds[id] = hold
        }
    }

    /// Hold `id` is let go: each of its charges is held by one stream fewer (one that no
    /// stream holds any more is kept idle if it may be, else let go), its reservation is
    /// given back.
    fileprivate func release(_ id: Int) {
        withState { state in
            guard let hold = state.holds.removeValue(forKey: id) else { return }
            var partyState = state.parties[hold.party] ?? PartyState()
            partyState.holds -= 1
            partyState.bytes -= hold.reserved
            state.usedBytes -= hold.reserved
            for key in hold.charges {
                guard var charged = state.charged[key] else { continue }
                let count = charged.holders[hold.party, default: 1] - 1
                if count > 0 {
                    charged.holders[hold.party] = count
                } else {
                    charged.holders[hold.party] = nil
                    partyState.bytes -= charged.charge.bytes
                }
                state.charged[key] = charged
                guard charged.holders.isEmpty else { continue }
                state.idle.append(key)
                state.idleBytes += charged.charge.bytes
                if !charged.keptWhenIdle { state.forgetIdle(state.idle.removeLast()) }
            }
            state.parties[hold.party] = partyState.holds == 0 && partyState.bytes == 0 ? nil : partyState
        }
    }

    /// `charge` has been replaced by a newer catch-up: it is not kept once no stream holds
    /// it (let go at once, if none does).
    package func retire(_ charge: CatchUpCharge) {
        withState { state in
            let key = ObjectIdentifier(charge)
            guard var charged = state.charged[key] else { return }
            charged.keptWhenIdle = false
            state.charged[key] = charged
            if let index = state.idle.firstIndex(of: key) { state.forgetIdle(state.idle.remove(at: index)) }
        }
    }

    /// Counts a catch-up refused at `now`; returns the count to log when a line is due
    /// (the first refusal, then at most one line a `lineIntervalMilliseconds`).
    package func countRefusal(now: EpochMilliseconds) -> Int? {
        state.withLock { state in
            state.refusedSinceLine += 1
            if let last = state.lastLine, now - last < Self.lineIntervalMilliseconds { return nil }
            state.lastLine = now
            defer { state.refusedSinceLine = 0 }
            return state.refusedSinceLine
        }
    }

    /// Whether the caller should write, after `lineIntervalMilliseconds`, a line for the
    /// refusals counted but not logged (`flush`): true once until that flush, so the last
    /// refusals of a burst are logged too, without a line per refusal.
    package func claimFlush() -> Bool {
        state.withLock { state in
            guard state.refusedSinceLine > 0, !state.flushClaimed else { return false }
            state.flushClaimed = true
            return true
        }
    }

    /// The refusals counted since the last line, if any, now logged at `now`.
    package func flush(now: EpochMilliseconds) -> Int? {
        state.withLock { state in
            state.flushClaimed = false
            guard state.refusedSinceLine > 0 else { return nil }
            state.lastLine = now
            defer { state.refusedSinceLine = 0 }
            return state.refusedSinceLine
        }
    }
}

/// One catch-up in memory, as the budget counts it: its bytes, and an identity shared by
/// every stream that is sent it.
package final class CatchUpCharge: Sendable {
    let bytes: Int
    /// What holds the bytes (a `CatchUpBase`), kept by the budget while no stream holds
    /// it so that later streams may share it; nil for bytes that one stream owns, let go
    /// with its hold.
    package let contents: (any AnyObject & Sendable)?

    package init(bytes: Int, contents: (any AnyObject & Sendable)? = nil) {
        self.bytes = bytes
        self.contents = contents
    }
}

/// One stream's hold on the budget for its catch-up: what it reserved while the catch-up
/// was built and the charges it holds. Everything is given back when the hold is dropped —
/// the stream has sent its catch-up, the stream is gone, or the catch-up was refused or
/// never reached it.
package final class CatchUpHold: Sendable {
    private let budget: CatchUpBudget
    private let id: Int

    fileprivate init(budget: CatchUpBudget, id: Int) {
        self.budget = budget
        self.id = id
    }

    deinit { budget.release(id) }

    /// Whether anything more may be taken at all (asked before reading).
    package var mayTakeMore: Bool { budget.mayTakeMore(id) }

    /// Names the stream the catch-up is for: the budget may close it while its peer
    /// takes nothing (see "A floor").
    package func isFor(_ holder: any CatchUpHolder) { budget.setHolder(id, holder) }

    /// Holds `charge` (a catch-up built for another stream); false when refused.
    package func join(_ charge: CatchUpCharge) -> Bool { budget.join(id, charge) }

    /// Reserves `bytes` more for a catch-up being built; false when refused.
    package func reserve(_ bytes: Int) -> Bool { budget.reserve(id, bytes) }

    /// Turns the reservation into `charge` (at most the bytes reserved), held from now on;
    /// the rest of the reservation is given back.
    package func settle(_ charge: CatchUpCharge) { budget.settle(id, charge) }
}
