/// The `headway` command line: argument parsing, the HTTP client, the commands.
public enum HeadwayCLI {}
