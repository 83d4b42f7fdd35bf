import CLibPQ
import CSQLite
import Foundation
import Glibc

/// Whether `location` (what `--db` names) is a PostgreSQL connection URI
/// (`postgresql://…` or `postgres://…`) rather than the path of an SQLite file.
public func isPostgresLocation(_ location: String) -> Bool {
    location.hasPrefix("postgresql://") || location.hasPrefix("postgres://")
}

/// `location` with any password (`user:PASSWORD@`, `password=PASSWORD`) replaced by `***`,
/// for logs and messages.
public func redactedLocation(_ location: String) -> String {
    guard isPostgresLocation(location), let schemeEnd = location.range(of: "://") else { return location }
    var redacted = location
    // Up to the query, not the first `/`: a password may hold a `/` its writer forgot to
    // percent-encode (more is hidden when a path holds an `@`, never less).
    let authorityEnd = redacted[schemeEnd.upperBound...].firstIndex(of: "?") ?? redacted.endIndex
    if let at = redacted[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@"),
       let colon = redacted[schemeEnd.upperBound..<at].firstIndex(of: ":") {
        redacted.replaceSubrange(redacted.index(after: colon)..<at, with: "***")
    }
    if let query = redacted.firstIndex(of: "?") {
        let parameters = redacted[redacted.index(after: query)...].split(separator: "&", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("password=") ? "password=***" : String($0) }
        redacted = String(redacted[...query]) + parameters.joined(separator: "&")
    }
    return redacted
}

/// `message` (libpq's, which may quote a part of the URI it could not parse, such as a
/// badly percent-encoded password) with every password `location` holds, as written and
/// decoded, replaced by `***`.
func redactedMessage(_ message: String, location: String) -> String {
    guard isPostgresLocation(location), let schemeEnd = location.range(of: "://") else { return message }
    var secrets: [Substring] = []
    let authorityEnd = location[schemeEnd.upperBound...].firstIndex(of: "?") ?? location.endIndex
    if let at = location[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@"),
       let colon = location[schemeEnd.upperBound..<at].firstIndex(of: ":") {
        secrets.append(location[location.index(after: colon)..<at])
    }
    if let query = location.firstIndex(of: "?") {
        secrets += location[location.index(after: query)...].split(separator: "&")
            .filter { $0.hasPrefix("password=") }.map { $0.dropFirst("password=".count) }
    }
    var redacted = message
    for secret in secrets where !secret.isEmpty {
        for form in Set([String(secret), String(secret).removingPercentEncoding ?? ""]) where !form.isEmpty {
            redacted = redacted.replacing(form, with: "***")
        }
    }
    return redacted
}

// @unchecked Sendable: a libpq connection handle; `Database` confines its use to one thread.
/// One libpq connection, used through `Database` (which checks the thread). Statements
/// are prepared once per connection, named after their order, with SQLite's parameter
/// markers (`?`, `?N`) turned into PostgreSQL's (`$N`), so one SQL text serves both
/// engines where the dialects agree. Values go and come as text. A connection found
/// broken outside a transaction is reset once before the next statement (the server
/// restarted, say); inside one, the transaction's failure is its caller's to handle.
final class PostgresConnection: @unchecked Sendable {
    private(set) var handle: OpaquePointer?
    private let location: String
    /// Statements run after every connect (and reset): session settings.
    private var sessionSetup: [String] = []
    /// SQL text → the name of its prepared statement on this connection.
    private var prepared: [String: String] = [:]
    /// Rows inserted, updated or deleted by this connection's statements (not counting
    /// triggers), as SQLite's `total_changes` for `Database.rollbacks`.
    private(set) var changedRows: Int64 = 0

    init(location: String) throws(DatabaseError) {
        self.location = Self.withConnectTimeout(location)
        try connect()
    }

    /// How long a connection attempt may take when the URI does not say
    /// (`connect_timeout`; libpq's own default is to wait for ever on an unreachable host).
    /// Per attempt: with `sslmode=prefer` (libpq's default) libpq tries with TLS and then
    /// without, so an unreachable host fails after twice this.
    static let defaultConnectTimeoutSeconds = 10

    /// `location` with `connect_timeout` added unless it has one.
    static func withConnectTimeout(_ location: String) -> String {
        guard !location.contains("connect_timeout=") else { return location }
        return location + (location.contains("?") ? "&" : "?") + "connect_timeout=\(defaultConnectTimeoutSeconds)"
    }

    deinit { close() }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        prepared.removeAll()
    }

    private func connect() throws(DatabaseError) {
        let connection = PQconnectdb(location)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { redactedMessage(Self.trimmed(String(cString: PQerrorMessage($0))), location: location) }
                ?? "cannot connect"
            PQfinish(connection)
            throw DatabaseError.unavailable("cannot connect to PostgreSQL at \(redactedLocation(location)): \(message)")
        }
        // The server's notices and the messages of a closing connection are not written to
        // stderr (libpq's default): errors come back with their statements.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        handle = connection
        prepared.removeAll()
        for sql in sessionSetup { try execute(sql) }
    }

    /// Runs `sql` now and after every reconnection.
    func addSessionSetting(_ sql: String) throws(DatabaseError) {
        sessionSetup.append(sql)
        try execute(sql)
    }

    /// Whether the open transaction failed (a statement of it did): only a rollback (to a
    /// savepoint, or of the whole) ends it.
    var transactionFailed: Bool { handle.map { PQtransactionStatus($0) == PQTRANS_INERROR } ?? false }

    /// Whether a transaction is open (or failed and not yet rolled back).
    var isInsideTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The connection, reconnected first if it was found broken (nothing is lost then: a
    /// broken connection has no transaction left, and the next statement starts afresh).
    private func usableHandle(_ sql: String) throws(DatabaseError) -> OpaquePointer {
        if let handle, PQstatus(handle) == CONNECTION_OK { return handle }
        if let handle {
            PQfinish(handle)
            self.handle = nil
        }
        try connect()
        guard let handle else { throw DatabaseError.unavailable("no connection to PostgreSQL") }
        return handle
    }

    /// Runs `body` (one statement); if the server turns out to have dropped the connection
    /// while it was idle (a restart) and the statement is safe to send again — it begins a
    /// transaction, or it reads outside one — runs it once more on a new connection. A
    /// broken connection is only seen when a statement fails on it.
    private func retryingOnANewConnection<Value>(_ sql: String,
                                                 _ body: () throws(DatabaseError) -> Value) throws(DatabaseError) -> Value {
        let wasIdle = handle.map { PQtransactionStatus($0) == PQTRANS_IDLE } ?? true
        do {
            return try body()
        } catch where error.isUnavailable && wasIdle && Self.isSafeToResend(sql) {
            return try body()
        }
    }

    /// Whether `sql` changes nothing if sent twice: `BEGIN …`, or a `SELECT` outside a transaction.
    static func isSafeToResend(_ sql: String) -> Bool {
        sql.hasPrefix("BEGIN") || sql.hasPrefix("SELECT")
    }

    /// Runs one or more statements without parameters.
    func execute(_ sql: String) throws(DatabaseError) {
        try retryingOnANewConnection(sql) { () throws(DatabaseError) in
            let connection = try usableHandle(sql)
            let result = PQexec(connection, sql)
            defer { PQclear(result) }
            try check(result, sql: sql, connection: connection)
        }
    }

    /// Runs `sql` with `arguments` as a prepared statement; the caller clears the result.
    func query(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError) -> OpaquePointer {
        try retryingOnANewConnection(sql) { () throws(DatabaseError) in try runPrepared(sql, arguments) }
    }

    private func runPrepared(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError) -> OpaquePointer {
        let connection = try usableHandle(sql)
        let name: String
        if let known = prepared[sql] {
            name = known
        } else {
            name = "s\(prepared.count + 1)"
            let result = PQprepare(connection, name, Self.numberedParameters(sql), 0, nil)
            defer { PQclear(result) }
            try check(result, sql: sql, connection: connection)
            prepared[sql] = name
        }
        var texts: [UnsafeMutablePointer<CChar>?] = arguments.map { value in
            switch value {
            case .null: nil
            case .integer(let number): strdup(String(number))
            case .real(let number): strdup(number.isFinite ? "\(number)" : (number.isNaN ? "NaN" : number > 0 ? "Infinity" : "-Infinity"))
            case .text(let text): strdup(text)
            }
        }
        defer { texts.forEach { free($0) } }
        let result = texts.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(buffer.count, 1)) { values in
                PQexecPrepared(connection, name, Int32(arguments.count), arguments.isEmpty ? nil : values, nil, nil, 0)
            }
        }
        do {
            try check(result, sql: sql, connection: connection)
        } catch {
            PQclear(result)
            throw error
        }
        return result!
    }

    /// Throws the error `result` reports, if any; counts the rows a command changed.
    private func check(_ result: OpaquePointer?, sql: String, connection: OpaquePointer) throws(DatabaseError) {
        guard let result else {
            throw DatabaseError.postgres(sqlState: nil, message: Self.trimmed(String(cString: PQerrorMessage(connection))),
                                         sql: sql, connectionLost: PQstatus(connection) != CONNECTION_OK)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            if Self.isWrite(PQcmdStatus(result)), let tuples = PQcmdTuples(result), tuples.pointee != 0 {
                changedRows += Int64(atoi(tuples))
            }
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            throw DatabaseError.postgres(sqlState: state, message: Self.trimmed(String(cString: PQresultErrorMessage(result))),
                                         sql: sql, connectionLost: PQstatus(connection) != CONNECTION_OK)
        }
    }

    /// Whether a command status (`INSERT 0 1`, `SELECT 3`, …) is of a command that
    /// changes rows.
    private static func isWrite(_ status: UnsafeMutablePointer<CChar>?) -> Bool {
        guard let status else { return false }
        let command = String(cString: status)
        return command.hasPrefix("INSERT") || command.hasPrefix("UPDATE") || command.hasPrefix("DELETE")
            || command.hasPrefix("MERGE")
    }

    // MARK: Notifications

    /// The connection's socket, to wait on for notifications (-1 when closed).
    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Reads what the server sent and returns the payloads of the notifications received.
    func takeNotifications() throws(DatabaseError) -> [String] {
        let connection = try usableHandle("LISTEN")
        guard PQconsumeInput(connection) == 1 else {
            throw DatabaseError.unavailable(Self.trimmed(String(cString: PQerrorMessage(connection))))
        }
        var payloads: [String] = []
        while let notification = PQnotifies(connection) {
            payloads.append(String(cString: notification.pointee.extra))
            PQfreemem(notification)
        }
        return payloads
    }

    // MARK: Text

    /// `sql` with SQLite's parameter markers turned into PostgreSQL's: `?N` into `$N` and
    /// each bare `?` into the next number; quoted text and names are left alone.
    static func numberedParameters(_ sql: String) -> String {
        var output = ""
        var next = 1
        var quote: Character?
        var characters = sql.makeIterator()
        var pending: Character? = nil
        while let character = pending ?? characters.next() {
            pending = nil
            if let open = quote {
                output.append(character)
                if character == open { quote = nil }
                continue
            }
            switch character {
            case "'", "\"":
                quote = character
                output.append(character)
            case "?":
                var digits = ""
                while let following = characters.next() {
                    if following.isASCII, following.isNumber { digits.append(following) } else { pending = following; break }
                }
                if digits.isEmpty {
                    output += "$\(next)"
                    next += 1
                } else {
                    output += "$" + digits
                    next = max(next, (Int(digits) ?? 0) + 1)
                }
            default:
                output.append(character)
            }
        }
        return output
    }

    static func trimmed(_ message: String) -> String {
        var message = message
        while let last = message.last, last.isWhitespace { message.removeLast() }
        return message
    }
}

extension DatabaseError {
    /// The database cannot be reached now (PostgreSQL down, restarting, refusing
    /// connections): nothing was changed, and a later try may succeed.
    public static func unavailable(_ message: String) -> DatabaseError {
        var error = DatabaseError(code: SQLITE_CANTOPEN, message: message, sql: nil)
        error.isFromPostgres = true
        error.isUnavailable = true
        return error
    }

    /// An error PostgreSQL reported, with SQLite's code of the same meaning, so that the
    /// rest of the daemon judges both engines' failures alike (`isBusy`, `storageFailure`).
    public static func postgres(sqlState: String?, message: String, sql: String, connectionLost: Bool) -> DatabaseError {
        let state = sqlState ?? ""
        let code: Int32
        switch state {
        case "53100", "53000": code = SQLITE_FULL           // disk_full, insufficient_resources
        case "25006": code = SQLITE_READONLY                // read_only_sql_transaction
        case "40001", "40P01", "55P03", "57014": code = SQLITE_BUSY  // serialization, deadlock, lock timeout, statement timeout
        case _ where state.hasPrefix("23"): code = SQLITE_CONSTRAINT
        default: code = SQLITE_ERROR
        }
        var error = DatabaseError(code: code, message: message, sql: sql)
        error.isFromPostgres = true
        error.sqlState = sqlState
        // The connection is gone (class 08), or the server is going down (57P01–03).
        error.isUnavailable = connectionLost || state.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(state)
        return error
    }
}
