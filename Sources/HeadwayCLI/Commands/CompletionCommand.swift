import HeadwayClient
import HeadwayCore

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
        Completes commands, options, the values of --state, --outcome, --scope, --event and
        --format, and task ids (the newest 50 the server lists, within 2 s; from
        HEADWAY_URL and HEADWAY_TOKEN) after commands that take one and after --parent.
        """,
        examples: ["source <(headway completion bash)"])
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

    /// The values offered after an option that takes one of a few.
    static let choices: [(option: String, values: [String])] = [
        ("--state", TasksCommand.states), ("--outcome", FinishCommand.outcomes),
        ("--scope", ["report", "read", "control", "admin"]), ("--event", TaskEventKind.allCases.map(\.rawValue)),
        ("--format", WebhookFormat.allCases.map(\.rawValue)),
    ]
    /// Options whose value is a task id: the server's are offered.
    static let taskIDOptions = ["--parent"]
    /// The commands whose arguments are task ids.
    static let taskIDCommands = ["show", "history", "cancel", "terminate", "delete", "progress", "heartbeat", "finish", "watch"]
        .map { "headway " + $0 }

    public init(root: CommandConfiguration) {
        var nodes: [Node] = []
        func visit(_ path: String, _ configuration: CommandConfiguration, _ arguments: [ArgumentDefinition], isRoot: Bool) {
            let globals = GlobalOptions.definitions + (isRoot ? [GlobalOptions.version.definition] : [])
            let visible = configuration.subcommands.filter { !$0.configuration.isHidden }
            nodes.append(Node(path: path,
                              subcommands: visible.map {
                                  ($0.configuration.commandName, $0.configuration.abstract)
                              },
                              options: arguments.filter { $0.kind != .positional } + globals))
            for subcommand in visible {
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
        \(Self.choices.map { "        \($0.option)) COMPREPLY=($(compgen -W \"\($0.values.joined(separator: " "))\" -- \"$cur\")); return ;;" }.joined(separator: "\n"))
                \(Self.taskIDOptions.joined(separator: "|"))) COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" __complete ids "$cur" 2>/dev/null)" -- "$cur")); return ;;
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
            case "$cmdpath" in
                \(Self.taskIDCommands.map { "\"\($0)\"" }.joined(separator: "|"))) [[ "$cur" == -* ]] || words="$words $("${COMP_WORDS[0]}" __complete ids "$cur" 2>/dev/null)" ;;
                "headway completion") words="$words \(CompletionShell.allCases.map(\.rawValue).joined(separator: " "))" ;;
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
        \(Self.choices.map { "        \($0.option)) compadd -- \($0.values.joined(separator: " ")); return ;;" }.joined(separator: "\n"))
                \(Self.taskIDOptions.joined(separator: "|"))) compadd -- $("${words[1]}" __complete ids "${words[CURRENT]}" 2>/dev/null); return ;;
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
            case "$cmdpath" in
                \(Self.taskIDCommands.map { "\"\($0)\"" }.joined(separator: "|"))) [[ "${words[CURRENT]}" == -* ]] || candidates+=($("${words[1]}" __complete ids "${words[CURRENT]}" 2>/dev/null)) ;;
                "headway completion") candidates+=(\(CompletionShell.allCases.map(\.rawValue).joined(separator: " "))) ;;
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
            "function __headway_ids",
            "    set -l exe (commandline -opc)[1]",
            "    $exe __complete ids (commandline -ct) 2>/dev/null",
            "end",
            "complete -c headway -f",
        ]
        for node in nodes {
            let condition = quoted("test (__headway_path) = \"\(node.path)\"")
            for subcommand in node.subcommands {
                lines.append("complete -c headway -n \(condition) -a \(subcommand.name) -d \(quoted(subcommand.abstract))")
            }
            for option in node.options {
                var takesValue = option.kind == .flag ? "" : option.name == "db" ? " -r -F" : " -r"
                // -x: these values only, no file names.
                if let values = Self.choices.first(where: { $0.option == "--" + option.name })?.values {
                    takesValue = " -x -a " + quoted(values.joined(separator: " "))
                } else if Self.taskIDOptions.contains("--" + option.name) {
                    takesValue = " -x -a '(__headway_ids)'"
                }
                lines.append("complete -c headway -n \(condition) -l \(option.name)\(takesValue) -d \(quoted(option.help))")
            }
            if Self.taskIDCommands.contains(node.path) {
                lines.append("complete -c headway -n \(condition) -a '(__headway_ids)'")
            }
            if node.path == "headway completion" {
                lines.append("complete -c headway -n \(condition) -a " + quoted(CompletionShell.allCases.map(\.rawValue).joined(separator: " ")))
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// `headway __complete ids [PREFIX]`: what the completion scripts ask for; not listed in
/// help. Prints the ids of the newest tasks (at most 50, starting with PREFIX when it is
/// given), one a line, within about 2 s; prints nothing when the server does not answer.
public struct CompleteCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "__complete", abstract: "Words for the completion scripts (task ids)")
    static let kind = Argument<String>("kind", help: "ids")
    static let prefix = VariadicArgument<String>("prefix", help: "Only ids starting with this")
    public static let arguments = [kind.definition, prefix.definition]
    /// The most ids offered.
    static let limit: Int64 = 50

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if values[Self.kind] != "ids" { throw UsageError("__complete knows only 'ids'") }
    }

    public func run(_ context: CommandContext) throws {
        let api = TaskAPI(client: HeadwayClient(baseURL: context.options.serverURL, token: context.options.token,
                                                connectTimeoutSeconds: 1, totalTimeoutSeconds: 2))
        let prefix = values[Self.prefix].first.flatMap { TaskIDPrefix.isValid($0) ? $0 : nil }
        guard let page = try? api.listPage(TaskListQuery(pageSize: Self.limit, idPrefix: prefix)) else { return }
        for task in page.tasks {
            if case .object(let fields) = task, case .string(let id)? = fields["id"] { context.print(DisplayWidth.sanitize(id)) }
        }
    }
}
