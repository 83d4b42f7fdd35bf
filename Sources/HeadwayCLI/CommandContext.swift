import Foundation
import HeadwayClient

/// What a command runs with: the global options, the API, and its terminal.
public struct CommandContext: Sendable {
    public let options: GlobalOptions
    public let api: TaskAPI
    /// Whether stdin and stderr are a terminal a person can answer at.
    public let isInteractive: Bool

    public init(options: GlobalOptions, isInteractive: Bool) {
        self.options = options
        self.api = TaskAPI(client: HeadwayClient(baseURL: options.serverURL, token: options.token))
        self.isInteractive = isInteractive
    }

    /// Writes `text` and a newline on stdout.
    public func print(_ text: String) {
        StandardStreams.output(text + "\n")
    }

    /// Asks `question` on stderr and reads one line from stdin; true for "y" or "yes".
    public func confirm(_ question: String) -> Bool {
        StandardStreams.error(question + " [y/N] ")
        guard let answer = readLine() else { return false }
        return ["y", "yes"].contains(answer.trimmingCharacters(in: .whitespaces).lowercased())
    }

    /// Prints a runner command's reply: the server's JSON with `--json`, else nothing;
    /// then throws `cancelRequested` when the reply asks the runner to stop.
    func finishRunnerCommand(_ reply: TaskAPI.Reply, taskID: String) throws(CLIError) {
        guard reply.string("id") != nil else { throw .unexpectedReply("the server's reply is not a task") }
        if options.json { print(reply.text) }
        if reply.cancelRequested { throw .cancelRequested(taskID: taskID) }
    }
}
