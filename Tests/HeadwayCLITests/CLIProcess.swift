import Foundation
import HeadwayTestSupport

/// Runs the built executable `name` (`.build/debug/NAME`) with `arguments` to its end, with
/// only `environment` (and PATH), stdin from /dev/null; stops it after `timeout` seconds.
func runBuilt(_ name: String, _ arguments: [String], environment: [String: String] = [:],
              timeout: Double = 20) throws -> ProcessResult {
    try runToEnd(builtExecutable(name), arguments,
                 environment: environment.merging(["PATH": "/usr/bin:/bin"]) { first, _ in first }, timeout: timeout)
}

/// Runs the built `headway` command.
func headway(_ arguments: String..., environment: [String: String] = [:]) throws -> ProcessResult {
    try runBuilt("headway", arguments, environment: environment)
}

/// A live `headwayd` on 127.0.0.1 with a free port and a database in a temporary folder.
final class LiveDaemon {
    let directory = TemporaryDirectory()
    private let daemon: DaemonProcess
    var process: Process { daemon.process }
    var port: Int { daemon.port }
    var url: String { "http://127.0.0.1:\(port)" }
    var log: String { daemon.log }

    /// Starts the daemon with `arguments` besides its address and database (after
    /// `prepare` has run with the database path, e.g. to make a token) and waits until it listens.
    init(arguments: [String] = [], prepare: (String) throws -> Void = { _ in }) throws {
        try prepare(directory.file("h.db"))
        daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("h.db")] + arguments,
                                   logPath: directory.file("headwayd.log"))
    }

    /// Stops the daemon with SIGTERM, waits for it and removes its folder.
    func stop() {
        daemon.stop(SIGTERM)
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
