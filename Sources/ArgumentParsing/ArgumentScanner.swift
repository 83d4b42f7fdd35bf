/// What an option takes after its name.
public enum OptionValue: Sendable, Equatable {
    /// A value: `--name VALUE` or `--name=VALUE`.
    case required
    /// Nothing: `--name` (a value after `=` is refused).
    case forbidden
    /// A value only after `=`: `--name` alone, or `--name=VALUE` (the daemon's switches).
    case optional
}

/// One word of a command line, as `ArgumentScanner` reads it.
public enum ScannedArgument: Sendable, Equatable {
    /// `--name`, `--name VALUE` or `--name=VALUE`; `value` is nil for an option that takes
    /// none, or an optional value not given.
    case option(name: String, value: String?)
    /// A word of one dash and more (`-h`, `-x`); the caller says what it means.
    case short(String)
    /// Anything else: a positional word (`-` alone is one), or any word after `--` when the
    /// scanner ends options there.
    case positional(String)
}

/// A command line the scanner cannot read; each program words it its own way.
public enum ScanError: Error, Sendable, Equatable {
    /// `--name` that no option of the program has (the name without dashes; empty for `--`
    /// when `--` does not end options).
    case unknownOption(String)
    /// `--name` last, without the value it takes.
    case needsValue(String)
    /// `--name=VALUE` for an option that takes no value.
    case takesNoValue(String)
}

/// Reads a command line word by word, the one reader of both executables' options:
/// `headway`'s declarative parser (`CommandLineParser`), and `headwayd`'s settings and
/// `token create`. Which options exist and what each takes is asked at each word (a
/// subcommand's options become known once its name has been read).
public struct ArgumentScanner: Sendable {
    private let arguments: [String]
    private let doubleDashEndsOptions: Bool
    private var index = 0
    /// Whether a `--` has ended the options (every word since is positional).
    public private(set) var optionsEnded = false

    /// Scans `arguments` (without the program's name); with `doubleDashEndsOptions`, the
    /// words after `--` are positional.
    public init(_ arguments: [String], doubleDashEndsOptions: Bool) {
        self.arguments = arguments
        self.doubleDashEndsOptions = doubleDashEndsOptions
    }

    /// The next word, nil at the end. `takes` says what the option of a name takes, or nil
    /// when the program has no such option.
    public mutating func next(_ takes: (String) -> OptionValue?) throws(ScanError) -> ScannedArgument? {
        guard index < arguments.count else { return nil }
        let word = arguments[index]
        index += 1
        if optionsEnded || !word.hasPrefix("-") || word == "-" { return .positional(word) }
        if doubleDashEndsOptions && word == "--" {
            optionsEnded = true
            return try next(takes)
        }
        guard word.hasPrefix("--") else { return .short(word) }
        let body = word.dropFirst(2)
        let name = String(body.prefix { $0 != "=" })
        let inlineValue = body.contains("=") ? String(body.drop { $0 != "=" }.dropFirst()) : nil
        switch takes(name) {
        case nil:
            throw .unknownOption(name)
        case .forbidden:
            guard inlineValue == nil else { throw .takesNoValue(name) }
            return .option(name: name, value: nil)
        case .optional:
            return .option(name: name, value: inlineValue)
        case .required:
            if let inlineValue { return .option(name: name, value: inlineValue) }
            guard index < arguments.count else { throw .needsValue(name) }
            index += 1
            return .option(name: name, value: arguments[index - 1])
        }
    }
}
