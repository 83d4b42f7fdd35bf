import Dispatch
import Glibc
import Lifecycle
import Synchronization

/// Wakes this daemon's writer when another daemon sharing the PostgreSQL database has
/// committed changes, so that its subscribers get them without waiting for a write of
/// its own: a service whose thread holds a connection that `LISTEN`s on
/// `SharedWriting.channel` and, when another session's notification names a change not yet
/// delivered (or, every `pollInterval`, when `stream_state` shows one), asks the writer to catch up
/// (`GroupCommitWriter.submitCatchUp`: between batches, it reads and delivers the changes
/// in order with its own, `SharedWriting.catchUp`). The
/// notification is only a wake-up: lost ones (a dropped connection, a full queue) cost at
/// most `pollInterval` of latency. A dropped connection is made again, and listens again.
public final class ChangeListener: Service {
    private let location: String
    private let writer: GroupCommitWriter
    private let sharedWriting: SharedWriting
    private let pollInterval: Double
    private let stopping = Atomic(false)
    /// Whether an empty job is queued and has not run yet (one is enough).
    private let catchUpQueued = Atomic(false)
    /// How many times a notification or a look at `stream_state` found a change not yet
    /// delivered, and asked the writer to catch up (for tests).
    let catchUpsAsked = Atomic(0)
    /// Opened by `prepare` (the group's thread), used by the listener's thread, closed by the stop.
    private let connection: Locked<Database?> = Locked(nil)
    private let reportFailure: @Sendable (String) -> Void
    private let reportListening: @Sendable () -> Void

    /// Listens on the database at `location` for `writer`'s `sharedWriting`; looks at
    /// `stream_state` every `pollInterval` seconds too. `reportFailure` gets a line when
    /// the connection fails (it is tried again each `pollInterval`); `reportListening` is
    /// called once it listens again on a new connection.
    public init(location: String, writer: GroupCommitWriter, sharedWriting: SharedWriting, pollInterval: Double = 1,
                reportFailure: @escaping @Sendable (String) -> Void = { _ in },
                reportListening: @escaping @Sendable () -> Void = {}) {
        self.location = location
        self.writer = writer
        self.sharedWriting = sharedWriting
        self.pollInterval = pollInterval
        self.reportFailure = reportFailure
        self.reportListening = reportListening
    }

    public func prepare() throws {
        let database = try Database(path: location)
        try database.postgres.addSessionSetting("LISTEN \(SharedWriting.channel)")
        database.confine(to: .noThread)
        connection.withLock { $0 = database }
    }

    public func run() {
        guard let database = connection.withLock({ $0 }) else { return }
        database.confine(to: .currentThread)
        defer { database.close() }
        var nextPoll = DispatchTime.now()
        var failing = false
        while !stopping.load(ordering: .acquiring) {
            do {
                // Short waits, so a requested stop is seen within a quarter of a second.
                var pollDescriptor = pollfd(fd: database.postgres.socket, events: Int16(POLLIN), revents: 0)
                _ = poll(&pollDescriptor, 1, 250)
                // This daemon's own commits are delivered by its writer: their notifications
                // wake nothing (the writer's session sent them).
                let writerSession = sharedWriting.writerSession
                var newest = try database.postgres.takeNotifications()
                    .compactMap { $0.sender == writerSession ? nil : Int64($0.payload) }.max()
                if DispatchTime.now() >= nextPoll {
                    nextPoll = .now() + pollInterval
                    newest = max(newest ?? 0, try database.scalar("SELECT last_change FROM stream_state WHERE singleton = 1") ?? 0)
                }
                if failing {
                    // The statements above ran on a new connection, which ran `LISTEN` again
                    // first (a session setting). What was notified meanwhile is lost: the
                    // writer reads the feed now, so nothing waits for the next look.
                    reportListening()
                    wakeWriter()
                }
                if let newest, newest > sharedWriting.deliveredThrough {
                    catchUpsAsked.add(1, ordering: .relaxed)
                    wakeWriter()
                }
                failing = false
            } catch {
                if !failing { reportFailure("\(error)") }
                failing = true
                // The next statement connects again (`PostgresConnection`); wait before it.
                for _ in 0..<Int(pollInterval * 4) where !stopping.load(ordering: .acquiring) { usleep(250_000) }
            }
        }
    }

    /// Asks the writer to catch up, unless it was asked and has not done it yet.
    private func wakeWriter() {
        guard !catchUpQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        writer.submitCatchUp { [self] _ in catchUpQueued.store(false, ordering: .releasing) }
    }

    public func requestStop() { stopping.store(true, ordering: .releasing) }
}

/// Which daemon of those sharing a PostgreSQL database runs the stall sweeper and
/// retention: the one holding a session-level advisory lock on a connection of its own.
/// `isLeader()` (called by the maintenance thread before each sweep) tries to take the
/// lock while it does not hold it, and checks its connection about once a second while it
/// does. When the leader dies, its server session ends and releases the lock: another
/// daemon takes it at its next try, within a sweep interval; a leader that stops running
/// (SIGSTOP) loses its session, and the lead, after `idleSessionTimeout`. Two leaders at once (a
/// connection lost without the old leader noticing yet) would do no harm: every sweep and
/// prune runs in a writer batch holding the writers' lock, and judges each task as
/// committed, so a stall is raised once.
public final class Leadership: Sendable {
    /// The advisory lock's key (an arbitrary constant shared by every daemon).
    static let lockKey: Int64 = 0x4865_6164_7761_7902
    /// 1 if this session holds the lock (`pg_locks` shows a bigint key as two halves).
    static let holdsLockSQL = """
        SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
        AND classid::bigint = \(lockKey >> 32) AND objid::bigint = \(lockKey & 0xffff_ffff) AND objsubid = 1
        """

    private struct State {
        var database: Database?
        var isLeader = false
        var nextCheck = DispatchTime.now()
        var nextTry = DispatchTime.now()
        /// Whether the lock's connection was lost and not made again yet.
        var connectionLost = false
    }

    private let location: String
    /// Shared by the threads that ask whether this daemon leads (sweeper, dispatcher) and the stop (resign).
    private let state = Locked(State())
    private let report: @Sendable (_ leading: Bool, _ detail: String?) -> Void

    /// Leadership among the daemons sharing the database at `location`; `report` gets each
    /// change: now leading (no detail), the lead lost (the error that ended it), or given up
    /// at a stop (not leading, no detail).
    public init(location: String, report: @escaping @Sendable (_ leading: Bool, _ detail: String?) -> Void = { _, _ in }) {
        self.location = location
        self.report = report
    }

    /// Whether this daemon leads now; tries to become the leader if it does not.
    public func isLeader() -> Bool {
        state.withLock { state in
            let now = DispatchTime.now()
            do {
                if state.isLeader {
                    guard now >= state.nextCheck else { return true }
                    state.nextCheck = now + 1
                    // The lock lives as long as the session. The connection may have been
                    // made again (the server restarted): ask whether this session holds it.
                    state.database!.confine(to: .currentThread)
                    if try state.database!.scalar(Self.holdsLockSQL) == 1 { return true }
                    state.isLeader = false
                    report(false, "the database session that held the lead ended (the server restarted, "
                               + "or this daemon was paused for longer than \(Self.idleSessionTimeout))")
                    return false
                }
                guard now >= state.nextTry else { return false }
                state.nextTry = now + 0.25
                if state.database == nil {
                    state.database = try Self.connect(location)
                    if state.connectionLost { DatabaseAvailability.countReconnect() }
                    state.connectionLost = false
                }
                state.database!.confine(to: .currentThread)
                let acquired = try state.database!.scalar("SELECT pg_try_advisory_lock(\(Self.lockKey))::integer") == 1
                if acquired {
                    state.isLeader = true
                    state.nextCheck = now + 1
                    report(true, nil)
                }
                return acquired
            } catch {
                // A broken connection has lost the lock with its session: start afresh.
                state.database?.close()
                if state.database != nil { state.connectionLost = true }
                state.database = nil
                state.nextTry = now + 1
                if state.isLeader { report(false, "\(error)") }
                state.isLeader = false
                return false
            }
        }
    }

    /// How long the leader's session may stay idle before the server ends it, releasing the
    /// lock: a leader checks its session about once a second, so only a daemon that stopped
    /// running (frozen by SIGSTOP, its machine suspended) stays idle that long, and another
    /// daemon then takes the lead instead of no one sweeping until it resumes.
    static let idleSessionTimeout = "10s"

    /// A connection for the lock, whose session the server ends after `idleSessionTimeout`
    /// of silence (where the server knows the setting: PostgreSQL 14 and later).
    private static func connect(_ location: String) throws -> Database {
        let database = try Database(path: location)
        do {
            try database.postgres.addSessionSetting("SET idle_session_timeout = '\(idleSessionTimeout)'")
        } catch {
            // An older server without the setting: a frozen leader keeps the lead until it resumes.
            guard error.sqlState == "42704" else { throw error }
        }
        return database
    }

    /// Gives the lead up (at a stop), so another daemon takes it at once.
    public func resign() {
        state.withLock { state in
            state.database?.confine(to: .currentThread)
            state.database?.close()
            state.database = nil
            if state.isLeader { report(false, nil) }
            state.isLeader = false
        }
    }
}
