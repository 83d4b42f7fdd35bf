import Foundation
import HeadwayCLI
import enum HeadwayCore.HeadwayVersion

// The one place where outcomes become exit statuses (Litestream's rule): 0 ok, 1 the
// server refused, 3 cancel requested, 64 usage, 69 server unreachable or unavailable.

/// Writes `headway: message` on stderr, each line made safe for a terminal (a server's
/// problem text or a typed argument may carry escape sequences), and exits with `status`.
func fail(_ message: String, _ status: Int32) -> Never {
    let safe = message.split(separator: "\n", omittingEmptySubsequences: false)
        .map { DisplayWidth.sanitize(String($0)) }.joined(separator: "\n")
    StandardStreams.error("headway: \(safe)\n")
    exit(status)
}

let parsed: ParsedCommandLine
do {
    parsed = try HeadwayCommand.parser.parse(Array(CommandLine.arguments.dropFirst()),
                                             environment: ProcessInfo.processInfo.environment)
} catch let error as UsageError {
    fail(CLIError.usage(error).message, 64)
}

switch parsed {
case .help(let text):
    StandardStreams.output(text)
case .version:
    StandardStreams.output("headway \(HeadwayVersion.current)\n")
case .run(let command, let options):
    let context = CommandContext(options: options, isInteractive: isatty(0) == 1 && isatty(2) == 1)
    do {
        try command.run(context)
    } catch let error as CLIError {
        switch error {
        case .usage: fail(error.message, 64)
        case .refused, .unexpectedReply, .notConfirmed, .watchedTaskDeleted, .updatesRefused, .ambiguousID:
            fail(error.message, 1)
        case .cancelRequested: fail(error.message, 3)
        case .unreachable, .unavailable: fail(error.message, 69)
        }
    } catch let error as UsageError {
        fail(CLIError.usage(error).message, 64)
    } catch let error as CommandExit {
        exit(error.status)
    } catch {
        fail("\(error)", 1)
    }
}
exit(0)
