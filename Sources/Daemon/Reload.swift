import HeadwayCore
import Telemetry

/// What SIGHUP does, without a restart: reopen the log file (log rotation), reread the
/// configuration file (its log level takes effect at once; any other setting whose value
/// changed waits for a restart and is logged as such; a file that no longer parses changes
/// nothing), and reload the TLS certificate. Logs one `reload.finished` line saying what
/// was done, besides a line for each warning or error.
public struct Reload {
    private let application: HeadwayApplication
    private let arguments: [String]
    private let environment: [String: String]
    /// The configuration in effect: the one of the start, with the log level of the last
    /// reload.
    public private(set) var running: Configuration

    /// Reloads for `application`, started with `configuration` as `arguments` and
    /// `environment` gave it (the same flags and variables are read again, over the file).
    public init(application: HeadwayApplication, configuration: Configuration,
                arguments: [String], environment: [String: String]) {
        self.application = application
        self.running = configuration
        self.arguments = arguments
        self.environment = environment
    }

    /// Reopens the log file, rereads the configuration, reloads the certificate.
    public mutating func reload() {
        let logger = application.logger
        var fields: [(key: String, value: String)] = []
        if let path = logger.filePath {
            do {
                try logger.reopen()
                fields.append(("log_file", "reopened"))
            } catch {
                logger.log(.error, "log.reopen_failed", [
                    "error": error.description, "detail": "lines keep going to the file opened before, at \(path) or where it was moved",
                ])
                fields.append(("log_file", "kept"))
            }
        }
        let previousLevel = running.logLevel
        if let path = running.configurationFilePath {
            fields.append(("config", apply(rereadConfiguration(), from: path) ? "reread" : "kept"))
        }
        fields.append(("tls", application.reloadCertificate() ? "reloaded" : running.tlsCertificatePath == nil ? "off" : "kept"))
        fields.append(("log_level", running.logLevel.name))
        // Written if either the old or the new level shows it.
        logger.log(.info, "reload.finished", fields, threshold: min(previousLevel, running.logLevel))
    }

    /// The configuration the same arguments and environment give with the file as it is
    /// now; the listening socket stays the one adopted at start.
    private func rereadConfiguration() -> Result<Configuration, UsageError> {
        do {
            guard case .run(var reread) = try Configuration.parse(arguments: arguments, environment: environment) else {
                return .failure(UsageError("the arguments no longer ask for a run"))
            }
            if running.inheritedListenFD != nil {
                (reread.host, reread.port, reread.inheritedListenFD) = (running.host, running.port, running.inheritedListenFD)
            }
            return .success(reread)
        } catch {
            return .failure(error)
        }
    }

    /// Applies the log level of `reread`, and logs every other setting that changed as
    /// waiting for a restart; a configuration that did not parse is logged and changes
    /// nothing. Returns whether `reread` was read.
    private mutating func apply(_ reread: Result<Configuration, UsageError>, from path: String) -> Bool {
        let logger = application.logger
        switch reread {
        case .failure(let error):
            logger.log(.error, "config.reload_failed", [
                "file": path, "error": error.description, "detail": "nothing changed: the settings in effect stay",
            ])
            return false
        case .success(let configuration):
            for name in configuration.settingsChanged(from: running) where name != "log-level" {
                logger.log(.warn, "config.restart_needed", [
                    "setting": name, "detail": "the new value takes effect at restart; the old one stays in effect",
                ])
            }
            running.logLevel = configuration.logLevel
            logger.setMinimumLevel(configuration.logLevel)
            return true
        }
    }
}
