import CSQLite
import Foundation
import Glibc
import HeadwayCore
import Testing
@testable import HeadwayStore

/// SQLite's extended result codes used here (C macros that Swift does not import).
private let SQLITE_IOERR_WRITE: Int32 = SQLITE_IOERR | (3 << 8)
private let SQLITE_IOERR_FSYNC: Int32 = SQLITE_IOERR | (4 << 8)
private let SQLITE_IOERR_TRUNCATE: Int32 = SQLITE_IOERR | (6 << 8)
private let SQLITE_IOERR_READ: Int32 = SQLITE_IOERR | (1 << 8)
private let SQLITE_IOERR_SHMOPEN: Int32 = SQLITE_IOERR | (18 << 8)
private let SQLITE_READONLY_RECOVERY: Int32 = SQLITE_READONLY | (1 << 8)
private let SQLITE_READONLY_DBMOVED: Int32 = SQLITE_READONLY | (4 << 8)
private let SQLITE_CONSTRAINT_COMMITHOOK: Int32 = SQLITE_CONSTRAINT | (2 << 8)

/// Which SQLite errors are refusals of the storage (a full disk, a read-only filesystem),
/// answered 503 and retried later, and which are not.
@Suite struct StorageFailureTests {
    @Test(arguments: [
        (SQLITE_FULL, 0, StorageFailure.full),
        (SQLITE_FULL, ENOSPC, .full),
        (SQLITE_IOERR_WRITE, ENOSPC, .full),
        (SQLITE_IOERR_FSYNC, EDQUOT, .full),
        (SQLITE_IOERR_TRUNCATE, ENOSPC, .full),
        (SQLITE_READONLY, 0, .readOnly),
        (SQLITE_READONLY_DBMOVED, 0, .readOnly),
        (SQLITE_READONLY_RECOVERY, 0, .readOnly),
        (SQLITE_IOERR_WRITE, EROFS, .readOnly),
        (SQLITE_IOERR_SHMOPEN, EROFS, .readOnly),
    ] as [(Int32, Int32, StorageFailure)])
    func storageRefusals(_ code: Int32, _ systemError: Int32, _ failure: StorageFailure) {
        #expect(StorageFailure(resultCode: code, systemError: systemError) == failure)
        #expect(DatabaseError(code: code, message: "m", sql: "COMMIT", systemError: systemError).storageFailure == failure)
    }

    @Test(arguments: [
        (SQLITE_IOERR_WRITE, 0), (SQLITE_IOERR_WRITE, EIO), (SQLITE_IOERR_READ, EIO), (SQLITE_BUSY, 0),
        (SQLITE_CONSTRAINT_COMMITHOOK, 0), (SQLITE_CORRUPT, 0), (SQLITE_ERROR, EROFS), (SQLITE_CANTOPEN, ENOSPC),
    ] as [(Int32, Int32)])
    func otherErrorsAreNot(_ code: Int32, _ systemError: Int32) {
        #expect(StorageFailure(resultCode: code, systemError: systemError) == nil)
    }

    @Test func theErrnoIsShownWhenKnown() {
        #expect(DatabaseError(code: SQLITE_IOERR_WRITE, message: "disk I/O error", sql: "COMMIT", systemError: EROFS)
            .description == "SQLite error 778: disk I/O error (errno 30) — while running: COMMIT")
        #expect(DatabaseError(code: SQLITE_FULL, message: "database or disk is full", sql: nil).description
            == "SQLite error 13: database or disk is full")
    }

    /// A database that may not grow (`max_page_count`) fails its writes with SQLITE_FULL as
    /// a full disk does: the writer reports the batch's storage failure, nothing of the
    /// refused change stays in the file or the writer's cache, and once the database may
    /// grow again the same writer stores changes without a restart.
    @Test func aDatabaseThatCannotGrowRefusesWritesUntilItCan() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "kept", name: "Kept", total: 1_000_000), now: 1, in: $0) }
        _ = try fixture.write { try store.progress("kept", ProgressUpdate(completed: 2), now: 2, in: $0) }
        let pages = try fixture.write { database in
            let pages = try database.scalar("PRAGMA page_count") ?? 0
            try database.execute("PRAGMA max_page_count = \(pages)")
            return pages
        }

        var refused: DatabaseError?
        for index in 0..<1_000 where refused == nil {
            do {
                _ = try fixture.write { database in
                    _ = try store.progress("kept", ProgressUpdate(increment: 1), now: 3, in: database)
                    return try store.register(Registration(id: "filler-\(index)", name: String(repeating: "x", count: 2_000)),
                                              now: 3, in: database)
                }
            } catch let error as DatabaseError {
                refused = error
            }
        }
        let error = try #require(refused)
        #expect(error.storageFailure == .full)
        let stored = try fixture.read { try TaskRepository.find("kept", in: $0)?.completed }

        _ = try fixture.write { database in try database.execute("PRAGMA max_page_count = \(pages * 100)") }
        let next = try fixture.write { try store.progress("kept", ProgressUpdate(increment: 1), now: 4, in: $0) }
        #expect(next.outcome.task.completed == (stored ?? 0) + 1, "the refused increment is not remembered")
        #expect(try fixture.read { try TaskRepository.find("kept", in: $0)?.completed } == next.outcome.task.completed)
    }
}
