import Foundation
import HeadwayTestSupport

/// The root of the package, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// What one run of an executable left behind.
struct ProcessResult {
    let status: Int32
    let output: String
    let errors: String
}

/// Runs the built executable `name` (`.build/debug/NAME`) with `arguments` to its end, with
/// only `environment` (and PATH), stdin from /dev/null; stops it after `timeout` seconds.
func runBuilt(_ name: String, _ arguments: [String], environment: [String: String] = [:],
              timeout: Double = 20) throws -> ProcessResult {
    let process = Process()
    process.executableURL = packageRoot.appendingPathComponent(".build/debug/\(name)")
    process.arguments = arguments
    process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { first, _ in first }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [process] in
        if process.isRunning { process.terminate() }
    }
    let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, output: output, errors: errors)
}

/// Runs the built `headway` command.
func headway(_ arguments: String..., environment: [String: String] = [:]) throws -> ProcessResult {
    try runBuilt("headway", arguments, environment: environment)
}

/// A live `headwayd` on 127.0.0.1 with a free port and a database in a temporary folder.
final class LiveDaemon {
    let directory = TemporaryDirectory()
    let process = Process()
    private(set) var port = 0
    var url: String { "http://127.0.0.1:\(port)" }
    private var logPath: String { directory.file("headwayd.log") }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Starts the daemon (after `prepare` has run with the database path, e.g. to make a
    /// token) and waits until it listens.
    init(prepare: (String) throws -> Void = { _ in }) throws {
        try prepare(directory.file("h.db"))
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = packageRoot.appendingPathComponent(".build/debug/headwayd")
        process.arguments = ["--listen", "127.0.0.1:0", "--db", directory.file("h.db")]
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

    /// Stops the daemon with SIGTERM, waits for it and removes its folder.
    func stop() {
        process.terminate()
        process.waitUntilExit()
        directory.remove()
    }
}

/// A loopback port where nothing listens (bound, then closed).
func unusedPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            _ = bind(fd, pointer, length)
            return getsockname(fd, pointer, &length)
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}
