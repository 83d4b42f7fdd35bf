import Foundation
import HeadwayCore

/// `headway token create|list|revoke`: access tokens over the API (`/v1/tokens`), with an
/// admin token (`--token` / `HEADWAY_TOKEN`).
public struct TokenCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Make, list and revoke access tokens (needs an admin token)",
        subcommands: [TokenCreateCommand.self, TokenListCommand.self, TokenRevokeCommand.self],
        examples: ["headway token create --scope report --name ci"])
    public static let arguments: [ArgumentDefinition] = []

    public init(_ values: ParsedValues) {}

    public func run(_ context: CommandContext) throws {}
}

/// A token's scope as an option value: report, read, control or admin.
extension Scope: ArgumentValue {
    public init?(argument text: String) { self.init(rawValue: text) }
    public static var kindDescription: String { "report, read, control or admin" }
}

/// A token's lifetime as an option value: seconds, or a number with s, m, h or d, from 1
/// minute to 100 years (as `headwayd token create --expires-in`).
public struct TokenLifetime: ArgumentValue, Equatable {
    public let milliseconds: Int64

    public init?(argument text: String) {
        guard let seconds = DurationText.seconds(text), TokenRequest.isLifetimeAllowed(seconds: seconds) else { return nil }
        milliseconds = Int64((seconds * 1000).rounded())
    }

    public static var kindDescription: String { "a duration from 1 minute to 100 years (3600, 90m, 12h, 30d)" }
}

/// `headway token create --scope S…`: makes a token and prints its secret alone.
public struct TokenCreateCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "create", abstract: "Make a token and print its secret",
        discussion: "The secret is printed alone on stdout, shown this once; --json prints the whole reply.",
        examples: ["headway token create --scope read --scope control --expires-in 30d --name ops"])
    static let scope = Option<Scope>("scope", valueName: "scope",
                                     help: "report, read, control or admin (repeatable; admin allows all)", required: true)
    static let name = Option<String>("name", valueName: "name", help: "A name for logs and listings (default: cli)")
    static let taskPrefix = Option<String>("task-prefix", valueName: "prefix",
                                           help: "The token sees and touches only tasks whose id starts with this")
    static let expiresIn = Option<TokenLifetime>("expires-in", valueName: "duration",
                                                 help: "Expires this long from now (3600, 90m, 12h, 30d); default never")
    public static let arguments = [scope.definition, name.definition, taskPrefix.definition, expiresIn.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let name = values[Self.name], name.isEmpty || name.unicodeScalars.count > Limits.nameLength {
            throw UsageError("--name must be 1 to \(Limits.nameLength) characters")
        }
        if let prefix = values[Self.taskPrefix], !TaskIDPrefix.isValid(prefix) {
            throw UsageError("--task-prefix must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}, not '\(prefix)'")
        }
    }

    public func run(_ context: CommandContext) throws {
        let scopes = Set(values.all(Self.scope)).sorted()
        var body: JSONObject = [
            "name": .string(values[Self.name] ?? "cli"),
            "scopes": .array(scopes.map { .string($0.rawValue) }),
        ]
        if let prefix = values[Self.taskPrefix] { body["task_prefix"] = .string(prefix) }
        if let lifetime = values[Self.expiresIn] {
            body["expires_at"] = .string(Timestamp.rfc3339(SystemClock().now() + lifetime.milliseconds))
        }
        try Self.printCreated(try context.api.post("/v1/tokens", body), context)
    }

    /// What a command that makes a secret prints: the whole reply with `--json`, else the
    /// secret alone (shown once; the server keeps only what it needs).
    static func printCreated(_ reply: TaskAPI.Reply, _ context: CommandContext) throws {
        if context.options.json {
            context.print(reply.text)
        } else if let secret = reply.string("secret") {
            context.print(secret)
        } else {
            throw CLIError.unexpectedReply("the server's reply holds no secret")
        }
    }
}

/// `headway token list`: the tokens not revoked, without secrets.
public struct TokenListCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the tokens (without secrets)",
        discussion: "A table of id, name, scopes, prefix, expiry and last use; --json prints one token per line.",
        examples: ["headway token list"])
    public static let arguments: [ArgumentDefinition] = []

    public init(_ values: ParsedValues) {}

    /// The items under `key` of the listing at `path`; with `--json` they are printed, one
    /// per line, and nil is returned.
    static func listing(_ path: String, key: String, noun: String, _ context: CommandContext) throws -> [JSONValue]? {
        let reply = try context.api.get(path)
        guard case .object(let list)? = reply.json, case .array(let items)? = list[key] else {
            throw CLIError.unexpectedReply("the server's reply holds no \(noun) list")
        }
        guard !context.options.json else {
            for item in items { context.print(item.canonicalText) }
            return nil
        }
        return items
    }

    public func run(_ context: CommandContext) throws {
        guard let tokens = try Self.listing("/v1/tokens", key: "tokens", noun: "token", context) else { return }
        let header = ["ID", "NAME", "SCOPES", "PREFIX", "EXPIRES", "LAST USED"]
        let rows = tokens.map(Self.row)
        context.print(Self.table([header] + rows))
    }

    /// One token's cells, texts sanitized for the terminal.
    static func row(_ token: JSONValue) -> [String] {
        guard case .object(let object) = token else { return [] }
        func text(_ name: String, empty: String = "-") -> String {
            if case .string(let value)? = object[name] { return DisplayWidth.sanitize(value) }
            return empty
        }
        var scopes = "-"
        if case .array(let values)? = object["scopes"] {
            scopes = values.compactMap { if case .string(let scope) = $0 { scope } else { nil } }.joined(separator: ",")
        }
        return [text("id"), text("name"), scopes, text("task_prefix"), text("expires_at", empty: "never"),
                text("last_used_at", empty: "never")]
    }

    /// Left-aligned columns two spaces apart (widths in terminal cells), no trailing spaces.
    static func table(_ rows: [[String]]) -> String {
        let widths = (0..<(rows.first?.count ?? 0)).map { column in rows.map { DisplayWidth.of($0[column]) }.max() ?? 0 }
        return rows.map { row in
            var line = ""
            for (column, cell) in row.enumerated() {
                line += column == row.count - 1 ? cell : DisplayWidth.pad(cell, to: widths[column]) + "  "
            }
            return line
        }.joined(separator: "\n")
    }
}

/// `headway token revoke ID`: refused from the next request on.
public struct TokenRevokeCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "Revoke a token at once",
        discussion: "Its open event streams close within a second.",
        examples: ["headway token revoke tok_4f2c"])
    static let id = Argument<String>("id", help: "The token's id (tok_…)")
    public static let arguments = [id.definition]

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func run(_ context: CommandContext) throws {
        let id = values[Self.id]
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;?#%")
        _ = try context.api.delete("/v1/tokens/" + (id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id))
        context.print("revoked \(id)")
    }
}
