import CLibPQ
import CSQLite
import Foundation
import Glibc
import Synchronization

// @unchecked Sendable: a libpq connection handle; `Database` confines its use to one thread.
/// One libpq connection, as `Database` runs statements on it (checking the thread). Statements
/// are prepared once per connection, named after their order, with SQLite's parameter
/// markers (`?`, `?N`) turned into PostgreSQL's (`$N`), so one SQL text serves both
/// engines where the dialects agree. Values go and come as text. A connection found
/// broken outside a transaction is reset once before the next statement (the server
/// restarted, say); inside one, the transaction's failure is its caller's to handle.
final class PostgresConnection: EngineConnection, @unchecked Sendable {
    private(set) var handle: OpaquePointer?
    /// The URI as given (`--db`), for messages.
    private let location: String
    /// What libpq connects with: `location` and the daemon's `networkDefaults`.
    private let connectionString: String
    /// Statements run after every connect (and reset): session settings.
    private var sessionSetup: [String] = []
    /// SQL text → the name of its prepared statement on this connection.
    private var prepared: [String: String] = [:]
    /// Rows inserted, updated or deleted by this connection's statements (not counting
    /// triggers), as SQLite's `total_changes` for `Database.rollbacks`.
    private(set) var changedRows: Int64 = 0

    /// How many statements have run (each `run` or `rows` counts once).
    private(set) var statementsRun = 0

    /// Whether statements that return no rows are sent without waiting for their answers,
    /// until the transaction's end (`pipelineUntilCommit`).
    private var pipelineRequested = false
    /// What was sent in pipeline mode and not answered yet, in order: each statement's SQL,
    /// and whether it was the preparation of a statement (`prepared` forgets it if it fails).
    private var pipelineSent: [(sql: String, isPreparation: Bool)] = []

    /// Connects to the server `location` names, with the daemon's `networkDefaults` where
    /// `location` does not set them. Statements wait for a lock as long as
    /// SQLite's busy timeout, then fail as busy; a read-only connection (`access` other
    /// than `.readWrite`) refuses writes by its session's default
    /// (`default_transaction_read_only`).
    /// `statementTimeoutMilliseconds`: the process's `--db-timeout` unless a test says.
    init(location: String, access: ConnectionAccess,
         statementTimeoutMilliseconds: Int = DatabaseAvailability.statementTimeoutMilliseconds) throws(DatabaseError) {
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.location = location
        self.connectionString = Self.withNetworkDefaults(location)
        try connect()
        try addSessionSetting("SET lock_timeout = '\(Database.busyTimeoutMilliseconds)ms'")
        try addSessionSetting(statementTimeoutSQL)
        // Notices (a table that already exists, say) are not worth a line on stderr.
        try addSessionSetting("SET client_min_messages = warning")
        if access != .readWrite { try addSessionSetting("SET default_transaction_read_only = on") }
    }

    /// libpq's connection parameters that the daemon sets when the URI does not, so that a
    /// server that vanishes without closing its connections (its host gone, the network
    /// cut: no reset, no FIN ever comes) is found out within seconds rather than after the
    /// kernel's TCP timeout (about 15 minutes for data sent and never acknowledged; for ever
    /// for a reply awaited in silence): a connection attempt gives up after
    /// `connect_timeout` (libpq's own default waits for ever), an open connection on which
    /// nothing is heard is probed (`keepalives…`), and one whose data or probes go
    /// unacknowledged for `tcp_user_timeout` milliseconds is ended by the kernel, failing
    /// its statement. A server's own `statement_timeout` cannot help there: its answer
    /// would not arrive either. TCP only: a Unix socket ignores all but `connect_timeout`.
    static let networkDefaults: KeyValuePairs<String, String> = [
        "connect_timeout": "5",
        "keepalives": "1",
        "keepalives_idle": "5",
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "10000",
    ]

    /// libpq's environment variable for each of `networkDefaults` that has one: set, it
    /// wins over the daemon's default as it would over libpq's.
    static let networkDefaultVariables = ["connect_timeout": "PGCONNECT_TIMEOUT"]

    /// `location` with each of `networkDefaults` added unless the URI's query sets it (or
    /// its environment variable is set in `environment`), or libpq does not know it
    /// (`known`: an older libpq than 12 has no `tcp_user_timeout`, and would refuse the URI).
    static func withNetworkDefaults(_ location: String,
                                    environment: [String: String] = ProcessInfo.processInfo.environment,
                                    known: Set<String> = libpqOptions) -> String {
        let query = location.firstIndex(of: "?").map { location[location.index(after: $0)...] } ?? ""
        let given = Set(query.split(separator: "&").map { $0.prefix { $0 != "=" } })
        let added = networkDefaults.filter { name, _ in
            known.contains(name) && !given.contains(Substring(name))
                && networkDefaultVariables[name].flatMap { environment[$0] } == nil
        }
        guard !added.isEmpty else { return location }
        return location + (location.contains("?") ? "&" : "?") + added.map { "\($0)=\($1)" }.joined(separator: "&")
    }

    /// The connection parameters this libpq knows (`PQconndefaults`).
    static let libpqOptions: Set<String> = {
        guard let options = PQconndefaults() else { return [] }
        defer { PQconninfoFree(options) }
        var names: Set<String> = []
        var option = options
        while let keyword = option.pointee.keyword {
            names.insert(String(cString: keyword))
            option += 1
        }
        return names
    }()

    deinit { close() }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        prepared.removeAll()
    }

    private func connect() throws(DatabaseError) {
        guard DatabaseAvailability.mayConnect else {
            throw DatabaseError.unavailable("no new connection to PostgreSQL at \(redactedLocation(location)): "
                                            + "the daemon is stopping")
        }
        let connection = PQconnectdb(connectionString)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { redactedMessage(Self.trimmed(String(cString: PQerrorMessage($0))), location: location) }
                ?? "cannot connect"
            PQfinish(connection)
            throw DatabaseError.unavailable("cannot connect to PostgreSQL at \(redactedLocation(location)): \(message)")
        }
        // The server's notices and the messages of a closing connection are not written to
        // stderr (libpq's default): errors come back with their statements.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // Nothing sent may block: a frozen server stops reading, and the writes waiting for
        // it are bounded as the answers are (`awaitAnswer`).
        PQsetnonblocking(connection, 1)
        handle = connection
        gaveUp = nil
        prepared.removeAll()
        pipelineSent.removeAll()
        pipelineRequested = false
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

    /// Whether statements are being sent in libpq's pipeline mode now (for tests).
    var isPipelining: Bool { handle.map { PQpipelineStatus($0) != PQ_PIPELINE_OFF } ?? false }

    /// Whether a transaction is open (or failed and not yet rolled back).
    var isInsideTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The connection, reconnected first if it was found broken (nothing is lost then: a
    /// broken connection has no transaction left, and the next statement starts afresh).
    /// Within `reconnectPauseNanoseconds` of a failed attempt it fails at once, with that
    /// attempt's error: while the server cannot be reached (an attempt may take the whole
    /// `connect_timeout`), the requests queued meanwhile are answered at once rather than
    /// each after an attempt of its own.
    private func usableHandle(_ sql: String) throws(DatabaseError) -> OpaquePointer {
        if let handle, PQstatus(handle) == CONNECTION_OK { return handle }
        if let handle {
            PQfinish(handle)
            self.handle = nil
            wasLost = true
        }
        if transactionBegun {
            throw DatabaseError.unavailable("the connection to PostgreSQL was lost inside a transaction; "
                                            + "it is not made again before the transaction ends")
        }
        let now = DispatchTime.now().uptimeNanoseconds
        if let failed = lastFailedAttempt, now &- failed.at < Self.reconnectPauseNanoseconds { throw failed.error }
        do {
            try connect()
            lastFailedAttempt = nil
        } catch {
            lastFailedAttempt = (DispatchTime.now().uptimeNanoseconds, error)
            throw error
        }
        guard let handle else { throw DatabaseError.unavailable("no connection to PostgreSQL") }
        if wasLost {
            wasLost = false
            DatabaseAvailability.countReconnect()
        }
        return handle
    }

    /// Whether the server dropped this connection and it has not been made again yet.
    private var wasLost = false

    /// Whether a transaction begun here has not been ended by `COMMIT` or `ROLLBACK` yet.
    /// While it has not, a lost connection is not made again: on a new one, what follows
    /// would run outside the transaction (each statement committing alone, outside any lock
    /// it held) and its `COMMIT` would only be warned that no transaction is open. Its
    /// statements fail instead, until the transaction is ended; the next `BEGIN` connects.
    private var transactionBegun = false

    /// When the last attempt to connect again failed (monotonic nanoseconds), and how.
    private var lastFailedAttempt: (at: UInt64, error: DatabaseError)?

    /// The open transaction's id, when its user told it (`noteTransactionID`).
    private var transactionID: Int64?
    /// When the open (or last) transaction's pipeline took the writers' order, by the
    /// server's wall clock in microseconds (`lockedAtColumn`); nil if it did not.
    private(set) var lockTakenAtMicroseconds: Int64?

    /// How long after a failed attempt to connect again the next one waits.
    static let reconnectPauseNanoseconds: UInt64 = 1_000_000_000

    /// Runs `body` (one statement); if the server turns out to have dropped the connection
    /// while it was idle (a restart: the failure comes at once) and the statement is safe
    /// to send again — it begins a transaction, or it reads outside one — runs it once more
    /// on a new connection. A broken connection is only seen when a statement fails on it;
    /// one known broken already is made again by the first try, and a statement that failed
    /// after waiting met a server that does not answer (the network cut): neither is tried
    /// again, which would wait as long once more.
    private func retryingOnANewConnection<Value>(_ sql: String,
                                                 _ body: () throws(DatabaseError) -> Value) throws(DatabaseError) -> Value {
        let wasIdle = handle.map { PQstatus($0) == CONNECTION_OK && PQtransactionStatus($0) == PQTRANS_IDLE } ?? false
        let start = DispatchTime.now().uptimeNanoseconds
        do {
            return try body()
        } catch where error.isUnavailable && wasIdle && Self.isSafeToResend(sql)
                        && DispatchTime.now().uptimeNanoseconds &- start < Self.reconnectPauseNanoseconds {
            return try body()
        }
    }

    /// Whether `sql` changes nothing if sent twice: `BEGIN …`, or a `SELECT` outside a transaction.
    static func isSafeToResend(_ sql: String) -> Bool {
        sql.hasPrefix("BEGIN") || sql.hasPrefix("SELECT")
    }

    /// Runs one or more statements without parameters.
    func execute(_ sql: String) throws(DatabaseError) {
        try readPipelineFirst(sql)
        try retryingOnANewConnection(sql) { () throws(DatabaseError) in
            let connection = try usableHandle(sql)
            let result = exec(connection) { PQsendQuery(connection, sql) }
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
            let result = exec(connection) { PQsendPrepare(connection, name, Self.numberedParameters(sql), 0, nil) }
            defer { PQclear(result) }
            try check(result, sql: sql, connection: connection)
            prepared[sql] = name
        }
        let result = exec(connection) {
            withParameterTexts(arguments) { count, values in PQsendQueryPrepared(connection, name, count, values, nil, nil, 0) }
        }
        do {
            try check(result, sql: sql, connection: connection)
        } catch {
            PQclear(result)
            throw error
        }
        return result!
    }

    /// Calls `body` with the number of `arguments` and their texts as libpq takes them
    /// (nil for none).
    private func withParameterTexts<Value>(_ arguments: [SQLValue],
                                           _ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?) -> Value) -> Value {
        var texts: [UnsafeMutablePointer<CChar>?] = arguments.map { value in
            switch value {
            case .null: nil
            case .integer(let number): strdup(String(number))
            case .real(let number): strdup(Self.text(of: number))
            case .text(let text): strdup(text)
            }
        }
        defer { texts.forEach { free($0) } }
        return texts.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(buffer.count, 1)) { values in
                body(Int32(arguments.count), arguments.isEmpty ? nil : UnsafePointer(values))
            }
        }
    }

    /// Throws the error `result` reports, if any; counts the rows a command changed.
    private func check(_ result: OpaquePointer?, sql: String, connection: OpaquePointer) throws(DatabaseError) {
        guard let result else {
            throw DatabaseError.postgres(sqlState: nil, message: errorText(connection),
                                         sql: sql, connectionLost: PQstatus(connection) != CONNECTION_OK)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            if Self.isWrite(PQcmdStatus(result)), let tuples = PQcmdTuples(result), tuples.pointee != 0 {
                changedRows += Int64(atoi(tuples))
            }
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let lost = PQstatus(connection) != CONNECTION_OK
            let message = lost ? gaveUp : nil
            throw DatabaseError.postgres(sqlState: state,
                                         message: message ?? Self.trimmed(String(cString: PQresultErrorMessage(result))),
                                         sql: sql, connectionLost: lost)
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

    // MARK: Waiting for the server

    /// How long one statement may run on the server (`DatabaseAvailability.statementTimeoutMilliseconds`).
    private let statementTimeoutMilliseconds: Int

    /// `SET statement_timeout` to `statementTimeoutMilliseconds`.
    private var statementTimeoutSQL: String { "SET statement_timeout = '\(statementTimeoutMilliseconds)ms'" }

    /// How long the server may send nothing while an answer is awaited before the
    /// connection is given up (`awaitAnswer`); nil while `liftTimeLimits` holds.
    private var silenceLimitNanoseconds: UInt64? {
        guard !timeLimitsLifted else { return nil }
        return UInt64(statementTimeoutMilliseconds + DatabaseAvailability.silenceMarginMilliseconds)
            * 1_000_000
    }

    /// Whether statements may run and be waited for without limit (`liftTimeLimits`).
    private var timeLimitsLifted = false

    /// Asked while an answer is awaited without limit (`liftTimeLimits`): true gives the
    /// connection up, as a frozen server's would be (the start's SIGTERM, say).
    var waitInterrupted: (() -> Bool)?

    /// Why this connection was given up (`awaitAnswer`), for the errors of what waited on it;
    /// nil otherwise.
    private var gaveUp: String?

    /// For statements that wait for long by design (a migration, or waiting for another
    /// daemon's): no `statement_timeout` on the server, no silence limit here, until
    /// `restoreTimeLimits`.
    func liftTimeLimits() throws(DatabaseError) {
        timeLimitsLifted = true
        try execute("SET statement_timeout = 0")
    }

    /// Ends `liftTimeLimits`.
    func restoreTimeLimits() throws(DatabaseError) {
        timeLimitsLifted = false
        try execute(statementTimeoutSQL)
    }

    /// libpq's error message of `connection`, or why it was given up.
    private func errorText(_ connection: OpaquePointer) -> String {
        gaveUp ?? Self.trimmed(String(cString: PQerrorMessage(connection)))
    }

    /// The next answer (`PQgetResult`), waited for as `awaitAnswer` waits.
    private func nextAnswer(_ connection: OpaquePointer) -> OpaquePointer? {
        awaitAnswer(connection)
        return PQgetResult(connection)
    }

    /// What `PQexec` does, waited for as `awaitAnswer` waits: `send` sends the statement
    /// (returning libpq's 1 when it did); every answer is read, and the last returned, or
    /// the first error. Nil when nothing could be sent (the connection's error says why).
    private func exec(_ connection: OpaquePointer, send: () -> Int32) -> OpaquePointer? {
        guard send() == 1 else { return nil }
        var kept: OpaquePointer?
        while let result = nextAnswer(connection) {
            if let kept, ![PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY].contains(PQresultStatus(kept)) {
                PQclear(result)
                continue
            }
            PQclear(kept)
            kept = result
        }
        return kept
    }

    /// Returns once libpq can hand over the next answer without waiting (`PQisBusy` false),
    /// writing what it still holds to send as the socket takes it and reading what comes.
    /// A server that neither reads nor sends for `silenceLimitNanoseconds` — frozen
    /// (SIGSTOP, a disk that stopped answering, a host whose kernel still acknowledges) —
    /// is given up: the socket is shut down, so that libpq finds the connection lost and
    /// the statement fails as on a cut network (`connectionLost`; a `COMMIT`'s fate is then
    /// asked on a new connection, `fateOfLostCommit`). Once the process is stopping
    /// (`DatabaseAvailability.stopConnecting`) the limit is `stoppingSilenceNanoseconds`, so
    /// that a frozen server holds the stop no longer than that. Without a limit
    /// (`liftTimeLimits`) libpq waits as long as it takes.
    private func awaitAnswer(_ connection: OpaquePointer) {
        // Most often the answer is here already (a pipeline's answers come together).
        guard PQflush(connection) != 0 || PQisBusy(connection) != 0 else { return }
        let fullLimit = silenceLimitNanoseconds
        guard fullLimit != nil || waitInterrupted != nil else { return }
        var lastHeard = DispatchTime.now().uptimeNanoseconds
        while PQstatus(connection) == CONNECTION_OK {
            let unsent = PQflush(connection)
            // A failure to send is libpq's to report, with the next answer.
            if unsent < 0 || (unsent == 0 && PQisBusy(connection) == 0) { return }
            if fullLimit == nil, waitInterrupted?() == true {
                giveUp(connection, because: "the wait for PostgreSQL at \(redactedLocation(location)) was interrupted")
                return
            }
            let limit = fullLimit.map { DatabaseAvailability.mayConnect ? $0 : min($0, Self.stoppingSilence) } ?? .max
            let silent = DispatchTime.now().uptimeNanoseconds &- lastHeard
            if silent >= limit {
                giveUp(connection, silentFor: limit)
                return
            }
            let events = Int16(POLLIN) | (unsent == 1 ? Int16(POLLOUT) : 0)
            var descriptor = pollfd(fd: PQsocket(connection), events: events, revents: 0)
            // In slices, to see a stop begin.
            let waitMilliseconds = Int32(min((limit - silent) / 1_000_000 + 1, 250))
            let ready = poll(&descriptor, 1, waitMilliseconds)
            if ready < 0 && errno != EINTR { return }
            guard ready > 0 else {
                // Over TLS, what the socket brought may wait decrypted in the TLS library,
                // which poll does not see: read it (nothing there costs one failed read).
                guard PQconsumeInput(connection) == 1 else { return }
                continue
            }
            lastHeard = DispatchTime.now().uptimeNanoseconds
            if descriptor.revents & Int16(POLLIN | POLLERR | POLLHUP) != 0, PQconsumeInput(connection) != 1 { return }
        }
    }

    /// The silence after which a stopping process gives a connection up: a live server
    /// answers within it (a stop waits for the batch under way), a statement waiting for a
    /// lock included, which ends at the session's `lock_timeout` (`Database.busyTimeoutMilliseconds`):
    /// given up sooner, a batch whose `COMMIT` the server already holds would be answered
    /// 503 and then committed.
    static let stoppingSilenceNanoseconds = UInt64(Database.busyTimeoutMilliseconds + 2_000) * 1_000_000

    /// Once one connection was given up during the stop, the server is taken as frozen: the
    /// statements the stop runs after it (the leader's release, say) get this silence.
    static let frozenStoppingSilenceNanoseconds: UInt64 = 2_000_000_000

    /// Whether a connection of this process was given up while it stops.
    private static let gaveUpWhileStopping = Atomic(false)

    /// The silence limit while the process stops.
    private static var stoppingSilence: UInt64 {
        gaveUpWhileStopping.load(ordering: .relaxed) ? frozenStoppingSilenceNanoseconds : stoppingSilenceNanoseconds
    }

    /// Shuts the connection's socket down (libpq keeps it, and finds it closed) and keeps why.
    private func giveUp(_ connection: OpaquePointer, because why: String) {
        gaveUp = why
        shutdown(PQsocket(connection), Int32(SHUT_RDWR))
        _ = PQconsumeInput(connection)
    }

    /// `giveUp` a connection silent for `limit` nanoseconds.
    private func giveUp(_ connection: OpaquePointer, silentFor limit: UInt64) {
        let timeout = Double(statementTimeoutMilliseconds) / 1000
        let margin = DatabaseAvailability.silenceMarginMilliseconds / 1000
        let why = DatabaseAvailability.mayConnect ? "\(timeout.formatted()) s (--db-timeout) and \(margin) s more"
            : "\(limit / 1_000_000_000) s while the daemon stops"
        if !DatabaseAvailability.mayConnect { Self.gaveUpWhileStopping.store(true, ordering: .relaxed) }
        giveUp(connection, because: "PostgreSQL at \(redactedLocation(location)) sent nothing for \(why): "
                   + "the connection was given up")
    }

    // MARK: Notifications

    /// The connection's socket, to wait on for notifications (-1 when closed).
    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Reads what the server sent and returns the notifications received: each one's payload
    /// and the process id of the server session that sent it.
    func takeNotifications() throws(DatabaseError) -> [(payload: String, sender: Int32)] {
        let connection = try usableHandle("LISTEN")
        guard PQconsumeInput(connection) == 1 else {
            throw DatabaseError.unavailable(errorText(connection))
        }
        var notifications: [(payload: String, sender: Int32)] = []
        while let notification = PQnotifies(connection) {
            notifications.append((String(cString: notification.pointee.extra), notification.pointee.be_pid))
            PQfreemem(notification)
        }
        return notifications
    }

    /// The process id of this connection's server session (0 while not connected): what a
    /// notification it sends names as its sender.
    var sessionProcessID: Int32 { handle.map { PQbackendPID($0) } ?? 0 }

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

    /// A floating-point number as PostgreSQL reads it.
    static func text(of number: Double) -> String {
        number.isFinite ? "\(number)" : (number.isNaN ? "NaN" : number > 0 ? "Infinity" : "-Infinity")
    }

    static func trimmed(_ message: String) -> String {
        var message = message
        while let last = message.last, last.isWhitespace { message.removeLast() }
        return message
    }
}

// MARK: Pipeline mode

extension PostgresConnection {
    /// From now until the transaction's end, each statement that returns no rows (`run`) is
    /// sent at once and not waited for (libpq's pipeline mode); the `COMMIT` is sent behind
    /// them, and its call reads every answer, in order: a batch's last statements and its
    /// commit cost one round trip together. The first statement that failed is the error
    /// thrown, flagged `pipelined` unless it is the `COMMIT` itself: the server skipped
    /// what followed it, the `COMMIT` too, and the transaction is left failed, to be rolled
    /// back. Any other statement (a query, a savepoint's, a `ROLLBACK`) first reads the
    /// answers the same way; only `COMMIT` and `ROLLBACK` end the pipelining.
    func pipelineUntilCommit() {
        pipelineRequested = true
    }

    /// Asks the server to send the answers of what the pipeline holds so far without waiting
    /// for its end (`PQsendFlushRequest`), so that they travel apart from later ones.
    func sendAnswersSoFar() {
        guard let handle, PQpipelineStatus(handle) == PQ_PIPELINE_ON else { return }
        _ = PQsendFlushRequest(handle)
    }

    /// Sends `sql` with `arguments` in the pipeline (entering pipeline mode first), preparing
    /// it there first if this connection has not yet.
    private func sendInPipeline(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError) {
        // Inside a transaction a lost connection is not made again: the transaction is gone,
        // and the statement would run without it.
        guard let connection = handle, PQstatus(connection) == CONNECTION_OK else {
            throw DatabaseError.unavailable("the connection to PostgreSQL was lost in the transaction")
        }
        if PQpipelineStatus(connection) == PQ_PIPELINE_OFF, PQenterPipelineMode(connection) != 1 {
            throw pipelineSendFailure(sql, connection)
        }
        let name: String
        if let known = prepared[sql] {
            name = known
        } else {
            name = "s\(prepared.count + 1)"
            guard PQsendPrepare(connection, name, Self.numberedParameters(sql), 0, nil) == 1 else {
                throw pipelineSendFailure(sql, connection)
            }
            prepared[sql] = name
            pipelineSent.append((sql, true))
        }
        let sent = withParameterTexts(arguments) { count, values in
            PQsendQueryPrepared(connection, name, count, values, nil, nil, 0)
        }
        guard sent == 1 else { throw pipelineSendFailure(sql, connection) }
        pipelineSent.append((sql, false))
    }

    /// Ends the pipeline: sends `COMMIT` into it when `sql` is `COMMIT`, then the sync, and
    /// reads every answer; returns whether `sql` was sent there (and so is done). Throws the
    /// first failure; but once the `COMMIT` is answered as done, the transaction is
    /// committed, and a connection lost before the sync's answer fails nothing. Pipeline
    /// mode is left in every case (a lost connection is made again by the next statement).
    private func endPipeline(before sql: String) throws(DatabaseError) -> Bool {
        guard let connection = handle, PQpipelineStatus(connection) != PQ_PIPELINE_OFF else { return false }
        let commits = sql == "COMMIT"
        defer { pipelineSent.removeAll() }
        // A lost connection answers nothing more (the next statement connects again).
        guard PQstatus(connection) == CONNECTION_OK else {
            throw DatabaseError.postgres(sqlState: nil, message: errorText(connection),
                                         sql: sql, connectionLost: true)
        }
        if commits {
            guard PQsendQueryParams(connection, sql, 0, nil, nil, nil, nil, 0) == 1 else { throw pipelineSendFailure(sql, connection) }
            pipelineSent.append((sql, false))
        }
        guard PQpipelineSync(connection) == 1 else { throw pipelineSendFailure(sql, connection) }
        var failure: DatabaseError?
        var committed = false
        for (index, (sent, isPreparation)) in pipelineSent.enumerated() {
            let isCommit = commits && index == pipelineSent.count - 1
            var failed = false
            while let result = nextAnswer(connection) {
                defer { PQclear(result) }
                guard PQresultStatus(result) != PGRES_PIPELINE_ABORTED else {
                    failed = true
                    continue
                }
                do {
                    try check(result, sql: sent, connection: connection)
                    // A statement of the pipeline that tells the transaction's id and when
                    // the writers' order was taken (`SharedWriting.movesTheRow`).
                    if PQresultStatus(result) == PGRES_TUPLES_OK, PQntuples(result) == 1 {
                        if let id = Self.integer(named: Self.transactionIDColumn, in: result) { transactionID = id }
                        if let at = Self.integer(named: Self.lockedAtColumn, in: result) { lockTakenAtMicroseconds = at }
                    }
                    if isCommit {
                        try Self.checkCommitted(result)
                        committed = true
                    }
                } catch {
                    failed = true
                    if failure == nil {
                        var error = error
                        error.pipelined = !isCommit
                        failure = error
                    }
                }
            }
            if failed && isPreparation { prepared.removeValue(forKey: sent) }
            if PQstatus(connection) != CONNECTION_OK { break }
        }
        if PQstatus(connection) == CONNECTION_OK {
            // The sync's own answer, then out of pipeline mode.
            if let sync = nextAnswer(connection) { PQclear(sync) }
            PQexitPipelineMode(connection)
        }
        if committed { return true }
        let lost = PQstatus(connection) != CONNECTION_OK
        let lostMessage = errorText(connection)
        // The COMMIT's answer lost with the connection: it may have committed. (`connection`
        // is not used after this: the question is asked on a new one.)
        if commits && lost && fateOfLostCommit() { return true }
        if var failure {
            if lost { failure.isUnavailable = true }
            throw failure
        }
        if lost { throw DatabaseError.postgres(sqlState: nil, message: lostMessage, sql: sql, connectionLost: true) }
        return commits
    }

    /// Sends `COMMIT` on its own and reads its answer: committed once the server answered
    /// so, even if the connection is lost before the rest of the answer (its
    /// `ReadyForQuery`) arrives, which `PQexec` would report as the statement's failure.
    private func commit() throws(DatabaseError) {
        let sql = "COMMIT"
        let connection = try usableHandle(sql)
        guard PQsendQuery(connection, sql) == 1 else {
            throw DatabaseError.postgres(sqlState: nil, message: errorText(connection),
                                         sql: sql, connectionLost: PQstatus(connection) != CONNECTION_OK)
        }
        var committed = false
        var failure: DatabaseError?
        while let result = nextAnswer(connection) {
            defer { PQclear(result) }
            do {
                try check(result, sql: sql, connection: connection)
                try Self.checkCommitted(result)
                committed = true
            } catch {
                if failure == nil { failure = error }
            }
            if PQstatus(connection) != CONNECTION_OK { break }
        }
        if committed { return }
        let lost = PQstatus(connection) != CONNECTION_OK
        // As at the end of a pipeline: `connection` is not used after this.
        if lost && fateOfLostCommit() { return }
        if let failure { throw failure }
        throw DatabaseError.postgres(sqlState: nil, message: "no answer to COMMIT", sql: sql, connectionLost: lost)
    }

    /// Whether the open transaction, whose `COMMIT` was sent and whose answer was lost with
    /// the connection, committed: asked on a new connection (`txid_status` of the id told by
    /// `noteTransactionID`), waiting up to about a second while the old session has not
    /// ended it yet. False when it did not, or when that cannot be known (no id told, the
    /// server out of reach): the commit is then reported failed, as the connection's loss.
    private func fateOfLostCommit() -> Bool {
        guard let id = transactionID else { return false }
        transactionID = nil
        // The transaction is over, one way or the other: a new connection may be made.
        transactionBegun = false
        for _ in 0..<20 {
            let status = (try? rows("SELECT txid_status(?)", [.integer(id)]) { $0.optionalText(0) })?.first ?? nil
            switch status {
            case "committed": return true
            case "in progress": usleep(50_000)
            default: return false
            }
        }
        return false
    }

    /// Throws unless `result`, a `COMMIT`'s successful answer, says it committed: PostgreSQL
    /// answers `ROLLBACK`, without an error, to the `COMMIT` of a transaction left failed by
    /// a statement whose error was not acted on (caught and ignored), and nothing of it is
    /// stored.
    private static func checkCommitted(_ result: OpaquePointer) throws(DatabaseError) {
        guard let status = PQcmdStatus(result), String(cString: status) == "ROLLBACK" else { return }
        throw DatabaseError.postgres(sqlState: "25P02", message: "the transaction had failed: its COMMIT rolled it back",
                                     sql: "COMMIT", connectionLost: false)
    }

    /// The error of a statement libpq could not send (a lost connection, mostly).
    private func pipelineSendFailure(_ sql: String, _ connection: OpaquePointer) -> DatabaseError {
        var error = DatabaseError.postgres(sqlState: nil, message: errorText(connection),
                                           sql: sql, connectionLost: PQstatus(connection) != CONNECTION_OK)
        error.pipelined = true
        return error
    }

    /// Reads what the pipeline was sent, if anything, before a statement that waits for
    /// its answer.
    private func readPipelineFirst(_ sql: String) throws(DatabaseError) {
        guard let handle, PQstatus(handle) == CONNECTION_OK else {
            // Nothing to read on a lost connection: the statement connects again.
            pipelineSent.removeAll()
            return
        }
        if !pipelineSent.isEmpty || PQpipelineStatus(handle) != PQ_PIPELINE_OFF {
            _ = try endPipeline(before: sql)
        }
    }
}

extension PostgresConnection {
    var dialect: any SQLDialect { PostgresDialect.shared }

    func run(_ sql: String, _ arguments: [SQLValue]) throws(DatabaseError) {
        statementsRun += 1
        if pipelineRequested { return try sendInPipeline(sql, arguments) }
        PQclear(try query(sql, arguments))
    }

    func rows<Row>(_ sql: String, _ arguments: [SQLValue], map: (any ResultRow) -> Row) throws(DatabaseError) -> [Row] {
        statementsRun += 1
        try readPipelineFirst(sql)
        let result = try query(sql, arguments)
        defer { PQclear(result) }
        let row = PostgresRow(result)
        let count = PQntuples(result)
        var rows: [Row] = []
        rows.reserveCapacity(Int(count))
        for index in 0..<count {
            row.row = index
            rows.append(map(row))
        }
        return rows
    }

    /// Transaction statements are sent as they are, without preparing them. In a pipeline
    /// (`pipelineUntilCommit`), a `COMMIT` goes in it, and it or a `ROLLBACK` ends it; a
    /// savepoint's statement (`SAVEPOINT`, `RELEASE`, `ROLLBACK TO`) reads its answers
    /// first, as a query does, and the pipeline goes on after it.
    func control(_ sql: String) throws(DatabaseError) {
        let begins = sql.hasPrefix("BEGIN")
        // A transaction that ended with its connection lost ends here at the latest.
        if begins {
            transactionBegun = false
            transactionID = nil
            lockTakenAtMicroseconds = nil
        }
        defer {
            if sql == "COMMIT" || sql == "ROLLBACK" {
                transactionBegun = false
                transactionID = nil
            }
        }
        try sendControl(sql)
        if begins { transactionBegun = true }
    }

    /// Tells the connection the id of its open transaction (`txid_current()`): if the answer
    /// to its `COMMIT` is lost with the connection, the server is asked on a new one whether
    /// it committed (`fateOfLostCommit`), rather than the commit reported failed.
    func noteTransactionID(_ id: Int64) { transactionID = id }

    /// The name of a pipelined query's column that tells the transaction's id.
    static let transactionIDColumn = "headway_transaction_id"
    /// The name of a pipelined query's column that tells when the server took the writers'
    /// order (`lockTakenAtMicroseconds`).
    static let lockedAtColumn = "headway_locked_at"

    /// The first row's value of the integer column `name` of `result`, if it has one.
    private static func integer(named name: String, in result: OpaquePointer) -> Int64? {
        let column = PQfnumber(result, name)
        guard column >= 0, PQgetisnull(result, 0, column) == 0, let value = PQgetvalue(result, 0, column) else { return nil }
        return Int64(String(cString: value))
    }

    /// The transaction ended with its connection (nothing sent): so did its pipeline.
    func transactionEndedUnsent() {
        transactionBegun = false
        pipelineRequested = false
    }

    /// `control`'s statement, in the pipeline or not.
    private func sendControl(_ sql: String) throws(DatabaseError) {
        if sql.hasPrefix("BEGIN") {
            pipelineRequested = false
            return try execute(sql)
        }
        guard sql == "COMMIT" || sql == "ROLLBACK" else {
            do {
                try readPipelineFirst(sql)
            } catch where sql.hasPrefix("ROLLBACK TO") && !error.isUnavailable {
                // What was still unanswered was all sent after the savepoint (whose statement
                // read the answers before it): what failed is undone by this rollback.
            }
            return try execute(sql)
        }
        if pipelineRequested {
            pipelineRequested = false
            do {
                if try endPipeline(before: sql) { return }
            } catch where sql == "ROLLBACK" && !error.isUnavailable {
                // Rolled back anyway: what failed in the pipeline is undone with the rest.
            }
        }
        if sql == "COMMIT" { try commit() } else { try execute(sql) }
    }

    /// The writer's session: `synchronous_commit` as `durability` asks. A batch never
    /// waits between its statements; a writer that does (its daemon stopped with SIGSTOP
    /// in the middle of a batch, say) would hold every other daemon's writes behind its
    /// lock: the server ends its session instead, and its batch fails with nothing stored.
    /// The WAL is the server's, and other daemons' lock waits are not told.
    func prepareForWriting(durability: Durability, walSizeLimit: Int, lockWaits: LockWaits) throws(DatabaseError) {
        try addSessionSetting("SET synchronous_commit = \(durability == .full ? "on" : "off")")
        try addSessionSetting("SET idle_in_transaction_session_timeout = '10s'")
    }

    /// Waits for other daemons' locks are not told (`lock_timeout` bounds them).
    func reportLockWaits(to waits: LockWaits) {}

    func lockWaitEnded() {}

    /// The WAL is the server's: nothing to checkpoint.
    func checkpointIfDue() -> Bool { false }

    var writeAheadLogBytes: Int { 0 }

    func checkpointTruncatingWAL() throws(DatabaseError) -> Bool { true }

    /// The server's own count of the database's files; its WAL is the server's.
    func storageSizes() throws(DatabaseError) -> StorageSizes {
        let bytes = try rows("SELECT pg_database_size(current_database())", []) { $0.int(0) }.first ?? 0
        return StorageSizes(databaseBytes: bytes, writeAheadLogBytes: 0)
    }

    func backup(to destinationPath: String) throws(DatabaseError) {
        throw DatabaseError(code: SQLITE_MISUSE, message: "a PostgreSQL database is backed up with its own tools (pg_dump)",
                            sql: nil)
    }

    /// Commits are refused only in tests of SQLite's commit hook.
    func refuseCommits(_ refuse: Bool) {}
}

/// A row of a PostgreSQL query's result (values as text), as `Database.rows(_:_:map:)`
/// hands it to its `map`. The result is cleared by its owner.
final class PostgresRow: ResultRow {
    private let result: OpaquePointer
    /// The row the column accessors read.
    var row: Int32 = 0

    init(_ result: OpaquePointer) { self.result = result }

    func isNull(_ column: Int32) -> Bool { PQgetisnull(result, row, column) == 1 }
    func int(_ column: Int32) -> Int64 {
        // A boolean comes as `t` or `f`: 1 or 0, as SQLite gives it.
        guard let value = PQgetvalue(result, row, column) else { return 0 }
        switch UInt8(bitPattern: value.pointee) {
        case UInt8(ascii: "t"): return 1
        case UInt8(ascii: "f"): return 0
        default: return strtoll(value, nil, 10)
        }
    }
    func double(_ column: Int32) -> Double { strtod(PQgetvalue(result, row, column), nil) }
    func text(_ column: Int32) -> String {
        guard let pointer = PQgetvalue(result, row, column) else { return "" }
        return String(cString: pointer)
    }
}

extension Database {
    /// The PostgreSQL connection under this one, for what only PostgreSQL does (session
    /// settings, `LISTEN`): only for a database `storageEngine(for:)` says is shared.
    var postgres: PostgresConnection { connection as! PostgresConnection }
}
