import Foundation
import Lifecycle
import Synchronization

/// Whether the writer reaches the database now, and how long in all it has not, as the
/// writer tells it (`GroupCommitWriter`): a batch that failed because the database could
/// not be reached (`DatabaseError.isUnavailable`: PostgreSQL down or restarting) begins an
/// episode; the next batch that commits, or the writer's own look while it is unavailable
/// (about once a second, so that the end is seen without traffic), ends it. `report` hears
/// each change (on the writer's thread): what the operator's log says, and what
/// `/metrics` shows (`headway_database_available`, `headway_database_unavailable_seconds_total`).
/// Never unavailable on SQLite, whose failures are the storage's (`StorageFailure`).
public final class DatabaseAvailability: Sendable {
    /// A change: the database became unavailable (with the error that said so), or
    /// available again (with how long the episode lasted, in seconds).
    public enum Change: Sendable, Equatable {
        case unavailable(error: String)
        case available(afterSeconds: Double)
    }

    private struct State {
        /// Monotonic nanoseconds when the episode under way began; nil while available.
        var unavailableSince: UInt64?
        /// Nanoseconds of the episodes over.
        var pastNanoseconds: UInt64 = 0
    }

    /// Shared by the writer's thread (tells) and the threads that read `/metrics`.
    private let state = Locked(State())
    private let now: @Sendable () -> UInt64
    private let report: @Sendable (Change) -> Void

    /// `now`: monotonic nanoseconds (injected by tests); `report` hears each change.
    public init(now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds },
                report: @escaping @Sendable (Change) -> Void = { _ in }) {
        self.now = now
        self.report = report
    }

    /// Whether the writer reached the database the last time it tried.
    public var isAvailable: Bool { state.withLock { $0.unavailableSince == nil } }

    /// Seconds the database was unavailable in all, the episode under way included.
    public var unavailableSeconds: Double {
        let at = now()
        let nanoseconds = state.withLock { state in
            state.pastNanoseconds + (state.unavailableSince.map { at &- $0 } ?? 0)
        }
        return Double(nanoseconds) / 1e9
    }

    /// The writer could not reach the database (`error` said so).
    public func unreachable(_ error: DatabaseError) {
        let at = now()
        let began = state.withLock { state in
            guard state.unavailableSince == nil else { return false }
            state.unavailableSince = at
            return true
        }
        if began { report(.unavailable(error: "\(error)")) }
    }

    /// The writer reached the database.
    public func reached() {
        let at = now()
        let episode: UInt64? = state.withLock { state in
            guard let since = state.unavailableSince else { return nil }
            state.unavailableSince = nil
            state.pastNanoseconds += at &- since
            return at &- since
        }
        if let episode { report(.available(afterSeconds: Double(episode) / 1e9)) }
    }

    /// Connections of this process made again after the server dropped them (a restart,
    /// `pg_terminate_backend`), whichever part held them: the writer, the readers, the
    /// listener, the leader's. One count per process: a daemon has one database.
    public static var reconnects: Int { reconnectCount.load(ordering: .relaxed) }

    /// Counts a connection made again (the engine's connection calls it).
    static func countReconnect() { reconnectCount.add(1, ordering: .relaxed) }

    private static let reconnectCount = Atomic<Int>(0)

    /// Whether connections to the database server may be opened, or made again (the
    /// engine's connection asks before each attempt): until `stopConnecting`.
    static var mayConnect: Bool { connectingAllowed.load(ordering: .acquiring) }

    /// From now on no connection to the database server is opened or made again: a
    /// statement that needs one fails at once as unavailable. For the stop of a daemon's
    /// process: each part still waiting on a server that does not answer (the network
    /// cut) would otherwise hold the stop for a connection attempt of its own, one after
    /// the other. A process whose connections are all up loses nothing by it.
    package static func stopConnecting() { connectingAllowed.store(false, ordering: .releasing) }

    private static let connectingAllowed = Atomic(true)

    /// How long one statement may run on the database server, in milliseconds
    /// (`--db-timeout`): the server cancels it past that (PostgreSQL's `statement_timeout`,
    /// set in every session this process opens from then on), and a server that sends
    /// nothing for that long plus `silenceMarginMilliseconds` is taken as frozen: the
    /// connection is given up, and what waited on it fails as unavailable.
    package static var statementTimeoutMilliseconds: Int { statementTimeout.load(ordering: .relaxed) }

    /// Sets `statementTimeoutMilliseconds`, before the process opens its connections.
    package static func limitStatements(toMilliseconds milliseconds: Int) {
        statementTimeout.store(milliseconds, ordering: .relaxed)
    }

    /// How much longer than `statementTimeoutMilliseconds` the daemon waits for a word from
    /// the server: a live server's own cancel (or a `COMMIT`'s flush, which no timeout
    /// interrupts, on a slow disk) comes first.
    package static let silenceMarginMilliseconds = 5_000

    private static let statementTimeout = Atomic<Int>(10_000)
}
