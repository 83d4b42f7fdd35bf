import HeadwayCore
import HeadwayStore
import Lifecycle
import Telemetry

/// Episodes of a storage that refuses writes (a full disk, a read-only filesystem), told
/// from the writer's batches: an episode begins with the first batch the storage refuses,
/// and ends with the next batch that commits changed rows (a batch that wrote nothing —
/// reads, refused updates — commits even on a full disk). Pure: the times are given.
struct StorageEpisode: Equatable {
    /// What changed with a batch, worth one log line.
    enum Change: Equatable {
        /// The storage began refusing writes (or now refuses them for another reason).
        case began(StorageFailure)
        /// A batch committed again after `batchesRefused` refused ones, `milliseconds` after
        /// the first of them.
        case ended(StorageFailure, batchesRefused: Int, milliseconds: Int64)
    }

    /// The failure of the episode under way; nil while batches commit.
    private(set) var failure: StorageFailure?
    /// Batches refused since the episode began.
    private(set) var batchesRefused = 0
    /// When the episode began.
    private(set) var since: EpochMilliseconds = 0

    /// Notes a batch over at `now`: committed (`wrote`: with changed rows), or not (with
    /// the storage's failure if the storage refused it). A batch that failed for another
    /// reason, or committed without writing, changes nothing.
    mutating func note(committed: Bool, wrote: Bool, failure batchFailure: StorageFailure?,
                       at now: EpochMilliseconds) -> Change? {
        if committed {
            guard let failure, wrote else { return nil }
            defer { self = StorageEpisode() }
            return .ended(failure, batchesRefused: batchesRefused, milliseconds: max(0, now - since))
        }
        guard let batchFailure else { return nil }
        if failure == nil { since = now }
        defer {
            failure = batchFailure
            batchesRefused += 1
        }
        return failure == batchFailure ? nil : .began(batchFailure)
    }
}

/// Logs each episode of a refusing storage once, however many requests it refuses (they
/// are answered 503 without a line each): `storage.full` or `storage.read_only` at its
/// first refused batch, `storage.writable` at the next commit. Observes the writer's
/// batches (on the writer thread).
final class StorageAlarm: Sendable {
    private let episode = Locked(StorageEpisode())
    private let logger: Logger
    private let clock: any WallClock

    init(logger: Logger, clock: any WallClock) {
        self.logger = logger
        self.clock = clock
    }

    /// The writer's observer: one batch over.
    func observe(_ batch: GroupCommitWriter.BatchReport) {
        // Most batches commit outside any episode: no clock read, one uncontended lock.
        let change = episode.withLock { episode in
            episode.note(committed: batch.committed, wrote: batch.changedRows, failure: batch.error?.storageFailure,
                         at: batch.committed && episode.failure == nil ? 0 : clock.now())
        }
        switch change {
        case nil: break
        case .began(.full):
            logger.log(.error, "storage.full", [
                "error": batch.error.map { "\($0)" } ?? "",
                "detail": "the disk holding the database is full: writes are refused with 503 storage_full "
                    + "until space is freed; reads and event streams go on",
            ])
        case .began(.readOnly):
            logger.log(.error, "storage.read_only", [
                "error": batch.error.map { "\($0)" } ?? "",
                "detail": "the database cannot be written: writes are refused with 503 storage_read_only "
                    + "until it is writable again; reads and event streams go on",
            ])
        case .ended(let failure, let batchesRefused, let milliseconds):
            logger.log(.warn, "storage.writable", [
                "after": failure == .full ? "storage_full" : "storage_read_only",
                "batches_refused": "\(batchesRefused)",
                "seconds": "\(Double(milliseconds) / 1000)",
            ])
        }
    }
}

extension StorageAlarm {
    /// Whether `error` is a refusal of the storage, which the alarm logs once per episode
    /// (so the maintenance jobs that keep failing with it need not log it every time).
    static func isStorageRefusal(_ error: any Error) -> Bool { (error as? DatabaseError)?.storageFailure != nil }
}
