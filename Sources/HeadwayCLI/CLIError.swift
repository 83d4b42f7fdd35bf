/// Every way a command ends other than success; `main` turns each into its exit status.
public enum CLIError: Error, Equatable {
    /// The command line cannot be run (exit 64).
    case usage(UsageError)
    /// The server answered with a problem document (exit 1).
    case refused(title: String, detail: String, code: String)
    /// The server answered that it cannot serve now: 429 or 5xx (exit 69, as when it
    /// cannot be reached); `headway run` retries it.
    case unavailable(status: Int, title: String, detail: String, code: String)
    /// The server answered with an error that is not a problem document (exit 1).
    case unexpectedReply(String)
    /// The server could not be reached, or the exchange broke off (exit 69).
    case unreachable(server: String, reason: String)
    /// The task's reply says `cancel_requested` (exit 3): the runner should stop.
    case cancelRequested(taskID: String)
    /// The server refused `refused` of the `sent` updates of a batch (exit 1); each was
    /// printed with its problem.
    case updatesRefused(refused: Int, sent: Int)
    /// The person at the terminal did not confirm (exit 1).
    case notConfirmed(String)
    /// A task `headway watch --until-done` waits for was deleted before it finished (exit 1).
    case watchedTaskDeleted(taskID: String)
    /// A shortened id that starts more than one generated id (exit 1): `matches` are some
    /// of them, `count` how many there are.
    case ambiguousID(prefix: String, matches: [String], count: Int64)

    /// The line printed on stderr after `headway: `.
    public var message: String {
        switch self {
        case .usage(let error): "\(error.message)\nSee '\(error.commandPath) --help'."
        case .refused(let title, let detail, let code), .unavailable(_, let title, let detail, let code):
            // The server's words, each on the one line it is given.
            [title + ":", detail, "(" + code + ")"].map(DisplayWidth.sanitize).joined(separator: " ")
        case .unexpectedReply(let text): text
        case .unreachable(let server, let reason): "cannot reach \(server): \(reason)"
        case .cancelRequested(let taskID): "cancel requested for task \(taskID)"
        case .updatesRefused(let refused, let sent): "\(refused) of \(sent) updates refused"
        case .notConfirmed(let text): text
        case .watchedTaskDeleted(let taskID): "task \(taskID) was deleted before it finished"
        case .ambiguousID(let prefix, let matches, let count):
            "'\(prefix)' starts \(Formatting.count(count)) task ids (\(matches.joined(separator: ", "))"
                + (count > Int64(matches.count) ? ", …" : "") + "): give more of the id"
        }
    }
}
