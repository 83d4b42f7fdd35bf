/// Writes `--help` text from the declarations of the commands, so help and parser cannot
/// disagree.
public struct HelpGenerator {
    let root: CommandConfiguration
    /// The column where the help of each option begins.
    static let helpColumn = 28

    public init(root: CommandConfiguration) { self.root = root }

    /// The help of the command at the end of `path` (`[TokenCommand, CreateCommand]`), or
    /// of `headway` itself when the path is empty.
    public func text(for path: [any ParsableCommand.Type]) -> String {
        var lines: [String] = []
        let name = ([root.commandName] + path.map { $0.configuration.commandName }).joined(separator: " ")
        guard let command = path.last, command.configuration.subcommands.isEmpty else {
            // The top level, or a group of commands.
            let configuration = path.last?.configuration ?? root
            lines.append("OVERVIEW: \(configuration.abstract)")
            if let discussion = configuration.discussion { lines += ["", discussion] }
            lines += ["", "USAGE: \(name) <command> [options]", "", "COMMANDS:"]
            for subcommand in configuration.subcommands where !subcommand.configuration.isHidden {
                lines.append(Self.row(subcommand.configuration.commandName, subcommand.configuration.abstract))
            }
            lines += examples(configuration)
            lines += ["", "GLOBAL OPTIONS:"]
            let globals = GlobalOptions.definitions + (path.isEmpty ? [GlobalOptions.version.definition] : [])
            for definition in globals {
                lines.append(Self.row(Self.label(definition), definition.help))
            }
            lines += ["", "See '\(name) <command> --help' (or '\(([root.commandName, "help"] + path.map { $0.configuration.commandName }).joined(separator: " ")) <command>') for the options of a command."]
            return lines.joined(separator: "\n") + "\n"
        }
        let configuration = command.configuration
        lines.append("OVERVIEW: \(configuration.abstract)")
        if let discussion = configuration.discussion { lines += ["", discussion] }
        let usage = configuration.usage
            ?? command.arguments.map { $0.isRequired ? $0.synopsis : "[\($0.synopsis)]" }.joined(separator: " ")
        lines += ["", "USAGE: \(name) \(usage)"]
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
        lines += examples(configuration)
        lines += ["", "GLOBAL OPTIONS:"]
        lines += GlobalOptions.definitions.map { Self.row(Self.label($0), $0.help) }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The EXAMPLES section of a command: its examples indented, or nothing.
    func examples(_ configuration: CommandConfiguration) -> [String] {
        guard !configuration.examples.isEmpty else { return [] }
        return ["", "EXAMPLES:"] + configuration.examples.map { "  " + $0 }
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
