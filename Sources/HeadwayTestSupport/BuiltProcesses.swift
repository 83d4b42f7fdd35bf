import Foundation

/// The root of the package, found from this file's path.
public let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The path of the built executable `name`: in `HEADWAY_BUILD_DIR` when set (a
/// sanitizer's build, `.build/tsan/debug`), else `.build/debug/NAME`.
public func builtExecutable(_ name: String) -> String {
    if let directory = ProcessInfo.processInfo.environment["HEADWAY_BUILD_DIR"] { return directory + "/" + name }
    return packageRoot.appendingPathComponent(".build/debug/\(name)").path
}

/// What one run of an executable left behind.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let output: String
    public let errors: String

    public init(status: Int32, output: String, errors: String) {
        self.status = status
        self.output = output
        self.errors = errors
    }
}

/// A process started with pipes on stdout and stderr.
public final class StartedProcess {
    public let process = Process()
    private let out = Pipe(), err = Pipe()

    /// Starts `path` with `arguments` and `environment` (nil: this process's), stdin from
    /// /dev/null; sends SIGTERM if it still runs after `timeout` seconds.
    public init(_ path: String, _ arguments: [String], environment: [String: String]?, timeout: Double = 20) throws {
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [process] in
            if process.isRunning { process.terminate() }
        }
    }

    /// Reads stdout and stderr to their ends and waits for the exit; the status and the bytes.
    public func finish() -> (status: Int32, output: [UInt8], errors: [UInt8]) {
        let output = [UInt8](out.fileHandleForReading.readDataToEndOfFile())
        let errors = [UInt8](err.fileHandleForReading.readDataToEndOfFile())
        process.waitUntilExit()
        return (process.terminationStatus, output, errors)
    }
}

/// Runs the executable at `path` with `arguments` to its end, with `environment` (nil:
/// this process's) and stdin from /dev/null; sends SIGTERM if it still runs after
/// `timeout` seconds.
public func runToEnd(_ path: String, _ arguments: [String], environment: [String: String]?,
                     timeout: Double = 20) throws -> ProcessResult {
    let (status, output, errors) = try StartedProcess(path, arguments, environment: environment, timeout: timeout).finish()
    return ProcessResult(status: status, output: String(decoding: output, as: UTF8.self),
                         errors: String(decoding: errors, as: UTF8.self))
}

/// The real `headwayd` executable as a separate process (`HEADWAYD`, else the debug build).
public final class DaemonProcess {
    public static let executable: String = ProcessInfo.processInfo.environment["HEADWAYD"] ?? builtExecutable("headwayd")

    public let process = Process()
    public let logPath: String
    public private(set) var port = 0

    /// Starts `headwayd` with `arguments` and waits (up to 20 s) until it listens.
    public init(_ arguments: [String], logPath: String) throws {
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = arguments
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        for _ in 0..<2000 {
            if let line = log.split(separator: "\n").first(where: { $0.contains("event=server.listening") }),
               let address = line.split(separator: " ").first(where: { $0.hasPrefix("address=") }),
               let port = Int(address.split(separator: ":").last ?? "") {
                self.port = port
                return
            }
            if !process.isRunning { throw TestHTTPError("headwayd exited: \(log)") }
            usleep(10_000)
        }
        process.terminate()
        throw TestHTTPError("headwayd did not start listening: \(log)")
    }

    /// What the daemon has logged so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits (up to 20 s) for the exit; returns the exit status.
    @discardableResult
    public func stop(_ signal: Int32) -> Int32? {
        if process.isRunning { kill(process.processIdentifier, signal) }
        for _ in 0..<2000 where process.isRunning { usleep(10_000) }
        guard !process.isRunning else { return nil }
        // Returns at once; without it Foundation never releases the Process (LeakSanitizer).
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Runs `headwayd` with `arguments` to its end (sending SIGTERM if it still runs after
    /// `timeout` seconds, as a daemon that should have refused to start would); returns
    /// status, stdout and stderr.
    public static func run(_ arguments: [String], environment: [String: String] = [:],
                           timeout: Double = 20) throws -> (Int32, String, String) {
        let result = try runToEnd(executable, arguments, environment: environment, timeout: timeout)
        return (result.status, result.output, result.errors)
    }
}

/// The command line that runs `path` with `arguments` under `umask` (`022`): through
/// `/bin/sh`, which sets it and execs the program in its own place (the same process).
public func underUmask(_ umask: String, _ path: String, _ arguments: [String]) -> (path: String, arguments: [String]) {
    ("/bin/sh", ["-c", "umask \(umask) && exec \"$0\" \"$@\"", path] + arguments)
}

/// The permission bits of what is at `path` itself (a symbolic link's own, not its
/// target's); nil when nothing is there.
public func fileMode(_ path: String) -> mode_t? {
    var status = stat()
    guard lstat(path, &status) == 0 else { return nil }
    return status.st_mode & 0o7777
}
