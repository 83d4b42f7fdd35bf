import Dispatch
import Access
import EventStream
import HeadwayCore
import HeadwayStore
import Lifecycle
import Telemetry

/// Keeps the registry current from the maintenance thread: about once a second it writes
/// the uses that are due and applies the rows changed since the generation loaded (those
/// it just wrote included); on every tick (250 ms) it has the event streams of tokens
/// revoked or expired since closed.
struct TokenKeeper: Sendable {
    let registry: TokenRegistry
    let writer: GroupCommitWriter
    let broker: EventBroker
    let clock: any WallClock
    let logger: Logger
    /// A database out of reach fails every look: one line a minute says so.
    let failureLines = LogThrottle(nanoseconds: 60_000_000_000)

    /// One look: uses written when due (all of them when `final`), the rows changed since
    /// the generation loaded applied, dead tokens' streams closed. Waits for its writer job.
    func refresh(final: Bool = false) {
        let now = clock.now()
        let uses = registry.usesToWrite(now: now, all: final)
        let known = registry.generation
        let done = DispatchSemaphore(value: 0)
        writer.submit({ database -> TokenChanges in
            if !uses.isEmpty { try TokenRepository.recordUse(uses, in: database) }
            return try TokenRepository.changes(since: known, in: database)
        }) { [registry, logger, failureLines] result in
            switch result {
            case .success(let changes):
                registry.usesWritten(uses, now: now)
                registry.apply(changes, now: now)
            case .failure(let error):
                // A refusal of the storage is logged once per episode by `StorageAlarm`.
                if (error as? WriterError) != .stopped && !StorageAlarm.isStorageRefusal(error),
                   let unlogged = failureLines.admit(now: DispatchTime.now().uptimeNanoseconds) {
                    logger.log(Maintenance.isPassing(error) ? .warn : .error, "tokens.refresh_failed",
                               ["error": "\(error)", "not_logged_since": "\(unlogged)"])
                }
            }
            done.signal()
        }
        done.wait()
        closeDeadStreams()
    }

    /// Has the streams of tokens revoked or expired since the last look closed (memory
    /// only: the maintenance thread calls it on every tick).
    func closeDeadStreams() {
        let dead = registry.newlyDead(now: clock.now())
        if !dead.isEmpty { broker.closeStreams(ofTokens: dead) }
    }
}
