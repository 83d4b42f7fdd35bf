import Foundation
import HeadwayService

// headwayd: parse the configuration, start, wait for SIGTERM or SIGINT, stop cleanly.
// Signals are blocked before any thread starts, so only `sigwait` below receives them.
// A second signal during a slow stop ends the process at once. SIGHUP reloads the TLS
// certificate and key, at any time before the stop.

var signals = sigset_t()
sigemptyset(&signals)
sigaddset(&signals, SIGTERM)
sigaddset(&signals, SIGINT)
sigaddset(&signals, SIGHUP)
pthread_sigmask(SIG_BLOCK, &signals, nil)

func fail(_ message: String, code: Int32) -> Never {
    FileHandle.standardError.write(Data("headwayd: \(message)\n".utf8))
    exit(code)
}

// `headwayd token create …`: make a token offline, print its secret, exit.
if CommandLine.arguments.dropFirst().first == "token" {
    do {
        switch try TokenCommand.parse(Array(CommandLine.arguments.dropFirst(2))) {
        case .help:
            FileHandle.standardOutput.write(Data(TokenCommand.usage.utf8))
            exit(0)
        case .create(let request, let expiresIn, let databasePath):
            let secret: String
            do {
                secret = try TokenCommand.create(request, expiresInSeconds: expiresIn, databasePath: databasePath)
            } catch {
                fail("cannot create the token: \(error)", code: 1)
            }
            FileHandle.standardOutput.write(Data((secret + "\n").utf8))
            exit(0)
        }
    } catch {
        fail("\(error)\nRun 'headwayd token --help' for usage.", code: 64)
    }
}

var configuration: Configuration
do {
    switch try Configuration.parse(arguments: Array(CommandLine.arguments.dropFirst()),
                                   environment: ProcessInfo.processInfo.environment) {
    case .help:
        FileHandle.standardOutput.write(Data(Configuration.usage.utf8))
        exit(0)
    case .version:
        FileHandle.standardOutput.write(Data("headwayd \(HeadwayVersion.current)\n".utf8))
        exit(0)
    case .run(let parsed):
        configuration = parsed
    }
} catch {
    fail("\(error)\nRun 'headwayd --help' for usage.", code: 64)
}

let logger = Logger(minimumLevel: configuration.logLevel)
let application: HeadwayApplication
do {
    try configuration.adoptInheritedSocket(environment: ProcessInfo.processInfo.environment)
    application = try buildApplication(configuration, logger: logger)
    try application.start()
} catch {
    logger.flush()
    fail("cannot start: \(error)", code: 1)
}

func signalName(_ signal: Int32) -> String {
    switch signal {
    case SIGTERM: "SIGTERM"
    case SIGHUP: "SIGHUP"
    default: "SIGINT"
    }
}

var received: Int32 = 0
sigwait(&signals, &received)
while received == SIGHUP {
    logger.log(.info, "signal.received", ["signal": signalName(received), "action": "reload the TLS certificate"])
    application.reloadCertificate()
    sigwait(&signals, &received)
}
logger.log(.info, "signal.received", ["signal": signalName(received)])
Thread.detachNewThread {
    application.shutdown()
    exit(0)
}
// During the stop a SIGHUP changes nothing.
repeat { sigwait(&signals, &received) } while received == SIGHUP
logger.log(.warn, "signal.received", ["signal": signalName(received), "action": "stopping at once"])
// Without exit handlers, which would run under the feet of the stop under way. Committed
// changes are safe: SQLite recovers its write-ahead log as after any crash.
_exit(128 + received)
