import CCurl
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A pseudo-terminal for one of the command's output streams (`headway run --pty`): the
/// command writes to `follower`, a terminal (`isatty` is true, TIOCGWINSZ answers), so a
/// tool that draws its progress only on a terminal draws it; `headway run` reads the same
/// bytes from `leader`. Output processing is off (no `\n` to `\r\n`): the bytes read are
/// the bytes written. It is not the command's controlling terminal: the command stays in
/// `headway run`'s session and process group, so Ctrl-C at the user's terminal reaches it
/// as without `--pty`.
struct PseudoTerminal {
    /// The side `headway run` reads (close-on-exec).
    let leader: Int32
    /// The side the command writes (close-on-exec; posix_spawn's dup2 gives the command
    /// its own copy).
    let follower: Int32

    /// Opens a pair with the window size `size`, or the reason it cannot.
    static func open(size: winsize) -> Result<PseudoTerminal, ChildProcessError> {
        var leader: Int32 = -1, follower: Int32 = -1
        guard headway_open_pseudo_terminal(&leader, &follower, size.ws_row, size.ws_col) == 0 else {
            return .failure(.unavailable("cannot open a pseudo-terminal: \(String(cString: strerror(errno)))"))
        }
        for fd in [leader, follower] { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var settings = termios()
        if tcgetattr(follower, &settings) == 0 {
            settings.c_oflag &= ~tcflag_t(OPOST)
            _ = tcsetattr(follower, TCSANOW, &settings)
        }
        return .success(PseudoTerminal(leader: leader, follower: follower))
    }

    /// The window size of `headway run`'s own terminal (the first of stdout, stderr and
    /// stdin that is one), or 80×24 when it has none.
    static var windowSize: winsize {
        terminalWindowSize() ?? winsize(ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0)
    }
}

/// The window size of the first of fds 1, 2 and 0 that is a terminal with a size; only
/// async-signal-safe calls (the SIGWINCH handler uses it).
private func terminalWindowSize() -> winsize? {
    for fd in [STDOUT_FILENO, STDERR_FILENO, STDIN_FILENO] {
        var size = winsize()
        if ioctl(fd, UInt(TIOCGWINSZ), &size) == 0 && size.ws_row > 0 && size.ws_col > 0 { return size }
    }
    return nil
}

/// The leaders whose window size follows `headway run`'s terminal, and the command told of
/// each change. Written once before the handler is installed, read only by it.
nonisolated(unsafe) private var resizedLeaders: (Int32, Int32) = (-1, -1)
nonisolated(unsafe) private var resizedCommand: pid_t = 0

/// On SIGWINCH (the user's terminal changed size): the same size for the command's
/// pseudo-terminals, then SIGWINCH to the command. The pseudo-terminals are no one's
/// controlling terminal, so the kernel signals nobody when their size changes; and the
/// SIGWINCH the command may have had from the user's terminal may have come before the
/// new size was set.
private func followResize(_ signal: Int32) {
    guard var size = terminalWindowSize() else { return }
    for leader in [resizedLeaders.0, resizedLeaders.1] where leader >= 0 { _ = ioctl(leader, UInt(TIOCSWINSZ), &size) }
    if resizedCommand > 0 { kill(resizedCommand, SIGWINCH) }
}

extension ChildProcess {
    /// From now on a change of `headway run`'s terminal size reaches the command's
    /// pseudo-terminals and the command (SIGWINCH). Call before other threads start, as
    /// they inherit the signal mask.
    func followTerminalResizes() {
        resizedLeaders = (outputFD, errorFD)
        resizedCommand = pid
        var action = sigaction()
        action.__sigaction_handler.sa_handler = followResize
        action.sa_flags = SA_RESTART
        sigemptyset(&action.sa_mask)
        sigaction(SIGWINCH, &action, nil)
        var resize = sigset_t()
        sigemptyset(&resize)
        sigaddset(&resize, SIGWINCH)
        pthread_sigmask(SIG_UNBLOCK, &resize, nil)
    }
}
