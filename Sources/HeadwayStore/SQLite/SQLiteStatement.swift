import CSQLite

/// A prepared SQLite statement, reset by `SQLiteConnection` before each use, and the row
/// it stands on while `Database.rows(_:_:map:)` hands it to its `map`.
final class SQLiteStatement: ResultRow {
    private let handle: OpaquePointer
    private unowned let connection: SQLiteConnection
    private let sql: String
    /// How many parameters the SQL has.
    private let parameterCount: Int

    init(_ handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
        parameterCount = Int(sqlite3_bind_parameter_count(handle))
    }

    deinit { sqlite3_finalize(handle) }

    /// Ends the statement's last run; its bindings stay until `bind` replaces them.
    func reset() {
        sqlite3_reset(handle)
    }

    /// Binds `values` to parameters 1, 2, …; parameters past them are NULL. Clearing the
    /// last run's bindings costs a pass over every parameter, so it is done only when some
    /// would not be bound again.
    func bind(_ values: [SQLValue]) throws(DatabaseError) {
        if values.count < parameterCount { sqlite3_clear_bindings(handle) }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let number): code = sqlite3_bind_int64(handle, index, number)
            case .real(let number): code = sqlite3_bind_double(handle, index, number)
            case .text(var text):
                // Through the text's own bytes (a String passed as a C pointer is first
                // copied into a new array); an empty text's buffer may have no address,
                // which SQLite would bind as NULL.
                code = text.withUTF8 { utf8 in
                    guard let start = utf8.baseAddress, !utf8.isEmpty else {
                        return sqlite3_bind_text(handle, index, "", 0, headway_sqlite_transient())
                    }
                    return sqlite3_bind_text(handle, index, UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self),
                                             Int32(utf8.count), headway_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else { throw DatabaseError(code: code, message: connection.lastErrorMessage, sql: sql) }
        }
    }

    /// Advances to the next row: true when a row is available, false when done.
    @discardableResult
    func step() throws(DatabaseError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code:
            let systemError = connection.lastSystemError  // first, while the thread's errno is the failure's
            let error = DatabaseError(code: code, message: connection.lastErrorMessage, sql: sql, systemError: systemError)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Binds `values`, runs the statement to its end and resets it (which ends its read).
    func run(_ values: [SQLValue] = []) throws(DatabaseError) {
        defer { sqlite3_reset(handle) }
        try bind(values)
        while try step() {}
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }
    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: pointer)
    }
}
