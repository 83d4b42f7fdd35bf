@testable import HeadwayCLI
import Testing

/// The parser in process: forms of options, the environment, what each command receives.
@Suite struct ParserTests {
    let parser = HeadwayCommand.parser

    func command(_ arguments: [String], environment: [String: String] = [:]) throws -> (any ParsableCommand, GlobalOptions) {
        guard case .run(let command, let options) = try parser.parse(arguments, environment: environment) else {
            throw UsageError("not a command to run")
        }
        return (command, options)
    }

    @Test func globalOptionsComeFromFlagsBeforeOrAfterOrFromTheEnvironment() throws {
        let (_, defaults) = try command(["cancel", "t"])
        #expect(defaults == GlobalOptions(serverURL: "http://127.0.0.1:8080", token: nil, json: false))
        let (_, before) = try command(["--server=http://h:1", "--token", "s", "--json", "cancel", "t"])
        #expect(before == GlobalOptions(serverURL: "http://h:1", token: "s", json: true))
        let (_, after) = try command(["cancel", "t", "--json", "--server", "http://h:2"],
                                     environment: ["HEADWAY_URL": "http://env:3", "HEADWAY_TOKEN": "e"])
        #expect(after == GlobalOptions(serverURL: "http://h:2", token: "e", json: true))
        let (_, environment) = try command(["cancel", "t"], environment: ["HEADWAY_URL": "http://env:3"])
        #expect(environment.serverURL == "http://env:3")
    }

    @Test func typedValuesReachTheCommand() throws {
        let (parsed, _) = try command(["start", "--total=12", "Backup", "--unit", "files", "--weight", "0.5"])
        let start = try #require(parsed as? StartCommand)
        #expect(start.values[StartCommand.name] == "Backup")
        #expect(start.values[StartCommand.total] == 12)
        #expect(start.values[StartCommand.weight] == 0.5)
        #expect(start.values[StartCommand.id] == nil)
    }

    @Test func doubleDashEndsOptions() throws {
        let (parsed, _) = try command(["start", "--", "--not-an-option"])
        #expect((parsed as? StartCommand)?.values[StartCommand.name] == "--not-an-option")
    }

    @Test func aServerThatIsNotAnHTTPURLIsAUsageError() {
        #expect(throws: UsageError("--server must be an http:// or https:// URL, not 'h:1'", commandPath: "headway cancel")) {
            try command(["cancel", "t", "--server", "h:1"])
        }
    }

    @Test func versionAndHelpAreNotCommands() throws {
        guard case .version = try parser.parse(["--version"], environment: [:]) else {
            Issue.record("--version")
            return
        }
        guard case .help(let text) = try parser.parse(["--json", "delete", "-h"], environment: [:]) else {
            Issue.record("delete -h")
            return
        }
        #expect(text.hasPrefix("OVERVIEW: Delete a task and its descendants\n"))
    }

    @Test func aTaskPathEscapesTheID() {
        #expect(TaskAPI.taskPath("a b/c", "cancel") == "/v1/tasks/a%20b%2Fc/cancel")
    }
}

/// A group of commands and its one command, to test nesting (`headway token create`).
struct ExampleGroup: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "group", abstract: "A group",
                                                    subcommands: [ExampleLeaf.self])
    static let arguments: [ArgumentDefinition] = []
    init(_ values: ParsedValues) {}
    func run(_ context: CommandContext) throws {}
}

struct ExampleLeaf: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "leaf", abstract: "A leaf")
    static let name = Argument<String>("name", help: "A name")
    static let arguments = [name.definition]
    let values: ParsedValues
    init(_ values: ParsedValues) { self.values = values }
    func run(_ context: CommandContext) throws {}
}

@Suite struct NestedCommandTests {
    let parser = CommandLineParser(root: CommandConfiguration(commandName: "headway", abstract: "Top",
                                                              subcommands: [ExampleGroup.self]))

    @Test func aNestedCommandIsFoundByItsPath() throws {
        guard case .run(let command, let options) = try parser.parse(["--json", "group", "leaf", "x"], environment: [:]) else {
            Issue.record("not a command")
            return
        }
        #expect((command as? ExampleLeaf)?.values[ExampleLeaf.name] == "x")
        #expect(options.json)
    }

    @Test func aGroupAloneNeedsACommandAndListsItsCommandsInHelp() throws {
        #expect(throws: UsageError("a command is needed", commandPath: "headway group")) {
            try parser.parse(["group"], environment: [:])
        }
        #expect(throws: UsageError("unknown command 'twig'", commandPath: "headway group")) {
            try parser.parse(["group", "twig"], environment: [:])
        }
        guard case .help(let text) = try parser.parse(["group", "--help"], environment: [:]) else {
            Issue.record("no help")
            return
        }
        #expect(text.contains("USAGE: headway group <command> [options]\n\nCOMMANDS:\n  leaf "))
        guard case .help(let leafHelp) = try parser.parse(["group", "leaf", "--help"], environment: [:]) else {
            Issue.record("no help")
            return
        }
        #expect(leafHelp.contains("USAGE: headway group leaf <name>\n"))
    }
}
