/// How the search index folds case, one scalar to one scalar: SQLite's FTS5 trigram
/// tokenizer folds each scalar by its own table (Unicode's simple case folding as SQLite
/// has it: `Σ` and `ς` to `σ`, `ẞ` to `ß`, the Kelvin sign to `k`; `ß` stays `ß`, so it
/// never matches `ss`). A query of three characters or more is folded by the tokenizer
/// itself; one of one or two characters is looked up in the index's vocabulary by
/// `TaskSearch` and must be folded the same way, which this does, from a copy of the
/// tokenizer's table (`SearchFolding+Table.swift`, written by scripts/search-folding.py
/// and checked against the linked SQLite by SearchFoldingTests).
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

    /// Every text that folds as `text` does (`text`'s own spelling among them): for a short
    /// text, the spellings a name must hold one of to match it. Their number is the
    /// product of each scalar's class (at most 4 for a scalar; `σ`: `σ`, `Σ`, `ς`).
    static func spellings(_ text: String) -> [String] {
        var spellings = [String.UnicodeScalarView()]
        for scalar in text.unicodeScalars {
            let folded = fold(scalar)
            let choices = foldingClasses[folded.value]?.compactMap(Unicode.Scalar.init) ?? [folded]
            spellings = spellings.flatMap { start in
                choices.map { choice in
                    var next = start
                    next.append(choice)
                    return next
                }
            }
        }
        return spellings.map(String.init)
    }
}
