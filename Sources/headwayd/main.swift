import Foundation
import Daemon
import HeadwayCore
import Telemetry

// headwayd: parse the configuration, start, wait for SIGTERM or SIGINT, stop cleanly.
// Signals are blocked before any thread starts, so only `sigwait` below receives them.
// A second signal during a slow stop ends the process at once. SIGHUP, at any time before
// the stop, reopens the log file, rereads the configuration file and reloads the TLS
// certificate and key (`Reload`).

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
        case .create(let request, let expiresIn, let databasePath, let serverWait):
            let secret: String
            do {
                secret = try TokenCommand.create(request, expiresInSeconds: expiresIn, databasePath: databasePath,
                                                 serverWaitSeconds: serverWait) { line in
                    FileHandle.standardError.write(Data("headwayd: \(line)\n".utf8))
                }
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

// Read again on SIGHUP, with the configuration file as it is then.
let arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment
var configuration: Configuration
do {
    switch try Configuration.parse(arguments: arguments, environment: environment) {
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

let logger: Logger
do {
    logger = try Logger(minimumLevel: configuration.logLevel, filePath: configuration.logFilePath)
} catch {
    fail("cannot start: \(error)", code: 1)
}
let application: HeadwayApplication
do {
    try configuration.adoptInheritedSocket(environment: environment)
    application = try buildApplication(configuration, logger: logger)
    try application.start()
} catch is StartInterrupted {
    logger.log(.info, "signal.received", ["detail": "stopped while waiting for the database server"])
    logger.flush()
    exit(0)
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

var reload = Reload(application: application, configuration: configuration, arguments: arguments,
                    environment: environment)
var received: Int32 = 0
sigwait(&signals, &received)
while received == SIGHUP {
    reload.reload()
    sigwait(&signals, &received)
}
logger.log(.info, "signal.received", ["signal": signalName(received)])
// The main thread runs the stop. A second SIGTERM or SIGINT meanwhile is heard by a Dispatch
// signal source (a signalfd: the signals stay blocked, and one already pending is read at
// once); a SIGHUP stays pending and changes nothing.
let impatientSignals = [SIGTERM, SIGINT].map { signal in
    let source = DispatchSource.makeSignalSource(signal: signal, queue: .global())
    source.setEventHandler {
        logger.log(.warn, "signal.received", ["signal": signalName(signal), "action": "stopping at once"])
        // Without exit handlers, which would run under the feet of the stop under way. Committed
        // changes are safe: SQLite recovers its write-ahead log as after any crash.
        _exit(128 + signal)
    }
    source.resume()
    return source
}
application.shutdown(processEnds: true)
exit(0)
