#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The width of the terminal in cells.
public enum TerminalWidth {
    /// The columns of the terminal on standard output (TIOCGWINSZ) when it is one, else
    /// `COLUMNS` from `environment` when it is a positive number, else 80.
    public static func current(environment: [String: String]) -> Int {
        if isatty(STDOUT_FILENO) == 1 {
            var size = winsize()
            if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        }
        return fallback(environment: environment)
    }

    /// `COLUMNS` when it is a positive number, else 80 (the part of `current` without I/O).
    public static func fallback(environment: [String: String]) -> Int {
        if let text = environment["COLUMNS"], let columns = Int(text), columns > 0 { return columns }
        return 80
    }
}
