/// A shell `headway completion` writes a script for.
public enum CompletionShell: String, ArgumentValue, CaseIterable {
    case bash, zsh, fish

    public init?(argument text: String) { self.init(rawValue: text) }
    public static var kindDescription: String { "bash, zsh or fish" }
}

/// `headway completion bash|zsh|fish`: a completion script made from the command
/// definitions, so every command, subcommand and option the parser knows is offered.
public struct CompletionCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "completion", abstract: "Print a shell completion script",
        discussion: """
        bash: source <(headway completion bash)
        zsh:  source <(headway completion zsh)   (after compinit)
        fish: headway completion fish | source
        """)
    static let shell = Argument<CompletionShell>("shell", help: "bash, zsh or fish")
    public static let arguments = [shell.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        context.print(CompletionScript(root: HeadwayCommand.configuration).text(for: values[Self.shell]))
    }
}

/// Writes completion scripts from a command tree: each command path (`headway token
/// create`) with the words completed after it (its subcommands and options).
public struct CompletionScript {
    /// One command: its path from the root, what may follow it, and its abstract.
    struct Node {
        let path: String
        let subcommands: [(name: String, abstract: String)]
        let options: [ArgumentDefinition]
    }

    let nodes: [Node]
    /// Options that take a value, whose value is never a command name.
    let valueOptions: [String]

    public init(root: CommandConfiguration) {
        var nodes: [Node] = []
        func visit(_ path: String, _ configuration: CommandConfiguration, _ arguments: [ArgumentDefinition], isRoot: Bool) {
            let globals = GlobalOptions.definitions + (isRoot ? [GlobalOptions.version.definition] : [])
            nodes.append(Node(path: path,
                              subcommands: configuration.subcommands.map {
                                  ($0.configuration.commandName, $0.configuration.abstract)
                              },
                              options: arguments.filter { $0.kind != .positional } + globals))
            for subcommand in configuration.subcommands {
                visit(path + " " + subcommand.configuration.commandName, subcommand.configuration, subcommand.arguments,
                      isRoot: false)
            }
        }
        visit(root.commandName, root, [], isRoot: true)
        self.nodes = nodes
        var valueOptions: [String] = []
        for node in nodes {
            for option in node.options where option.kind != .flag && !valueOptions.contains("--" + option.name) {
                valueOptions.append("--" + option.name)
            }
        }
        self.valueOptions = valueOptions
    }

    /// The script for `shell`.
    public func text(for shell: CompletionShell) -> String {
        switch shell {
        case .bash: bash
        case .zsh: zsh
        case .fish: fish
        }
    }

    /// Every word completed after a command: its subcommands, then its options.
    private func words(_ node: Node) -> String {
        (node.subcommands.map(\.name) + node.options.map { "--" + $0.name }).joined(separator: " ")
    }

    /// The `case` patterns that step from a command to one of its subcommands.
    private var steps: String {
        nodes.flatMap { node in node.subcommands.map { "\"\(node.path) \($0.name)\"" } }.joined(separator: "|")
    }

    var bash: String {
        let cases = nodes.map { "        \"\($0.path)\") words=\"\(words($0))\" ;;" }.joined(separator: "\n")
        return """
        # bash completion for headway (headway completion bash)
        _headway() {
            local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmdpath="headway" words="" i
            case "$prev" in
                --db) COMPREPLY=($(compgen -f -- "$cur")); return ;;
                \(valueOptions.joined(separator: "|"))) COMPREPLY=(); return ;;
            esac
            for ((i = 1; i < COMP_CWORD; i++)); do
                case "${COMP_WORDS[i]}" in
                    \(valueOptions.joined(separator: "|"))) ((i++)); continue ;;
                esac
                case "$cmdpath ${COMP_WORDS[i]}" in
                    \(steps)) cmdpath="$cmdpath ${COMP_WORDS[i]}" ;;
                esac
            done
            case "$cmdpath" in
        \(cases)
            esac
            COMPREPLY=($(compgen -W "$words" -- "$cur"))
        }
        complete -F _headway headway
        """
    }

    var zsh: String {
        let cases = nodes.map { "        \"\($0.path)\") candidates=(\(words($0))) ;;" }.joined(separator: "\n")
        return """
        #compdef headway
        # zsh completion for headway (headway completion zsh)
        _headway() {
            local cmdpath="headway" i
            local -a candidates
            case "${words[CURRENT-1]}" in
                --db) _files; return ;;
                \(valueOptions.joined(separator: "|"))) return 1 ;;
            esac
            for ((i = 2; i < CURRENT; i++)); do
                case "${words[i]}" in
                    \(valueOptions.joined(separator: "|"))) ((i++)); continue ;;
                esac
                case "$cmdpath ${words[i]}" in
                    \(steps)) cmdpath="$cmdpath ${words[i]}" ;;
                esac
            done
            case "$cmdpath" in
        \(cases)
            esac
            compadd -- "${candidates[@]}"
        }
        if [ "${funcstack[1]}" = "_headway" ]; then
            _headway "$@"
        else
            compdef _headway headway
        fi
        """
    }

    var fish: String {
        func quoted(_ text: String) -> String {
            "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
        }
        var lines = [
            "# fish completion for headway (headway completion fish)",
            "function __headway_path",
            "    set -l cmdpath headway",
            "    set -l skip 0",
            "    set -l typed (commandline -opc)",
            "    set -e typed[1]",
            "    for word in $typed",
            "        if test $skip = 1",
            "            set skip 0",
            "            continue",
            "        end",
            "        switch $word",
            "            case \(valueOptions.joined(separator: " "))",
            "                set skip 1",
            "                continue",
            "        end",
            "        switch \"$cmdpath $word\"",
            "            case \(nodes.flatMap { node in node.subcommands.map { quoted("\(node.path) \($0.name)") } }.joined(separator: " "))",
            "                set cmdpath \"$cmdpath $word\"",
            "        end",
            "    end",
            "    echo $cmdpath",
            "end",
            "complete -c headway -f",
        ]
        for node in nodes {
            let condition = quoted("test (__headway_path) = \"\(node.path)\"")
            for subcommand in node.subcommands {
                lines.append("complete -c headway -n \(condition) -a \(subcommand.name) -d \(quoted(subcommand.abstract))")
            }
            for option in node.options {
                let takesValue = option.kind == .flag ? "" : option.name == "db" ? " -r -F" : " -r"
                lines.append("complete -c headway -n \(condition) -l \(option.name)\(takesValue) -d \(quoted(option.help))")
            }
        }
        return lines.joined(separator: "\n")
    }
}
