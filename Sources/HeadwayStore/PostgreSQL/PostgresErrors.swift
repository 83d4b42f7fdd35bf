import CSQLite

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
