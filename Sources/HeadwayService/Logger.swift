import Foundation
import HeadwayCore

/// Severity of a log line.
public enum LogLevel: Int, Sendable, Comparable {
    case debug, info, warn, error

    init?(name: String) {
        switch name.lowercased() {
        case "debug": self = .debug
        case "info": self = .info
        case "warn", "warning": self = .warn
        case "error": self = .error
        default: return nil
        }
    }

    var name: String { ["debug", "info", "warn", "error"][rawValue] }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Writes one logfmt line per event to stderr: `ts=… level=… event=http.request key=value …`.
/// Each line is one `write(2)`, so lines from different threads never interleave.
public struct Logger: Sendable {
    public var minimumLevel: LogLevel
    private let write: @Sendable (String) -> Void

    /// A logger writing to stderr, or to `sink` (for tests).
    public init(minimumLevel: LogLevel = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.minimumLevel = minimumLevel
        self.write = sink ?? { line in FileHandle.standardError.write(Data(line.utf8)) }
    }

    /// Logs `event` with `fields` (written in the order given).
    public func log(_ level: LogLevel, _ event: String, _ fields: KeyValuePairs<String, String> = [:]) {
        guard level >= minimumLevel else { return }
        var line = "ts=\(Timestamp.rfc3339(SystemClock().now())) level=\(level.name) event=\(event)"
        for (key, value) in fields { line += " \(key)=\(Self.quoted(value))" }
        write(line + "\n")
    }

    private static func quoted(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7f && $0 != "\"" && $0 != "=" }
        if plain { return value }
        var escaped = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped + "\""
    }
}
