import Foundation
import Lifecycle
import Synchronization
import HeadwayCore
import HeadwayStore

/// Severity of a log line.
public enum LogLevel: Int, Sendable, Comparable {
    case debug, info, warn, error

    package init?(name: String) {
        switch name.lowercased() {
        case "debug": self = .debug
        case "info": self = .info
        case "warn", "warning": self = .warn
        case "error": self = .error
        default: return nil
        }
    }

    package var name: String { ["debug", "info", "warn", "error"][rawValue] }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Writes one logfmt line per event to stderr or a log file: `ts=… level=… event=http.request
/// key=value …`. Token secrets never reach a line (`Redaction`).
/// Lines are gathered and written every 50 ms by the `flusher` service (one `write(2)` for
/// many requests), and at once when 64 KiB wait; warnings and errors are written at once,
/// and `flush()` writes what is pending. Lines never interleave.
/// Copies share their output and their minimum level: `setMinimumLevel` and `reopen` (SIGHUP)
/// act on every copy.
public struct Logger: Sendable {
    private let output: LogOutput

    /// A logger writing to stderr, or to `sink` (for tests; then every line goes at once).
    public init(minimumLevel: LogLevel = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.output = LogOutput(minimumLevel: minimumLevel, sink: sink, file: nil)
    }

    /// A logger appending to the file at `path` (created with mode 0640 if missing), or to
    /// stderr when `path` is nil; throws `LogFileError` if the file cannot be opened.
    public init(minimumLevel: LogLevel, filePath path: String?) throws(LogFileError) {
        let file = try path.map { path throws(LogFileError) in try LogFile(path: path) }
        self.output = LogOutput(minimumLevel: minimumLevel, sink: nil, file: file)
    }

    /// The least severe level written.
    public var minimumLevel: LogLevel { output.minimumLevel }

    /// Writes lines of `level` and above from now on, in every copy of this logger.
    public func setMinimumLevel(_ level: LogLevel) { output.setMinimumLevel(level) }

    /// The log file, if logs go to one.
    public var filePath: String? { output.filePath }

    /// Closes the log file and opens it again at the same path, as log rotation expects
    /// (after the file was moved away, lines go to a new one); the lines waiting are written
    /// to the old file first. If the file cannot be opened, lines keep going to the old one
    /// and `LogFileError` says why. Without a log file, does nothing.
    public func reopen() throws(LogFileError) { try output.reopen() }

    /// Writes the lines still waiting.
    public func flush() { output.flush() }

    /// The service that writes waiting lines every 50 ms, and the last ones when it stops
    /// (the daemon stops it last).
    public var flusher: any Service { LogFlusher(output: output) }

    /// Logs `event` with `fields` (written in the order given).
    public func log(_ level: LogLevel, _ event: String, _ fields: KeyValuePairs<String, String> = [:]) {
        log(level, event, fields, threshold: output.minimumLevel)
    }

    /// Logs `event` if `level` reaches `threshold` rather than the minimum level (a line
    /// about a change of the minimum level is written if either level shows it).
    package func log<Fields: Sequence<(key: String, value: String)>>(_ level: LogLevel, _ event: String, _ fields: Fields,
                                                                     threshold: LogLevel) {
        guard level >= threshold else { return }
        var line: [UInt8] = []
        line.reserveCapacity(256)
        func put(_ text: String) {
            var text = text
            text.withUTF8 { line.append(contentsOf: $0) }
        }
        // `ts=<time> level=<level> event=` written in one piece.
        let levelText: StaticString = switch level {
        case .debug: " level=debug event="
        case .info: " level=info event="
        case .warn: " level=warn event="
        case .error: " level=error event="
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 3 + Timestamp.length + levelText.utf8CodeUnitCount) { head in
            head[0] = UInt8(ascii: "t")
            head[1] = UInt8(ascii: "s")
            head[2] = UInt8(ascii: "=")
            Timestamp.write(SystemClock().now(), into: UnsafeMutableBufferPointer(rebasing: head[3...]))
            levelText.withUTF8Buffer { text in
                _ = UnsafeMutableBufferPointer(rebasing: head[(3 + Timestamp.length)...]).initialize(fromContentsOf: text)
            }
            line.append(contentsOf: head)
        }
        put(event)
        for (key, value) in fields {
            line.append(UInt8(ascii: " "))
            put(key)
            line.append(UInt8(ascii: "="))
            if !Self.appendPlain(value, to: &line) { put(Self.quoted(Redaction.redact(value))) }
        }
        line.append(UInt8(ascii: "\n"))
        output.append(line, immediately: level >= .warn)
    }

    /// Appends `value` as it is and returns true when neither quoting nor redaction would
    /// change it (the common case of an access log line's values): printable ASCII without
    /// a quote or `=`, so no `access_token=`, and without the bytes a secret begins with.
    private static func appendPlain(_ value: String, to line: inout [UInt8]) -> Bool {
        var value = value
        let secretStart = Redaction.secretStart  // read once: a global is checked for initialization at each read
        return value.withUTF8 { utf8 in
            guard !utf8.isEmpty else { return false }
            var previous: (UInt8, UInt8) = (0, 0)
            for byte in utf8 {
                if byte <= 0x20 || byte >= 0x7f || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "=") { return false }
                if byte == secretStart.2 && previous == (secretStart.0, secretStart.1) { return false }
                previous = (previous.1, byte)
            }
            line.append(contentsOf: utf8)
            return true
        }
    }

    /// `value` as it is when plain, else quoted with every control character escaped: a
    /// value from a client (a percent-decoded path) can neither start a line of its own nor
    /// send escape sequences to the terminal that shows the log.
    private static func quoted(_ value: String) -> String {
        var value = value
        let plain = !value.isEmpty && value.withUTF8 { utf8 in
            !utf8.contains { $0 <= 0x20 || $0 >= 0x7f || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "=") }
        }
        if plain { return value }
        var escaped = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            case _ where scalar.properties.generalCategory == .control:
                // C0, DEL and C1 (which some terminals read as the start of a sequence).
                let hex = String(scalar.value, radix: 16)
                escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped + "\""
    }
}

/// Where log lines go: straight to a sink, or through a buffer to stderr or a log file; and
/// the minimum level, read by every line logged (an atomic: no lock on that path).
final class LogOutput: Sendable {
    private let level: Atomic<Int>
    private let sink: (@Sendable (String) -> Void)?
    private let pending = Locked<[UInt8]>([])
    /// Held from taking the pending lines to writing them, so lines keep their order: the
    /// log file written to (nil: stderr), replaced by `reopen` under the same lock.
    private let destination: Locked<LogFile?>

    init(minimumLevel: LogLevel, sink: (@Sendable (String) -> Void)?, file: LogFile?) {
        level = Atomic(minimumLevel.rawValue)
        self.sink = sink
        destination = Locked(file)
    }

    var minimumLevel: LogLevel { LogLevel(rawValue: level.load(ordering: .relaxed)) ?? .info }

    func setMinimumLevel(_ minimumLevel: LogLevel) { level.store(minimumLevel.rawValue, ordering: .relaxed) }

    var filePath: String? { destination.withLock { $0?.path } }

    func append(_ line: [UInt8], immediately: Bool) {
        if let sink { return sink(String(decoding: line, as: UTF8.self)) }
        let waiting = pending.withLock { pending in
            pending += line
            return pending.count
        }
        if immediately || waiting >= 64 * 1024 { flush() }
    }

    func flush() {
        destination.withLock { file in write(takePending(), to: file) }
    }

    func reopen() throws(LogFileError) {
        guard let path = filePath else { return }
        let reopened = try LogFile(path: path)
        destination.withLock { file in
            write(takePending(), to: file)
            file?.close()
            file = reopened
        }
    }

    private func takePending() -> [UInt8] {
        pending.withLock { pending in
            // The next lines go into a buffer as large, not one grown again from nothing.
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
    }

    /// Writes all of `bytes` to `file` (stderr if nil). A write that fails loses those lines:
    /// there is nowhere left to say so.
    private func write(_ bytes: [UInt8], to file: LogFile?) {
        let descriptor = file?.descriptor ?? STDERR_FILENO
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }
}

/// An open log file, created with mode 0640 if missing: every write goes to its end
/// (`O_APPEND`), even after the file was truncated (logrotate's `copytruncate`) or written
/// by another process. It is opened without blocking, so a FIFO with no reader at the path
/// is an error at once (`ENXIO`) rather than a wait that would hold up the thread that also
/// handles the signals; once open, writes block as usual.
struct LogFile: Sendable {
    let path: String
    let descriptor: Int32

    init(path: String) throws(LogFileError) {
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0o640)
        guard descriptor >= 0 else { throw LogFileError(path: path, reason: String(cString: strerror(errno))) }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        self.path = path
        self.descriptor = descriptor
    }

    func close() { _ = Glibc.close(descriptor) }
}

/// A log file that cannot be opened: its path and the system's reason.
public struct LogFileError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "cannot open the log file \(path): \(reason)" }
}

/// Writes a logger's waiting lines every 50 ms until stopped, then the last ones.
final class LogFlusher: Service {
    private let output: LogOutput
    private let stopping = Atomic(false)
    private let stopRequested = Doorbell()

    init(output: LogOutput) { self.output = output }

    func run() {
        while !stopping.load(ordering: .acquiring) {
            stopRequested.wait(until: .now() + .milliseconds(50))
            output.flush()
        }
    }

    func requestStop() {
        stopping.store(true, ordering: .releasing)
        stopRequested.ring()
    }
}

/// Keeps token secrets out of logs: the value of an `access_token=` query parameter, and
/// anything shaped like a secret (`hw_` and 43 base64url characters), become `[REDACTED]`.
/// The logger applies it to every value; the library's messages pass it too.
package enum Redaction {
    private static let parameter = Array("access_token=".utf8)
    private static let secretPrefix = Array(TokenSecret.prefix.utf8)
    /// The three bytes a token secret begins with (`hw_`).
    static let secretStart = (secretPrefix[0], secretPrefix[1], secretPrefix[2])
    static let marker = Array("[REDACTED]".utf8)

    /// `value` with every secret it may hold replaced.
    package static func redact(_ value: String) -> String {
        var value = value
        let suspicious = value.withUTF8 { utf8 in
            utf8.count >= 3 && (0..<utf8.count - 2).contains { index in
                (utf8[index] == UInt8(ascii: "a") || utf8[index] == UInt8(ascii: "h"))
                    && (utf8[index..<min(utf8.count, index + parameter.count)].elementsEqual(parameter)
                        || utf8[index..<index + 3].elementsEqual(secretPrefix))
            }
        }
        guard suspicious else { return value }
        let bytes = Array(value.utf8)
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index...].starts(with: parameter) {
                out += parameter + marker
                index += parameter.count
                while index < bytes.count, ![UInt8(ascii: "&"), UInt8(ascii: " "), UInt8(ascii: "\""), UInt8(ascii: "#"),
                                             UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t")].contains(bytes[index]) {
                    index += 1
                }
            } else if bytes[index...].starts(with: secretPrefix), bytes.count - index >= secretPrefix.count + TokenSecret.randomLength,
                      bytes[(index + secretPrefix.count)..<(index + secretPrefix.count + TokenSecret.randomLength)]
                        .allSatisfy({ Base64URL.value(of: $0) != nil }) {
                out += secretPrefix + marker
                index += secretPrefix.count + TokenSecret.randomLength
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
