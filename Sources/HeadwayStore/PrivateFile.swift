import Glibc

/// How Headway creates the files that hold a database: webhooks' secrets in clear, tokens'
/// hashes, every task. Each is made here, mode 0600 whatever the umask (SQLite would make it
/// 0644 under the usual umask 022, and gives its `-wal`, `-shm` and `-journal` files the
/// mode of the database file), and never through a symbolic link: a link planted where the
/// file is to go would have it written wherever the link leads.
public enum PrivateFile {
    /// The mode of every database file and backup Headway creates: its owner's alone.
    public static let mode: mode_t = 0o600

    /// Creates an empty file at `path`, mode 0600, failing with `EEXIST` if anything is
    /// there already, a symbolic link too (even one that leads nowhere).
    public static func create(_ path: String) throws(PrivateFileError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw PrivateFileError(path: path, systemError: errno) }
        // The umask may have taken bits off the mode given to open(2): set it exactly.
        let changed = fchmod(descriptor, mode) == 0
        let error = errno
        close(descriptor)
        guard changed else {
            unlink(path)
            throw PrivateFileError(path: path, systemError: error)
        }
    }

    /// Creates the database file at `path` (as `create`) when nothing is there, so that
    /// SQLite opens a file of mode 0600 rather than making one itself. Something there is
    /// left as it is (its mode too: the operator's), unless it is a symbolic link that leads
    /// nowhere, which is refused: SQLite would create the link's target.
    public static func createDatabaseIfMissing(_ path: String) throws(PrivateFileError) {
        do {
            try create(path)
        } catch where error.systemError == EEXIST {
            var target = stat()
            guard stat(path, &target) == 0 || errno != ENOENT else {
                throw PrivateFileError(path: path, systemError: ENOENT,
                                       reason: "a symbolic link to a missing file (a database is never created through a link)")
            }
        }
    }

    /// Gives the file at `source` the name `destination` in one step that never replaces
    /// anything there (a file, or a symbolic link): a second name (link(2), which fails with
    /// `EEXIST` if `destination` exists), then the first removed. On a filesystem without
    /// hard links, a rename once `destination` was seen not to exist.
    public static func rename(_ source: String, to destination: String) throws(PrivateFileError) {
        if link(source, destination) == 0 {
            unlink(source)
            return
        }
        let error = errno
        guard error == EPERM || error == EOPNOTSUPP else {
            throw PrivateFileError(path: destination, systemError: error)
        }
        var existing = stat()
        guard lstat(destination, &existing) != 0 && errno == ENOENT else {
            throw PrivateFileError(path: destination, systemError: EEXIST)
        }
        guard Glibc.rename(source, destination) == 0 else { throw PrivateFileError(path: destination, systemError: errno) }
    }

    /// The permission bits of the file at `path` (through a link) when its group or others
    /// may do anything with it; nil when they may not, or there is no such file.
    public static func modeOpenToOthers(_ path: String) -> mode_t? {
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & 0o077 != 0 else { return nil }
        return status.st_mode & 0o7777
    }

    /// Whether anything is at `path`, a symbolic link that leads nowhere included.
    public static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }
}

/// A file that could not be created or renamed: its path and the system's reason.
public struct PrivateFileError: Error, CustomStringConvertible, Sendable {
    public let path: String
    /// The `errno` of the failure (`EEXIST`: something is at `path` already).
    public let systemError: Int32
    /// Why, in words; the system's message when nil.
    public var reason: String?

    public init(path: String, systemError: Int32, reason: String? = nil) {
        self.path = path
        self.systemError = systemError
        self.reason = reason
    }

    public var description: String { "\(path): \(reason ?? String(cString: strerror(systemError)))" }
}
