import Foundation
import HeadwayService

// headwayd: parse the configuration, start, wait for SIGTERM or SIGINT, stop cleanly.
// Signals are blocked before any thread starts, so only `sigwait` below receives them.

var signals = sigset_t()
sigemptyset(&signals)
sigaddset(&signals, SIGTERM)
sigaddset(&signals, SIGINT)
pthread_sigmask(SIG_BLOCK, &signals, nil)

func fail(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("headwayd: \(message)\n".utf8))
    exit(code)
}

let configuration: Configuration
do {
    switch try Configuration.parse(arguments: Array(CommandLine.arguments.dropFirst()),
                                   environment: ProcessInfo.processInfo.environment) {
    case .help:
        FileHandle.standardOutput.write(Data(Configuration.usage.utf8))
        exit(0)
    case .run(let parsed):
        configuration = parsed
    }
} catch {
    fail("\(error)\nRun 'headwayd --help' for usage.", code: 64)
}

let application: HeadwayApplication
do {
    application = try buildApplication(configuration)
    try application.start()
} catch {
    fail("cannot start: \(error)", code: 1)
}

var received: Int32 = 0
sigwait(&signals, &received)
application.logger.log(.info, "signal.received", ["signal": received == SIGTERM ? "SIGTERM" : "SIGINT"])
application.shutdown()
exit(0)
