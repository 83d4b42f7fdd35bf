#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The size of the terminal on standard output, in cells.
public enum TerminalSize {
    /// The columns of the terminal on standard output (TIOCGWINSZ) when it is one, else
    /// `COLUMNS` from `environment` when it is a positive number, else 80.
    public static func columns(environment: [String: String]) -> Int {
        if let size = windowSize(), size.ws_col > 0 { return Int(size.ws_col) }
        return fallbackColumns(environment: environment)
    }

    /// The rows of the terminal on standard output when it is one, else `LINES` from
    /// `environment` when it is a positive number, else 24.
    public static func rows(environment: [String: String]) -> Int {
        if let size = windowSize(), size.ws_row > 0 { return Int(size.ws_row) }
        return positive(environment["LINES"]) ?? 24
    }

    /// `COLUMNS` when it is a positive number, else 80 (the part of `columns` without I/O).
    public static func fallbackColumns(environment: [String: String]) -> Int {
        positive(environment["COLUMNS"]) ?? 80
    }

    private static func windowSize() -> winsize? {
        guard isatty(STDOUT_FILENO) == 1 else { return nil }
        var size = winsize()
        return ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0 ? size : nil
    }

    private static func positive(_ text: String?) -> Int? {
        guard let text, let number = Int(text), number > 0 else { return nil }
        return number
    }
}
