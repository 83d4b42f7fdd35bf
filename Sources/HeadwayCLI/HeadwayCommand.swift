/// The `headway` command itself: its help and its subcommands.
public enum HeadwayCommand {
    public static let configuration = CommandConfiguration(
        commandName: "headway", abstract: "Report and steer tasks on a Headway server",
        discussion: """
        Exit status: 0 ok; 1 the server refused (its problem is printed), or a shortened id
        starts several task ids; 3 cancel requested (progress, progress-batch, heartbeat,
        finish); 4 a watched task failed, 5 one was canceled (watch --until-done); run exits
        with its command's status; 64 usage error; 69 server unreachable or unavailable
        (429, 5xx). A task id may be given by its start when the server generated it
        (3f2a9c1e for 3f2a9c1e-…, as tables show it).
        """,
        subcommands: [StartCommand.self, ProgressCommand.self, ProgressBatchCommand.self, HeartbeatCommand.self,
                      FinishCommand.self, CancelCommand.self, TerminateCommand.self, DeleteCommand.self,
                      RunCommand.self, WatchCommand.self, TasksCommand.self, ShowCommand.self, HistoryCommand.self,
                      TokenCommand.self, WebhookCommand.self, DatabaseCommand.self, CompletionCommand.self,
                      CompleteCommand.self],
        examples: ["headway tasks --state running", "ID=$(headway start \"Nightly backup\" --total 1200 --unit files)", "headway help watch"])

    /// The parser for `headway`'s command line.
    public static var parser: CommandLineParser { CommandLineParser(root: configuration) }
}
