/// What a command says about itself: its name and the text of its help.
public struct CommandConfiguration: Sendable {
    public let commandName: String
    public let abstract: String
    public let discussion: String?
    /// The usage line after the command's name, when the one made from the declarations
    /// cannot say it (options that exclude each other).
    public let usage: String?
    public let subcommands: [any ParsableCommand.Type]
    /// Whether help, completion and "did you mean" leave it out (`__complete`).
    public var isHidden: Bool { commandName.hasPrefix("__") }
    /// Command lines that show the command in use, each with a comment (`# what it does`)
    /// on the line before it when it needs one; `--help` prints them under EXAMPLES.
    public let examples: [String]

    public init(commandName: String, abstract: String, discussion: String? = nil, usage: String? = nil,
                subcommands: [any ParsableCommand.Type] = [], examples: [String] = []) {
        self.examples = examples
        self.commandName = commandName
        self.abstract = abstract
        self.discussion = discussion
        self.usage = usage
        self.subcommands = subcommands
    }
}

/// One subcommand of `headway`, in the shape of swift-argument-parser's: its options are
/// declared once (`arguments`), and serve both to parse and to write its `--help`; the
/// command is made from the parsed values, validated, then run.
public protocol ParsableCommand: Sendable {
    static var configuration: CommandConfiguration { get }
    /// The command's own options, flags and positional arguments, in help order.
    static var arguments: [ArgumentDefinition] { get }
    /// Builds the command from what the parser found.
    init(_ values: ParsedValues)
    /// Checks combinations the parser cannot (throw a `UsageError`); called before `run`.
    func validate() throws
    /// Does the work; throws a `CLIError` for every outcome other than success.
    func run(_ context: CommandContext) throws
    /// Whether positional texts beyond the declared arguments are kept (in
    /// `ParsedValues.trailing`) instead of refused: `headway run -- CMD ARGS…`.
    static var takesTrailingArguments: Bool { get }
}

extension ParsableCommand {
    public func validate() throws {}
    public static var takesTrailingArguments: Bool { false }
}

/// A command line that cannot be run: exit status 64.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public let message: String
    /// The command whose `--help` the error points to (`headway start`).
    public let commandPath: String

    public init(_ message: String, commandPath: String = "headway") {
        self.message = message
        self.commandPath = commandPath
    }

    public var description: String { message }
}
