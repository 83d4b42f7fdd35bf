import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How a child process ended.
public enum ChildOutcome: Equatable, Sendable {
    case exited(Int32)
    case signaled(Int32)

    /// The status `headway run` exits with: the child's, or 128+n when signal n killed it.
    public var exitStatus: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }

    /// The outcome in words for the task's last message.
    public var description: String {
        switch self {
        case .exited(let code): "exited with status \(code)"
        case .signaled(let signal): "was killed by signal \(signal) (\(Self.signalName(signal)))"
        }
    }

    static func signalName(_ signal: Int32) -> String {
        switch signal {
        case SIGHUP: "SIGHUP"
        case SIGINT: "SIGINT"
        case SIGQUIT: "SIGQUIT"
        case SIGABRT: "SIGABRT"
        case SIGKILL: "SIGKILL"
        case SIGSEGV: "SIGSEGV"
        case SIGPIPE: "SIGPIPE"
        case SIGTERM: "SIGTERM"
        default: "signal \(signal)"
        }
    }
}

/// The child whose pid the signal handler forwards signals to (0: none yet).
/// Written once before the handlers are installed, read only by them.
nonisolated(unsafe) private var forwardingTarget: pid_t = 0

/// Sends a signal received by this process (SIGINT, SIGTERM, SIGHUP, SIGQUIT) on to the
/// child (kill is async-signal-safe) when another process sent it. One the kernel raised — Ctrl-C at
/// the terminal, which signals the whole foreground process group — has reached the
/// child already: sending it again would make one Ctrl-C count twice.
private func forwardSignal(_ signal: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?) {
    let sentByAProcess = info.map { $0.pointee.si_code <= 0 } ?? true   // SI_USER, SI_QUEUE, SI_TKILL
    if forwardingTarget > 0 && sentByAProcess { kill(forwardingTarget, signal) }
}

/// Why a command could not start: the status to exit with (printed already), or a
/// resource this process lacks.
enum ChildProcessError: Error {
    case commandExit(Int32)
    case unavailable(String)
}

/// A command started with posix_spawn: stdin inherited, stdout and stderr through pipes
/// (or pseudo-terminals, one each) that this process reads. posix_spawn rather than Foundation.Process: Process reads
/// pipes on its own threads through FileHandle and installs its own SIGCHLD handling,
/// while here the exact bytes, their order per stream, the signal dispositions the child
/// starts with (default SIGINT, SIGTERM, SIGPIPE) and the wait status must be ours.
final class ChildProcess {
    let pid: pid_t
    /// The read ends of the child's stdout and stderr pipes (or pseudo-terminals).
    let outputFD: Int32
    let errorFD: Int32

    /// Starts `arguments` (the first is looked up in PATH) with `environment` (`NAME=value`
    /// entries) or throws the reason it cannot. With `terminalSize`, the child's stdout
    /// and stderr are each a pseudo-terminal of that window size instead of a pipe.
    init(arguments: [String], environment: [[UInt8]], terminalSize: winsize? = nil) throws(ChildProcessError) {
        var outPipe: [Int32] = [0, 0], errPipe: [Int32] = [0, 0]
        if let terminalSize {
            // [read end, write end], as a pipe's.
            let output = try PseudoTerminal.open(size: terminalSize).get()
            let errors: PseudoTerminal
            do throws(ChildProcessError) { errors = try PseudoTerminal.open(size: terminalSize).get() } catch {
                close(output.leader)
                close(output.follower)
                throw error
            }
            outPipe = [output.leader, output.follower]
            errPipe = [errors.leader, errors.follower]
        } else {
            guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
                throw .unavailable("cannot make pipes: \(String(cString: strerror(errno)))")
            }
        }
        // Not inherited by the child (dup2 gives it its own 1 and 2) nor by its children.
        for fd in outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var noMask = sigset_t()
        sigemptyset(&noMask)
        posix_spawnattr_setsigmask(&attributes, &noMask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var argv = cStrings + [nil]
        let environmentStrings = environment.map { entry in
            let copy = UnsafeMutablePointer<CChar>.allocate(capacity: entry.count + 1)
            for (index, byte) in entry.enumerated() { copy[index] = CChar(bitPattern: byte) }
            copy[entry.count] = 0
            return copy
        }
        defer { environmentStrings.forEach { $0.deallocate() } }
        var envp: [UnsafeMutablePointer<CChar>?] = environmentStrings + [nil]
        var child: pid_t = 0
        // PATH is looked up in this process's environment, as the child's is not in force yet.
        let status = posix_spawnp(&child, arguments[0], &actions, &attributes, &argv, &envp)
        close(outPipe[1])
        close(errPipe[1])
        guard status == 0 else {
            close(outPipe[0])
            close(errPipe[0])
            // As a shell says it: 127 when the command is not found, 126 when it cannot run.
            StandardStreams.error("headway: cannot run '\(DisplayWidth.sanitize(arguments[0]))': \(String(cString: strerror(status)))\n")
            throw .commandExit(status == ENOENT ? 127 : 126)
        }
        pid = child
        outputFD = outPipe[0]
        errorFD = errPipe[0]
    }

    /// This process's environment, `NAME=value` entries as their bytes are.
    static var currentEnvironment: [[UInt8]] {
        var entries: [[UInt8]] = []
        var next = environ
        while let entry = next.pointee {
            entries.append(Array(UnsafeRawBufferPointer(start: entry, count: strlen(entry))))
            next += 1
        }
        return entries
    }

    /// From now on the `forwardedSignals` sent to `headway run` go to the child (unblocked
    /// here: a parent may have started us with them blocked); SIGPIPE is ignored (a closed
    /// stdout of ours must not kill us before the child ends). Call before other threads
    /// start, as they inherit the signal mask.
    func forwardSignals() {
        forwardingTarget = pid
        var action = sigaction()
        action.__sigaction_handler.sa_sigaction = forwardSignal
        action.sa_flags = SA_SIGINFO | SA_RESTART
        sigemptyset(&action.sa_mask)
        var forwarded = sigset_t()
        sigemptyset(&forwarded)
        for signal in Self.forwardedSignals {
            sigaction(signal, &action, nil)
            sigaddset(&forwarded, signal)
        }
        signal(SIGPIPE, SIG_IGN)
        pthread_sigmask(SIG_UNBLOCK, &forwarded, nil)
    }

    /// The signals `headway run` passes on instead of dying of them, so that the task
    /// is finished with the command's outcome: interrupt, terminate, a hang-up (the
    /// terminal closed) and quit (Ctrl-\\).
    static let forwardedSignals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]

    /// Sends `signal` to the child.
    func send(_ signal: Int32) { kill(pid, signal) }

    /// The child's outcome if it has ended (without blocking), else nil.
    func poll() -> ChildOutcome? {
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        guard result == pid else { return nil }
        return Self.outcome(status)
    }

    /// Waits for the child to end.
    func wait() -> ChildOutcome {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return Self.outcome(status)
    }

    static func outcome(_ status: Int32) -> ChildOutcome {
        let signal = status & 0x7F
        return signal == 0 ? .exited((status >> 8) & 0xFF) : .signaled(signal)
    }
}
