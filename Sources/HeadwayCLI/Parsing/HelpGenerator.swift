/// Writes `--help` text from the declarations of the commands, so help and parser cannot
/// disagree.
public struct HelpGenerator {
    let root: CommandConfiguration
    /// The column where the help of each option begins.
    static let helpColumn = 28

    public init(root: CommandConfiguration) { self.root = root }

    /// The help of `command`, or of `headway` itself when nil.
    public func text(for command: (any ParsableCommand.Type)?) -> String {
        var lines: [String] = []
        guard let command else {
            lines.append("OVERVIEW: \(root.abstract)")
            if let discussion = root.discussion { lines += ["", discussion] }
            lines += ["", "USAGE: \(root.commandName) <command> [options]", "", "COMMANDS:"]
            for subcommand in root.subcommands {
                lines.append(Self.row(subcommand.configuration.commandName, subcommand.configuration.abstract))
            }
            lines += ["", "GLOBAL OPTIONS:"]
            for definition in GlobalOptions.definitions + [GlobalOptions.version.definition] {
                lines.append(Self.row(Self.label(definition), definition.help))
            }
            lines += ["", "See '\(root.commandName) <command> --help' for the options of a command."]
            return lines.joined(separator: "\n") + "\n"
        }
        let configuration = command.configuration
        lines.append("OVERVIEW: \(configuration.abstract)")
        if let discussion = configuration.discussion { lines += ["", discussion] }
        let usage = configuration.usage
            ?? command.arguments.map { $0.isRequired ? $0.synopsis : "[\($0.synopsis)]" }.joined(separator: " ")
        lines += ["", "USAGE: \(root.commandName) \(configuration.commandName) \(usage)"]
        let positionals = command.arguments.filter { $0.kind == .positional }
        if !positionals.isEmpty {
            lines += ["", "ARGUMENTS:"]
            lines += positionals.map { Self.row($0.synopsis, $0.help) }
        }
        let options = command.arguments.filter { $0.kind != .positional }
        if !options.isEmpty {
            lines += ["", "OPTIONS:"]
            lines += options.map { Self.row(Self.label($0), $0.help) }
        }
        lines += ["", "GLOBAL OPTIONS:"]
        lines += GlobalOptions.definitions.map { Self.row(Self.label($0), $0.help) }
        return lines.joined(separator: "\n") + "\n"
    }

    static func label(_ definition: ArgumentDefinition) -> String {
        definition.name == "help" ? "-h, --help" : definition.synopsis
    }

    /// An indented name with its help in a column (on the next line when the name is long).
    static func row(_ name: String, _ help: String) -> String {
        let indented = "  " + name
        if indented.count + 2 > helpColumn {
            return indented + "\n" + String(repeating: " ", count: helpColumn) + help
        }
        return indented + String(repeating: " ", count: helpColumn - indented.count) + help
    }
}
