import Glibc

/// An SQLite file as the daemon sees it (`StorageEngine`): one daemon writes it, and
/// it is a file of ours, which others should not read.
struct SQLiteEngine: StorageEngine {
    let location: String
    var isShared: Bool { false }
    var migrations: [Migration] { EmbeddedMigrations.all }
    func fileModeOpenToOthers() -> mode_t? { PrivateFile.modeOpenToOthers(location) }
    var fileCommandsRefusal: String? { nil }
    /// A file has no server to wait for.
    func waitForServer(upTo seconds: Double, stopRequested: () -> Bool,
                       waiting: (_ waitedSeconds: Double, _ finding: String) -> Void) -> String? { nil }
}
