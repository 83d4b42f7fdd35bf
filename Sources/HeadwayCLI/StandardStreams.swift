#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes to stdout and stderr with write(2). FileHandle's `write` traps when the other
/// end is gone and SIGPIPE is ignored (as `headway run` must, to outlive a closed pipe
/// of its own): here such a write is dropped, and the command goes on.
public enum StandardStreams {
    /// Writes `text` on stdout.
    public static func output(_ text: String) { write(text, to: STDOUT_FILENO) }

    /// Writes `text` on stderr.
    public static func error(_ text: String) { write(text, to: STDERR_FILENO) }

    static func write(_ text: String, to fd: Int32) {
        var bytes = Array(text.utf8)
        var offset = 0
        bytes.withUnsafeMutableBytes { buffer in
            while offset < buffer.count {
                let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { return }
                offset += written
            }
        }
    }
}
