import CLibPQ
import Dispatch
import Glibc

/// A PostgreSQL database (`postgresql://…`) as the daemon sees it (`StorageEngine`):
/// several daemons may share it, and it has no file of ours.
struct PostgresEngine: StorageEngine {
    let location: String
    var isShared: Bool { true }
    var migrations: [Migration] { EmbeddedMigrations.postgres }
    func fileModeOpenToOthers() -> mode_t? { nil }
    var fileCommandsRefusal: String? {
        "headway db works on SQLite files; for a PostgreSQL database use its own tools "
            + "(psql, pg_dump, pg_amcheck) or the daemon's /readyz and /metrics"
    }

    /// Asks the server whether it takes connections (`PQping`, which needs no password and
    /// no database), about once a second: a server that does not answer or refuses for now
    /// (starting up, shutting down, recovering after a crash) is waited for; one that takes
    /// connections, or a URI libpq cannot use, ends the wait, and opening the database
    /// then succeeds or says what is wrong. Each question waits at most the connection's
    /// `connect_timeout`, so the wait ends within that of `seconds`.
    func waitForServer(upTo seconds: Double, stopRequested: () -> Bool,
                       waiting: (_ waitedSeconds: Double, _ finding: String) -> Void) -> String? {
        let target = PostgresConnection.withNetworkDefaults(location)
        let start = DispatchTime.now()
        var nextReport = start
        while true {
            let finding: String
            switch PQping(target) {
            case PQPING_OK: return nil
            case PQPING_REJECT: finding = "the server refuses connections for now (starting up, shutting down or recovering)"
            case PQPING_NO_RESPONSE: finding = "the server does not answer"
            default: return nil  // PQPING_NO_ATTEMPT: a URI libpq cannot use; opening the database says why
            }
            let now = DispatchTime.now()
            let waited = Double(now.uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
            guard waited < seconds, !stopRequested() else { return finding }
            if now >= nextReport {
                waiting(waited, finding)
                nextReport = now + waitReportSeconds
            }
            usleep(UInt32(min(1, max(0, seconds - waited)) * 1_000_000))
        }
    }
}
