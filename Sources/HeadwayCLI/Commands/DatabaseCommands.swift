import Foundation
import HeadwayCore
import HeadwayStore

/// `headway db status|check|backup`: the daemon's SQLite file, read directly (no server).
/// The database is always opened read-only and never created: a missing file is an error
/// (exit 1), so a mistyped path cannot leave an empty database behind.
public struct DatabaseCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "db", abstract: "Inspect, check and back up the database file (no server needed)",
        subcommands: [DatabaseStatusCommand.self, DatabaseCheckCommand.self, DatabaseBackupCommand.self],
        examples: ["headway db status --db /var/lib/headway/headway.db"])
    public static let arguments: [ArgumentDefinition] = []

    public init(_ values: ParsedValues) {}

    public func run(_ context: CommandContext) throws {}

    /// The database file option every `db` command takes.
    static let path = Option<String>("db", valueName: "path",
                                     help: "The daemon's SQLite database (env HEADWAY_DB; default ./headway.db)")

    /// The path from `--db`, else `HEADWAY_DB`, else `./headway.db`.
    static func path(_ values: ParsedValues) -> String {
        if let path = values[Self.path], !path.isEmpty { return path }
        if let path = ProcessInfo.processInfo.environment["HEADWAY_DB"], !path.isEmpty { return path }
        return "headway.db"
    }

    /// Opens the Headway database at `path` read-only; fails clearly when the file is
    /// missing or is not a Headway database.
    static func open(_ path: String) throws -> Database {
        if let refusal = storageEngine(for: path).fileCommandsRefusal { throw DatabaseCommandError(refusal) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw DatabaseCommandError("no database at \(path) (give --db PATH or HEADWAY_DB; headway never creates one)")
        }
        do {
            let database = try Database(path: path, readOnly: true)
            guard try database.schemaVersion() != nil else {
                database.close()
                throw DatabaseCommandError("\(path) is not a Headway database (no schema_migrations table)")
            }
            return database
        } catch let error as DatabaseError {
            throw DatabaseCommandError("cannot read \(path): \(error.message)")
        }
    }
}

/// A `db` command that failed (exit 1); printed as `headway: <message>`.
struct DatabaseCommandError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `headway db status`: schema version, file sizes, tasks by state.
public struct DatabaseStatusCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show the schema version, file sizes and task counts",
        examples: ["headway db status --db /var/lib/headway/headway.db"])
    public static let arguments = [DatabaseCommand.path.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let path = DatabaseCommand.path(values)
        let database = try DatabaseCommand.open(path)
        defer { database.close() }
        let version: Int
        let counts: [(state: String, count: Int64)]
        let sizes: StorageSizes
        do {
            version = try database.schemaVersion() ?? 0
            counts = try database.taskCountsByState()
            sizes = try database.storageSizes()
        } catch {
            throw DatabaseCommandError("cannot read \(path): \(error.message)")
        }
        let latest = Migrator().latestVersion
        let size = Int(sizes.databaseBytes)
        let walSize = Int(sizes.writeAheadLogBytes)
        if context.options.json {
            let tasks = JSONObject(Dictionary(uniqueKeysWithValues: counts.map { ($0.state, JSONValue.integer($0.count)) }))
            let object: JSONObject = [
                "path": .string(path), "schema_version": .integer(Int64(version)),
                "latest_schema_version": .integer(Int64(latest)), "file_bytes": .integer(Int64(size)),
                "wal_bytes": .integer(Int64(walSize)), "tasks": .object(tasks),
            ]
            context.print(JSONValue.object(object).canonicalText)
            return
        }
        let note = version == latest ? "" : version < latest ? " (this build has \(latest); headwayd migrates at start)"
            : " (newer than this build's \(latest))"
        context.print("database   \(path)")
        context.print("schema     \(version)\(note)")
        context.print("file       \(Self.bytes(size))")
        context.print("wal        \(Self.bytes(walSize))")
        let total = counts.reduce(0) { $0 + $1.count }
        context.print("tasks      \(total)" + (counts.isEmpty ? "" : ": ")
                      + counts.map { "\($0.count) \($0.state)" }.joined(separator: ", "))
    }

    /// `12,345 bytes`.
    static func bytes(_ count: Int) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.groupingSeparator = ","
        formatter.usesGroupingSeparator = true
        return (formatter.string(from: NSNumber(value: count)) ?? "\(count)") + " bytes"
    }
}

/// `headway db check`: `PRAGMA integrity_check`; exit 1 with the problems when not ok.
public struct DatabaseCheckCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "check", abstract: "Check the database's integrity (PRAGMA integrity_check)",
        discussion: """
        Prints 'ok', or the problems found and exits 1. With --json: {"ok": bool,
        "problems": [...]}.
        """,
        examples: ["headway db check --db /var/lib/headway/headway.db"])
    public static let arguments = [DatabaseCommand.path.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let path = DatabaseCommand.path(values)
        let database = try DatabaseCommand.open(path)
        defer { database.close() }
        let problems: [String]
        do {
            problems = try database.integrityProblems()
        } catch {
            throw DatabaseCommandError("cannot check \(path): \(error.message)")
        }
        if context.options.json {
            context.print(JSONValue.object(["ok": .bool(problems.isEmpty),
                                            "problems": .array(problems.map(JSONValue.string))]).canonicalText)
        }
        guard problems.isEmpty else {
            if !context.options.json { for problem in problems { context.print(DisplayWidth.sanitize(problem)) } }
            let count = problems.count == 1 ? "1 problem" : "\(problems.count) problems"
            throw DatabaseCommandError("\(path) failed its integrity check (\(count))")
        }
        if !context.options.json { context.print("ok") }
    }
}

/// `headway db backup FILE`: an online copy while the daemon runs, then checked.
public struct DatabaseBackupCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "backup", abstract: "Copy the database to a new file while the daemon runs",
        discussion: """
        Uses SQLite's online backup API from one read snapshot, so the daemon keeps writing;
        the copy is a single file (no WAL) and passes integrity_check. It holds webhook
        secrets and token hashes: it is made mode 0600 whatever the umask, first as
        FILE.partial, then renamed. Neither FILE nor FILE.partial may exist, not even as a
        symbolic link.
        """,
        examples: ["headway db backup /backups/headway-$(date +%F).db --db /var/lib/headway/headway.db"])
    static let file = Argument<String>("file", help: "The new file to write")
    public static let arguments = [file.definition, DatabaseCommand.path.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let path = DatabaseCommand.path(values)
        let destination = values[Self.file]
        let exists = DatabaseCommandError("\(destination) exists already (a backup never overwrites a file)")
        // A symbolic link counts, even one that leads nowhere: nothing is written through one.
        guard !PrivateFile.exists(destination) else { throw exists }
        let database = try DatabaseCommand.open(path)
        defer { database.close() }
        // Written beside the destination, renamed only once whole and checked. A file of
        // that name is someone's: never removed unless this backup made it, which
        // `PrivateFile.create` does only where nothing was (O_EXCL, O_NOFOLLOW). So are
        // SQLite's files beside it (a journal there would be rolled back into the copy).
        let partial = destination + ".partial"
        let suffixes = ["", "-journal", "-wal", "-shm"]
        for suffix in suffixes where PrivateFile.exists(partial + suffix) {
            throw DatabaseCommandError("\(partial + suffix) exists (a backup under way, or one that was stopped); remove it first")
        }
        do {
            try PrivateFile.create(partial)
        } catch where error.systemError == EEXIST {
            throw DatabaseCommandError("\(partial) exists (a backup under way, or one that was stopped); remove it first")
        } catch {
            throw DatabaseCommandError("cannot create \(error)")
        }
        let removePartial = { for suffix in suffixes { unlink(partial + suffix) } }
        do {
            try database.backup(to: partial)
            let copy = try Database(path: partial, readOnly: true)
            let problems = try copy.integrityProblems()
            copy.close()
            guard problems.isEmpty else {
                throw DatabaseCommandError("the copy failed its integrity check: \(problems.prefix(3).joined(separator: "; "))")
            }
            try PrivateFile.rename(partial, to: destination)
        } catch let error as DatabaseError {
            removePartial()
            throw DatabaseCommandError("backup of \(path) failed: \(error.message)")
        } catch let error as DatabaseCommandError {
            removePartial()
            throw error
        } catch let error as PrivateFileError where error.systemError == EEXIST {
            removePartial()
            throw exists
        } catch {
            removePartial()
            throw DatabaseCommandError("backup of \(path) failed: \(error)")
        }
        if context.options.json {
            let bytes = (try? FileManager.default.attributesOfItem(atPath: destination)[.size] as? Int).flatMap { $0 } ?? 0
            context.print(JSONValue.object(["database": .string(path), "backup": .string(destination),
                                            "bytes": .integer(Int64(bytes))]).canonicalText)
        } else {
            context.print("backed up \(path) to \(destination)")
        }
    }
}
