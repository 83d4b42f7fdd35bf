/// The options every command takes, before or after the subcommand's name.
public struct GlobalOptions: Sendable, Equatable {
    /// Where `headwayd` listens when neither `--server` nor `HEADWAY_URL` says otherwise.
    public static let defaultServer = "http://127.0.0.1:8080"

    static let server = Option<String>("server", valueName: "url",
                                       help: "The headwayd to talk to (env HEADWAY_URL; default \(defaultServer))")
    static let token = Option<String>("token", valueName: "token", help: "The access token to send (env HEADWAY_TOKEN)")
    static let json = Flag("json", help: "Print the server's JSON instead of text")
    static let help = Flag("help", help: "Show help for the command")
    static let version = Flag("version", help: "Show the version")

    /// The global options in help order (`--version` only at the top level).
    static let definitions = [server.definition, token.definition, json.definition, help.definition]

    public var serverURL: String
    public var token: String?
    public var json: Bool

    public init(serverURL: String = defaultServer, token: String? = nil, json: Bool = false) {
        self.serverURL = serverURL
        self.token = token
        self.json = json
    }

    /// The options from the command line, falling back on the environment.
    init(_ values: ParsedValues, environment: [String: String]) {
        serverURL = values[Self.server] ?? environment["HEADWAY_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultServer
        token = values[Self.token] ?? environment["HEADWAY_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        json = values[Self.json]
    }
}
