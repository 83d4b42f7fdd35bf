import CCurl
import Foundation
import HeadwayClient
import Lifecycle
import HeadwayCore
#if canImport(Glibc)
import Glibc
#endif

/// `headway run -- CMD [ARGS…]`: runs a command as a task. Its output passes through
/// byte for byte; its latest line becomes the task's label and its progress (`N/M`,
/// `NN%` or `--progress-pattern`) the task's; it finishes with the command's outcome, and
/// a cancel of the task stops the command. The server being away never stops the command.
public struct RunCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Run a command and report it as a task",
        discussion: """
        Output passes through untouched; its latest line is the task's label, and its lines
        go to the task's output tail (at most one report a second). Progress is read from
        lines showing N/M or NN% (or --progress-pattern, with the named groups completed
        and total; without total, completed is a percent), following the form shown last:
        a percent is a share of the work, never a count. A command that cannot show its
        progress on its output appends lines like '12/40 label' or '37%' to the file
        HEADWAY_PROGRESS_FILE names. With --pty the command's stdout and stderr are each
        a pseudo-terminal (of this terminal's size and following it, else 80x24), for tools
        that draw their progress only on a terminal; stdin stays this one's, and the bytes
        pass through unchanged. SIGINT and SIGTERM
        go to the command. When the task is canceled, the command gets SIGTERM, then
        SIGKILL after --kill-after seconds (the command itself: one that starts jobs in
        the background passes the signal on). Exits with the command's status (128+n when
        signal n killed it; 127 when it is not found, 126 when it cannot run). An
        unreachable server is a warning, retried: the command runs anyway. The command's
        environment holds no token: no HEADWAY_TOKEN, and HEADWAY_URL without a
        user:password@ part; with --pass-token it gets HEADWAY_TOKEN and HEADWAY_URL as
        this run uses them (from --token and --server too), for headway commands inside it.
        """,
        usage: "[--name <name>] [--id <id>] [--parent <id>] [--progress-pattern <regex>] [--kill-after <seconds>] "
            + "[--pass-token] [--pty] -- <command> [<argument>...]",
        examples: ["headway run --name \"Resize photos\" -- ./resize.sh photos/",
                   "# a tool that draws its progress only on a terminal:", "headway run --pty -- pip install -r requirements.txt",
                   "# a command that cannot print its progress writes it to a file:", "headway run -- sh -c 'echo \"12/40 resizing\" >> \"$HEADWAY_PROGRESS_FILE\"; …'"])
    static let command = Argument<String>("command", help: "The command to run, after --, then its arguments")
    static let name = Option<String>("name", valueName: "name", help: "What the task does (default: the command line)")
    static let id = Option<String>("id", valueName: "id", help: "The task's id (default: chosen by the server)")
    static let parent = Option<String>("parent", valueName: "id", help: "Register it as a child of this task")
    static let progressPattern = Option<String>("progress-pattern", valueName: "regex",
                                                help: "Reads progress with the named groups completed and total (or a percent)")
    static let killAfter = Option<Double>("kill-after", valueName: "seconds",
                                          help: "After a cancel, SIGKILL this long after SIGTERM (default 10)")
    static let passToken = Flag("pass-token", help: "Give the command the token and server (HEADWAY_TOKEN, HEADWAY_URL)")
    static let pty = Flag("pty", help: "Give the command a pseudo-terminal for stdout and stderr")
    public static let arguments = [command.definition, name.definition, id.definition, parent.definition,
                                   progressPattern.definition, killAfter.definition, passToken.definition, pty.definition]
    public static var takesTrailingArguments: Bool { true }

    let values: ParsedValues
    public init(_ values: ParsedValues) { self.values = values }

    public func validate() throws {
        if let pattern = values[Self.progressPattern] { _ = try ProgressRecognizer.compile(pattern) }
        if let seconds = values[Self.killAfter], seconds < 0 { throw UsageError("--kill-after must not be negative") }
    }

    /// The command line: the command and its arguments.
    var commandLine: [String] { [values[Self.command]] + values.trailing }

    public func run(_ context: CommandContext) throws {
        let api = TaskAPI(client: HeadwayClient(baseURL: context.options.serverURL, token: context.options.token,
                                                connectTimeoutSeconds: 3, totalTimeoutSeconds: 10))
        if !values[Self.passToken] {
            // The command runs as this user, so it could read this process's environment
            // (HEADWAY_TOKEN) and memory from /proc; a process that is not dumpable keeps
            // them to itself (and to root).
            _ = headway_forbid_inspection()
        }
        // A shortened parent id is resolved if the server answers; the command runs
        // whether it does or not.
        let parent = values[Self.parent].map { text in (try? api.resolveIfShortened(text)) ?? text }
        let progressFile = ProgressFile(environment: ProcessInfo.processInfo.environment)
        defer { progressFile?.remove() }
        let child: ChildProcess
        do {
            var environment = Self.childEnvironment(ChildProcess.currentEnvironment, passToken: values[Self.passToken],
                                                    token: context.options.token, server: context.options.serverURL)
            if let progressFile {
                let name = Array("HEADWAY_PROGRESS_FILE=".utf8)
                environment = environment.filter { !$0.starts(with: name) } + [name + Array(progressFile.path.utf8)]
            }
            child = try ChildProcess(arguments: commandLine, environment: environment,
                                     terminalSize: values[Self.pty] ? PseudoTerminal.windowSize : nil)
        } catch {
            switch error {
            case .commandExit(let status): throw CommandExit(status: status)
            case .unavailable(let reason): throw CLIError.unexpectedReply(reason)
            }
        }
        child.forwardSignals()
        if values[Self.pty] { child.followTerminalResizes() }
        let stopper = ChildStopper(child: child, killAfter: values[Self.killAfter] ?? 10)
        let finalAPI = TaskAPI(client: HeadwayClient(baseURL: context.options.serverURL, token: context.options.token,
                                                     connectTimeoutSeconds: 2, totalTimeoutSeconds: 5))
        let reporter = RunReporter(api: api, finalAPI: finalAPI, registration: registration(parent: parent), onCancel: { stopper.stop() })
        reporter.start()
        let outcome = pass(child, to: reporter, progressFile: progressFile)
        stopper.reaped()
        if stopper.wasStopped {
            reporter.finish(outcome: "canceled", message: "canceled: the command \(outcome.description)")
        } else if outcome == .exited(0) {
            reporter.finish(outcome: "succeeded", message: nil)
        } else {
            reporter.finish(outcome: "failed", message: "the command \(outcome.description)")
        }
        throw CommandExit(status: outcome.exitStatus)
    }

    /// The environment the command starts with: this process's (`entries`, `NAME=value`
    /// each, bytes as they are), without the means to act as this run: no `HEADWAY_TOKEN`,
    /// and `HEADWAY_URL` without its `user:password@`. The command may be anyone's script,
    /// which prints or passes on its environment. With `--pass-token`, `HEADWAY_TOKEN` and
    /// `HEADWAY_URL` are `token` and `server`, those this run reports with.
    static func childEnvironment(_ entries: [[UInt8]], passToken: Bool, token: String?, server: String) -> [[UInt8]] {
        let tokenName = Array("HEADWAY_TOKEN=".utf8), urlName = Array("HEADWAY_URL=".utf8)
        var environment = entries.filter { !$0.starts(with: tokenName) && !(passToken && $0.starts(with: urlName)) }
        if passToken {
            if let token { environment.append(tokenName + Array(token.utf8)) }
            environment.append(urlName + Array(server.utf8))
            return environment
        }
        return environment.map { entry in
            entry.starts(with: urlName) ? urlName + withoutUserinfo(Array(entry.dropFirst(urlName.count))) : entry
        }
    }

    /// `url` without the `user:password@` of its authority (the part after `scheme://`, or
    /// from the start without one, up to the first `/`, `?` or `#`).
    static func withoutUserinfo(_ url: [UInt8]) -> [UInt8] {
        let start = url.firstRange(of: Array("://".utf8))?.upperBound ?? url.startIndex
        let end = url[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? url.endIndex
        guard let at = url[start..<end].lastIndex(of: UInt8(ascii: "@")) else { return url }
        return Array(url[..<start] + url[(at + 1)...])
    }

    /// The registration body: the name (the command line unless --name), id and parent.
    func registration(parent: String?) -> JSONObject {
        let name = values[Self.name] ?? LineSplitter.label(commandLine.joined(separator: " "), limit: 200) ?? "command"
        var body: JSONObject = ["name": .string(name)]
        if let id = values[Self.id] { body["id"] = .string(id) }
        if let parent { body["parent_id"] = .string(parent) }
        return body
    }

    /// Copies the child's stdout and stderr to ours as the bytes come, and shows each
    /// line to the reporter; returns the child's outcome once it has ended and its pipes
    /// are drained (a grandchild keeping a pipe open does not hold `run` up).
    func pass(_ child: ChildProcess, to reporter: RunReporter, progressFile: ProgressFile?) -> ChildOutcome {
        var recognizer = ProgressRecognizer(pattern: values[Self.progressPattern].flatMap { try? ProgressRecognizer.compile($0) })
        var splitters = [LineSplitter(), LineSplitter()]
        var outputs = [OutputLines(), OutputLines()]
        var fds = [pollfd(fd: child.outputFD, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: child.errorFD, events: Int16(POLLIN), revents: 0)]
        let targets: [Int32] = [1, 2]
        var buffer = [UInt8](repeating: 0, count: 65536)
        var outcome: ChildOutcome?

        /// The latest label and reading of `lines`: the last non-blank line, and the last
        /// forward reading.
        func observe(_ lines: [String]) {
            let label = lines.reversed().lazy.compactMap { LineSplitter.label($0) }.first
            let reading = lines.compactMap { recognizer.read($0) }.last
            if reading != nil || label != nil { reporter.observe(label: label, reading: reading) }
        }
        /// The progress file's new last line, read as the command's latest progress.
        func lookAtProgressFile() {
            guard let line = progressFile?.changedLine(), let (reading, label) = ProgressRecognizer.progressFileLine(line)
            else { return }
            let followed = recognizer.follow(reading)
            if followed != nil || label != nil { reporter.observe(label: label, reading: followed) }
        }
        while fds.contains(where: { $0.fd >= 0 }) {
            lookAtProgressFile()
            let ready = poll(&fds, nfds_t(fds.count), outcome == nil ? 250 : 0)
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 {
                if outcome != nil { break }
                outcome = child.poll()
                continue
            }
            for index in fds.indices where fds[index].fd >= 0 && fds[index].revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(fds[index].fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else {
                    close(fds[index].fd)
                    fds[index].fd = -1
                    if let last = splitters[index].finish() { observe([last]) }
                    if let last = outputs[index].finish() { reporter.observe(output: [last]) }
                    continue
                }
                let delivered = buffer.withUnsafeBytes { bytes in
                    let chunk = UnsafeRawBufferPointer(rebasing: bytes[0..<count])
                    observe(splitters[index].lines(in: chunk) + [splitters[index].settledOpenLine].compactMap { $0 })
                    reporter.observe(output: outputs[index].lines(in: chunk))
                    return writeAll(targets[index], chunk)
                }
                if !delivered {
                    // Our reader is gone (`headway run -- yes | head -1`): so is the
                    // child's, which gets EPIPE (or SIGPIPE) on its next write, as it
                    // would have without us.
                    close(fds[index].fd)
                    fds[index].fd = -1
                }
            }
            if outcome == nil { outcome = child.poll() }
        }
        for descriptor in fds where descriptor.fd >= 0 { close(descriptor.fd) }
        let ended = outcome ?? child.wait()
        lookAtProgressFile()
        return ended
    }

    /// Writes all of `bytes` to `fd`, waiting while a non-blocking one is full; false when
    /// it cannot take them (its reader is gone).
    func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    var writable = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&writable, 1, -1)
                    continue
                }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Stops the child when the task is canceled: SIGTERM now, SIGKILL after `killAfter`
/// seconds unless it has been reaped by then (its pid could belong to another process).
final class ChildStopper: Sendable {
    private struct State {
        var stopped = false
        var isReaped = false
    }

    private let pid: pid_t
    private let killAfter: Double
    /// Shared by the reporter's thread (a cancel), a Dispatch worker (the SIGKILL) and the
    /// command's thread (the reap): a signal never goes to a pid already reaped.
    private let state = Locked(State())

    init(child: ChildProcess, killAfter: Double) {
        pid = child.pid
        self.killAfter = killAfter
    }

    /// Whether a cancel stopped the child.
    var wasStopped: Bool { state.withLock { $0.stopped } }

    /// Sends SIGTERM, and schedules SIGKILL.
    func stop() {
        state.withLock { state in
            guard !state.stopped, !state.isReaped else { return }
            state.stopped = true
            kill(pid, SIGTERM)
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + killAfter) { [self] in
            state.withLock { state in if !state.isReaped { kill(pid, SIGKILL) } }
        }
    }

    /// Notes that the child has been waited for: no signal may go to its pid any more.
    func reaped() { state.withLock { $0.isReaped = true } }
}
