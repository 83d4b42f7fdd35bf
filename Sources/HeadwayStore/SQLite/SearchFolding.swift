import CSQLite

/// How the search index folds case, one scalar to one scalar: SQLite's FTS5 trigram
/// tokenizer folds each scalar by its own table (Unicode's simple case folding as SQLite
/// has it: `Σ` and `ς` to `σ`, `ẞ` to `ß`, the Kelvin sign to `k`; `ß` stays `ß`, so it
/// never matches `ss`). A query of three characters or more is folded by the tokenizer
/// itself; one of one or two characters is looked up in the index's vocabulary by
/// `TaskSearch`, and a search within a task prefix checks each task's id and name
/// (`headway_search_fold`, an SQL function of every SQLite connection): both must fold the
/// same way, which this does, from a copy of the tokenizer's table
/// (`SearchFolding+Table.swift`, written by scripts/search-folding.py and checked against
/// the linked SQLite by SearchFoldingTests).
enum SearchFolding {
    /// What each scalar that changes folds to.
    static let foldedScalars: [UInt32: UInt32] = {
        var folds: [UInt32: UInt32] = [:]
        folds.reserveCapacity(table.count / 2)
        for index in stride(from: 0, to: table.count, by: 2) { folds[table[index]] = table[index + 1] }
        return folds
    }()

    /// For each folded scalar that others fold to, every scalar that folds to it, itself first.
    static let foldingClasses: [UInt32: [UInt32]] = {
        var classes: [UInt32: [UInt32]] = [:]
        for index in stride(from: 0, to: table.count, by: 2) {
            classes[table[index + 1], default: [table[index + 1]]].append(table[index])
        }
        return classes
    }()

    /// `scalar` as the index folds it.
    static func fold(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
        foldedScalars[scalar.value].flatMap(Unicode.Scalar.init) ?? scalar
    }

    /// `text` as the index folds it.
    static func fold(_ text: String) -> String {
        var folded = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { folded.append(fold(scalar)) }
        return String(folded)
    }

    /// The SQL function `headway_search_fold(text)`: `text` as the index folds it (NULL
    /// stays NULL).
    static let sqlFunctionName = "headway_search_fold"

    /// Adds `headway_search_fold` to an SQLite connection.
    static func register(on connection: OpaquePointer) {
        sqlite3_create_function_v2(connection, sqlFunctionName, 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS,
                                   nil, { context, _, arguments in
                                       guard let argument = arguments?[0], let text = sqlite3_value_text(argument) else {
                                           return sqlite3_result_null(context)
                                       }
                                       let folded = SearchFolding.fold(String(cString: text))
                                       sqlite3_result_text(context, folded, -1, headway_sqlite_transient())
                                   }, nil, nil, nil)
    }
}
