/// "Did you mean" for a mistyped command, option or value: the known names closest to it.
/// Both executables word their refusals with it (`headway`'s parser and commands,
/// `headwayd`'s options, configuration file and `token create`).
package enum Suggestion {
    /// `; did you mean 'tasks'?` when some of `names` are within a few edits of `typed`
    /// (or start with it); empty when none is.
    package static func didYouMean(_ typed: String, among names: [String]) -> String {
        let limit = max(1, min(3, typed.count / 3))
        let scored = names.map { ($0, distance(typed, $0)) }
        let best = scored.map(\.1).min() ?? .max
        var close = best <= limit ? scored.filter { $0.1 == best }.map(\.0) : []
        if close.isEmpty, typed.count >= 3 { close = names.filter { $0.hasPrefix(typed) } }
        guard !close.isEmpty else { return "" }
        let quoted = close.prefix(3).map { "'\($0)'" }
        return "; did you mean " + (quoted.count == 1 ? quoted[0] : quoted.dropLast().joined(separator: ", ") + " or " + quoted.last!) + "?"
    }

    /// The edit distance of `a` and `b` (insertions, deletions, substitutions, and two
    /// neighbours swapped).
    package static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var table = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }
}
