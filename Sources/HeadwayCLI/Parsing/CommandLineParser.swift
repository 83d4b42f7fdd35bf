import ArgumentParsing

/// What a command line asks for.
public enum ParsedCommandLine {
    /// Print this help text and exit 0.
    case help(String)
    /// Print the version and exit 0.
    case version
    /// Run this command (already validated) with these global options.
    case run(any ParsableCommand, GlobalOptions)
}

/// Turns `headway`'s arguments into a command: the subcommand's name (and a nested one's,
/// `headway token create`), then its options and arguments mixed with the global ones in
/// any order; `--` ends the options.
public struct CommandLineParser {
    let root: CommandConfiguration

    public init(root: CommandConfiguration) { self.root = root }

    /// Parses `arguments` (without the program name), then validates the command.
    public func parse(_ arguments: [String], environment: [String: String]) throws -> ParsedCommandLine {
        var values = ParsedValues()
        var path: [any ParsableCommand.Type] = []
        var command: (any ParsableCommand.Type)? { path.last }
        var positionalTexts: [String] = []
        var askedForHelp = false
        var commandPath: String { ([root.commandName] + path.map { $0.configuration.commandName }).joined(separator: " ") }

        var scanner = ArgumentScanner(arguments, doubleDashEndsOptions: true)
        while true {
            // The options known here: the global ones, and the command's once its name is read.
            var known = GlobalOptions.definitions
            if command == nil { known.append(GlobalOptions.version.definition) }
            known += command?.arguments ?? []
            let scanned: ScannedArgument
            do {
                guard let next = try scanner.next({ name in
                    known.first { $0.name == name && $0.kind != .positional }.map { $0.kind == .flag ? .forbidden : .required }
                }) else { break }
                scanned = next
            } catch {
                switch error {
                case .unknownOption(let name):
                    let owners = Self.commands(in: command?.configuration.subcommands ?? root.subcommands,
                                               path: commandPath, defining: name)
                    guard !owners.isEmpty else {
                        let names = known.filter { $0.kind != .positional }.map { "--" + $0.name }
                        throw UsageError("unknown option '--\(name)'" + Suggestion.didYouMean("--" + name, among: names),
                                         commandPath: commandPath)
                    }
                    let list = owners.count == 1 ? owners[0] : owners.dropLast().joined(separator: ", ") + " and " + owners.last!
                    throw UsageError("'--\(name)' comes after the command's name: it is an option of \(list)",
                                     commandPath: commandPath)
                case .needsValue(let name): throw UsageError("--\(name) needs a value", commandPath: commandPath)
                case .takesNoValue(let name): throw UsageError("--\(name) takes no value", commandPath: commandPath)
                }
            }
            let text: String
            switch scanned {
            case .short("-h"):
                values.flags.insert(GlobalOptions.help.name)
                continue
            case .short(let short):
                throw UsageError("unknown option '\(short)'", commandPath: commandPath)
            case .option(let name, nil):
                values.flags.insert(name)
                continue
            case .option(let name, let value?):
                let definition = known.first { $0.name == name && $0.kind != .positional }!
                guard definition.accepts(value) else {
                    throw UsageError("--\(name) must be \(definition.kindDescription), not '\(value)'", commandPath: commandPath)
                }
                values.options[name] = value
                values.repeatedOptions[name, default: []].append(value)
                continue
            case .positional(let positional):
                text = positional
            }
            let optionsEnded = scanner.optionsEnded
            let choices = command?.configuration.subcommands ?? root.subcommands
            if command == nil && text == "help" && !optionsEnded && positionalTexts.isEmpty && !askedForHelp {
                // `headway help token create`: the help of the command the words name.
                askedForHelp = true
                values.flags.insert(GlobalOptions.help.name)
                continue
            }
            if !choices.isEmpty && positionalTexts.isEmpty {
                guard let found = choices.first(where: { $0.configuration.commandName == text }) else {
                    let names = choices.filter { !$0.configuration.isHidden }.map { $0.configuration.commandName } + (command == nil ? ["help"] : [])
                    throw UsageError("unknown command '\(text)'" + Suggestion.didYouMean(text, among: names),
                                     commandPath: commandPath)
                }
                path.append(found)
            } else {
                positionalTexts.append(text)
            }
        }

        let help = HelpGenerator(root: root)
        guard let command else {
            if values.flags.contains(GlobalOptions.version.name) { return .version }
            if values.flags.contains(GlobalOptions.help.name) || arguments.isEmpty { return .help(help.text(for: [])) }
            throw UsageError("a command is needed", commandPath: commandPath)
        }
        if values.flags.contains(GlobalOptions.help.name) { return .help(help.text(for: path)) }
        guard command.configuration.subcommands.isEmpty else {
            throw UsageError("a command is needed", commandPath: commandPath)
        }

        let positionals = command.arguments.filter { $0.kind == .positional }
        // A last positional that is not required takes every remaining text (variadic).
        let variadic = positionals.last.flatMap { $0.isRequired ? nil : $0 }
        let paired = positionalTexts.enumerated().map { ($0.offset < positionals.count ? positionals[$0.offset] : variadic, $0.element) }
        for case let (definition?, text) in paired {
            guard definition.accepts(text) else {
                throw UsageError("\(definition.displayName) must be \(definition.kindDescription), not '\(text)'",
                                 commandPath: commandPath)
            }
            if definition.isRequired {
                values.positionals[definition.name] = text
            } else {
                values.variadics[definition.name, default: []].append(text)
            }
        }
        if command.takesTrailingArguments {
            values.trailing = Array(positionalTexts.dropFirst(positionals.count))
        } else if positionalTexts.count > positionals.count && variadic == nil {
            throw UsageError("unexpected argument '\(positionalTexts[positionals.count])'", commandPath: commandPath)
        }
        if let missing = positionals.dropFirst(positionalTexts.count).first(where: \.isRequired) {
            throw UsageError("missing \(missing.displayName)", commandPath: commandPath)
        }
        if let missing = command.arguments.first(where: { $0.isRequired && $0.kind != .positional && values.options[$0.name] == nil }) {
            throw UsageError("missing \(missing.synopsis)", commandPath: commandPath)
        }
        let parsed = command.init(values)
        do {
            try parsed.validate()
        } catch let error as UsageError {
            throw UsageError(error.message, commandPath: commandPath)
        }
        let options = GlobalOptions(values, environment: environment)
        guard options.serverURL.hasPrefix("http://") || options.serverURL.hasPrefix("https://"),
              options.serverURL.count > "https://".count || !options.serverURL.hasSuffix("//"),
              !options.serverURL.unicodeScalars.contains(where: Self.isControlOrBlank) else {
            throw UsageError("--server must be an http:// or https:// URL, not '\(options.serverURL)'", commandPath: commandPath)
        }
        // A token goes into a header line: a line break would add headers of its own.
        if let token = options.token, token.unicodeScalars.contains(where: Self.isControlOrBlank) {
            throw UsageError("--token (or HEADWAY_TOKEN) must not hold blanks or control characters", commandPath: commandPath)
        }
        return .run(parsed, options)
    }

    static func isControlOrBlank(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value <= 0x20 || (0x7F..<0xA0).contains(scalar.value)
    }

    /// The full names of the commands among `commands` and below them that take the
    /// option `name` (`headway db status`), for a hint when it comes before them.
    static func commands(in commands: [any ParsableCommand.Type], path: String, defining name: String) -> [String] {
        commands.flatMap { command -> [String] in
            let fullName = path + " " + command.configuration.commandName
            let own = command.arguments.contains { $0.name == name && $0.kind != .positional } ? [fullName] : []
            return own + Self.commands(in: command.configuration.subcommands, path: fullName, defining: name)
        }
    }
}
