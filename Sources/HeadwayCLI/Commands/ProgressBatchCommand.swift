import Foundation
import HeadwayCore

/// `headway progress-batch FILE`: reports the progress of many tasks at once, from JSON
/// lines (one update a line), in batches of `POST /v1/progress`.
public struct ProgressBatchCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "progress-batch", abstract: "Report the progress of many tasks at once",
        discussion: """
        Reads one update a line: a JSON object with the task's "task_id" and the fields
        of a progress report ("completed" or "increment", "total", "unit", "label",
        "seq"); blank lines are skipped, and a line that is no JSON object (or too big
        for a request) stops everything before anything is sent. Sends the updates in
        order, in requests of at most --batch-size updates. Each update the server
        refuses is printed on stderr after its line number; exits 1 if any was, else 3
        if someone asked to cancel one of the tasks. If a request fails, says which
        lines were answered and which were not applied. With --json, prints each line's
        result ({"task_id":…,"status":200,"task":…} or
        {"task_id":…,"status":4xx,"problem":…}), one a line.
        """,
        examples: ["printf '%s\\n' '{\"task_id\":\"shard-01\",\"completed\":40}' | headway progress-batch"])
    static let file = Argument<String>("file", help: "The file of JSON lines (- for stdin)")
    static let batchSize = Option<Int64>("batch-size", valueName: "n",
                                         help: "Updates per request (default 1000, the server's --max-batch-items)")
    public static let arguments = [file.definition, batchSize.definition]

    /// A request's body stays under this many bytes (the server takes up to 1 MiB).
    static let bytesPerRequest = 1_000_000

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let size = values[Self.batchSize], !(1...10_000).contains(size) {
            throw UsageError("--batch-size must be from 1 to 10000, not \(size)")
        }
    }

    public func run(_ context: CommandContext) throws {
        let updates = try Self.updates(in: Array(try read(values[Self.file])))
        var refused = 0
        var canceled: [String] = []
        var answeredThrough: Int?
        for requestItems in Self.requests(updates, itemsPerRequest: Int(values[Self.batchSize] ?? 1_000)) {
            let results: [JSONValue]
            do {
                let reply = try context.api.post("/v1/progress", ["updates": .array(requestItems.map(\.update))])
                guard case .object(let body)? = reply.json, case .array(let answered)? = body["results"],
                      answered.count == requestItems.count else {
                    throw CLIError.unexpectedReply("the server's reply is not a batch's results")
                }
                results = answered
            } catch {
                StandardStreams.error(Self.unsentNote(error, request: requestItems, answeredThrough: answeredThrough))
                throw error
            }
            for (item, result) in zip(requestItems, results) {
                if context.options.json { context.print(result.canonicalText) }
                guard case .object(let fields) = result else { continue }
                if case .object(let problem)? = fields["problem"] {
                    refused += 1
                    StandardStreams.error(DisplayWidth.sanitize("headway: line \(item.line): \(Self.describe(problem))") + "\n")
                } else if case .object(let task)? = fields["task"], case .bool(true)? = task["cancel_requested"],
                          case .string(let id)? = task["id"], !canceled.contains(id) {
                    canceled.append(id)
                }
            }
            answeredThrough = requestItems.last?.line
        }
        if refused > 0 { throw CLIError.updatesRefused(refused: refused, sent: updates.count) }
        if !canceled.isEmpty { throw CLIError.cancelRequested(taskID: canceled.joined(separator: ", ")) }
    }

    /// What became of the lines when a request failed with `error`: those of the requests
    /// answered before it were applied or refused as printed; the failed request's were
    /// not applied if the server refused it whole (a problem document), and may or may
    /// not have been otherwise (no answer, or one a proxy gave); none after it was sent.
    /// (Said so that the file is not sent again whole, applying its increments twice.)
    static func unsentNote(_ error: any Error, request: [Line], answeredThrough: Int?) -> String {
        let first = request.first?.line ?? 0
        let last = request.last?.line ?? 0
        var note = "headway: "
        if let answeredThrough { note += "lines up to \(answeredThrough) were answered; " }
        switch error as? CLIError {
        case .refused?: note += "nothing from line \(first) on was applied\n"
        case .unavailable(_, _, _, let code)? where code != TaskAPI.noProblemCode:
            note += "nothing from line \(first) on was applied\n"
        default:
            note += "lines \(first) to \(last) may or may not have been applied (no answer said which)"
            note += "; nothing after line \(last) was sent\n"
        }
        return note
    }

    /// One update and the line it came from.
    struct Line: Equatable {
        let line: Int
        let update: JSONValue
    }

    /// The updates of `bytes`, one JSON object a line (lines end at LF, a CR before it is
    /// dropped; blank lines are skipped). A line that is no JSON object (or not UTF-8) is a
    /// usage error naming it, and so is one too big for a request of its own. Only LF ends
    /// a line: a JSON string may hold U+2028, U+2029 or U+0085 unescaped.
    static func updates(in bytes: [UInt8]) throws -> [Line] {
        var lines: [Line] = []
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r") }
        for (index, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            guard !line.allSatisfy(isBlank) else { continue }
            let text = line.last == UInt8(ascii: "\r") ? line.dropLast() : line
            guard let update = JSONValue.parse(text), case .object = update else {
                throw UsageError("line \(index + 1) is not a JSON object", commandPath: "headway progress-batch")
            }
            let size = update.canonicalText.utf8.count
            guard size < bytesPerRequest else {
                throw UsageError("line \(index + 1) is too big for a request (\(size) bytes; at most \(bytesPerRequest))",
                                 commandPath: "headway progress-batch")
            }
            lines.append(Line(line: index + 1, update: update))
        }
        return lines
    }

    /// The updates cut into requests of at most `itemsPerRequest` updates and about
    /// `bytesPerRequest` bytes, in order.
    static func requests(_ updates: [Line], itemsPerRequest: Int) -> [[Line]] {
        var requests: [[Line]] = []
        var current: [Line] = []
        var bytes = 0
        for update in updates {
            let size = update.update.canonicalText.utf8.count + 1
            if !current.isEmpty && (current.count == itemsPerRequest || bytes + size > bytesPerRequest) {
                requests.append(current)
                (current, bytes) = ([], 0)
            }
            current.append(update)
            bytes += size
        }
        if !current.isEmpty { requests.append(current) }
        return requests
    }

    /// A problem as `title: detail (code)`.
    static func describe(_ problem: JSONObject) -> String {
        let text = { (name: String) -> String in
            if case .string(let value)? = problem[name] { return value }
            return ""
        }
        return "\(text("title")): \(text("detail")) (\(text("code")))"
    }

    /// The bytes of `path`, or of stdin for `-`.
    private func read(_ path: String) throws -> Data {
        let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path)
        guard let data else { throw UsageError("cannot read '\(path)'", commandPath: "headway progress-batch") }
        return data
    }
}
