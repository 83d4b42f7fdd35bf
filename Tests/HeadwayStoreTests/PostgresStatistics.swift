import Foundation
import Testing
@testable import HeadwayStore

/// The server's statistics of `tasks`, for tests of what an update writes on PostgreSQL.
extension EngineWriter {
    /// The rows of `tasks` the server's statistics count as inserted and updated.
    func taskRowsWritten() throws -> Int64 {
        try read { database in
            try database.scalar("SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'tasks'") ?? 0
        }
    }

    /// The updates of rows of `tasks`, and how many of them were heap-only (no index written).
    func taskUpdates() throws -> (all: Int64, heapOnly: Int64) {
        try read { database in
            try database.rows("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks'") {
                ($0.int(0), $0.int(1))
            }.first ?? (0, 0)
        }
    }

    /// Has the writer's connection report its statistics as soon as its batch ends, then
    /// waits (a bounded number of polls: the report is sent when the connection goes
    /// idle) until the statistics count at least `rows` rows of `tasks` written.
    func flushStatistics(untilTaskRowsWritten rows: Int64) throws -> Bool {
        try write { _, database in try database.execute("SELECT pg_stat_force_next_flush()") }
        for _ in 0..<1_000 {
            if try taskRowsWritten() >= rows { return true }
            usleep(5_000)
        }
        return false
    }
}
