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
}
