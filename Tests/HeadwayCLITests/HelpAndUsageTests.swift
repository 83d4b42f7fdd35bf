import Foundation
import HeadwayTestSupport
import HeadwayCLI
import HeadwayCore
import Testing

/// `--help`, `--version` and usage errors of the built `headway`: no server needed.
@Suite struct HelpAndUsageTests {
    static let commands = ["", "start", "progress", "progress-batch", "heartbeat", "finish", "cancel", "terminate", "delete", "watch"]

    /// Each help text equals its golden file exactly (`golden/help-NAME.txt`).
    @Test(arguments: commands) func helpMatchesItsGoldenFile(command: String) throws {
        let result = command.isEmpty ? try headway("--help") : try headway(command, "--help")
        let name = command.isEmpty ? "headway" : command
        let golden = try String(contentsOf: packageRoot.appendingPathComponent("Tests/HeadwayCLITests/golden/help-\(name).txt"),
                                encoding: .utf8)
        #expect(result.status == 0)
        #expect(result.errors == "")
        #expect(result.output == golden)
    }

    @Test func helpComesAlsoFromDashHAndNoArguments() throws {
        #expect(try headway("progress", "-h").output == (try headway("progress", "--help").output))
        let bare = try headway()
        #expect(bare.status == 0)
        #expect(bare.output == (try headway("--help").output))
    }

    @Test func versionMatchesTheContract() throws {
        let result = try headway("--version")
        #expect(result.status == 0)
        #expect(result.output == "headway \(HeadwayVersion.current)\n")
        let spec = try String(contentsOf: packageRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        #expect(spec.contains("\n  version: \(HeadwayVersion.current)\n"), "openapi.yaml info.version")
    }

    /// Each bad command line exits 64 with `headway: <what is wrong>` naming the flag,
    /// and the hint to the command's help.
    @Test(arguments: [
        (["progress", "t", "--bogus"], "headway: unknown option '--bogus'\nSee 'headway progress --help'.\n"),
        (["start"], "headway: missing <name>\nSee 'headway start --help'.\n"),
        (["start", "x", "--total", "many"], "headway: --total must be an integer, not 'many'\nSee 'headway start --help'.\n"),
        (["start", "x", "--unit", "files"], "headway: --unit needs --total\nSee 'headway start --help'.\n"),
        (["start", "x", "--stall-timeout", "0x1p3"], "headway: --stall-timeout must be a number, not '0x1p3'\nSee 'headway start --help'.\n"),
        (["start", "x", "--weight", "1e400"], "headway: --weight must be a number, not '1e400'\nSee 'headway start --help'.\n"),
        (["tasks", "--token", "a\r\nX-Injected: 1"],
         "headway: --token (or HEADWAY_TOKEN) must not hold blanks or control characters\nSee 'headway tasks --help'.\n"),
        (["show", "\u{1B}]0;pwn\u{07}x", "--bogus"], "headway: unknown option '--bogus'\nSee 'headway show --help'.\n"),
        (["tasks", "--server", "http://"], "headway: --server must be an http:// or https:// URL, not 'http://'\nSee 'headway tasks --help'.\n"),
        (["start", "x", "--weight"], "headway: --weight needs a value\nSee 'headway start --help'.\n"),
        (["progress", "t"], "headway: progress needs --completed or --increment\nSee 'headway progress --help'.\n"),
        (["progress", "t", "--completed", "1", "--increment", "1"],
         "headway: --completed and --increment cannot be given together\nSee 'headway progress --help'.\n"),
        (["finish", "t"], "headway: missing --outcome <outcome>\nSee 'headway finish --help'.\n"),
        (["finish", "t", "--outcome", "done"],
         "headway: --outcome must be succeeded, failed or canceled, not 'done'\nSee 'headway finish --help'.\n"),
        (["cancel", "a", "b"], "headway: unexpected argument 'b'\nSee 'headway cancel --help'.\n"),
        (["delete", "t", "--yes=1"], "headway: --yes takes no value\nSee 'headway delete --help'.\n"),
        (["frobnicate"], "headway: unknown command 'frobnicate'\nSee 'headway --help'.\n"),
        (["--json"], "headway: a command is needed\nSee 'headway --help'.\n"),
        (["-x", "start"], "headway: unknown option '-x'\nSee 'headway --help'.\n"),
    ]) func usageErrorsExit64(arguments: [String], expected: String) throws {
        let result = try runBuilt("headway", arguments)
        #expect(result.status == 64)
        #expect(result.errors == expected)
        #expect(result.output == "")
    }

    /// Nothing listens: exit 69 with the server named.
    @Test func anUnreachableServerExits69() throws {
        let url = "http://127.0.0.1:\(unusedPort())"
        let result = try headway("heartbeat", "t", "--server", url)
        #expect(result.status == 69)
        #expect(result.errors.hasPrefix("headway: cannot reach \(url): "), "\(result.errors)")
        let fromEnvironment = try headway("cancel", "t", environment: ["HEADWAY_URL": url])
        #expect(fromEnvironment.status == 69)
    }
}
