import Foundation

/// How many event streams the daemon's open-file limit lets it serve. Every connection is
/// a file, so a process whose limit is below `--max-subscribers` plus its other files would
/// fail to accept past it — refusing API requests as well as streams, with no answer. The
/// daemon raises its limit toward what it wants, and serves only the streams the limit
/// obtained can hold: the next subscriber gets 503 `too_many_subscribers`, and the API
/// keeps its room.
struct OpenFileBudget: Equatable {
    /// API connections the request daemon may hold beside the streams (its share of the
    /// connection limit), where the limit allows.
    static let maximumAPIConnections = 1024
    /// Files that are neither streams nor API connections: the listening socket, the
    /// database's files and connections, the log file, epoll sets and event fds, the
    /// webhooks' connections and lookups (about 30 at rest on SQLite).
    static let otherFiles = 64
    /// Files kept for all but event streams where the limit allows.
    static var reserve: Int { maximumAPIConnections + otherFiles }

    /// `--max-subscribers`.
    let configuredSubscribers: Int
    /// The soft limit of open files obtained.
    let openFiles: Int

    /// The open files the configured subscribers need, with the reserve.
    var wanted: Int { configuredSubscribers + Self.reserve }

    /// The API connections kept room for: `maximumAPIConnections`, or under a limit too low
    /// for it a quarter of what the other files leave (a limit of 1,024 still serves 720
    /// streams beside 240 API connections).
    var apiConnections: Int { min(Self.maximumAPIConnections, max(0, openFiles - Self.otherFiles) / 4) }

    /// The subscribers served at once: the configured number, or fewer if the limit cannot hold it.
    var subscribers: Int { max(0, min(configuredSubscribers, openFiles - Self.otherFiles - apiConnections)) }

    /// Whether the limit holds every configured subscriber.
    var holdsConfiguredSubscribers: Bool { subscribers == configuredSubscribers }

    /// Raises the soft limit of open files of this process toward `wanted`, above the hard
    /// limit too when the process may (root with `CAP_SYS_RESOURCE`; up to the kernel's
    /// `fs.nr_open`), else up to the hard limit; never lowers it. Returns the soft limit then in force.
    static func raise(toward wanted: Int) -> Int {
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return Int.max }
        let target = rlim_t(wanted)
        if limit.rlim_cur < target {
            var raised = limit
            raised.rlim_cur = target
            raised.rlim_max = max(limit.rlim_max, target)
            if setrlimit(resource, &raised) != 0 && limit.rlim_max < target {
                // Not privileged to pass the hard limit: as far as it goes.
                raised = limit
                raised.rlim_cur = limit.rlim_max
                setrlimit(resource, &raised)
            }
            getrlimit(resource, &limit)
        }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// Raises this process's limit for `configuredSubscribers` and says what it then holds.
    static func obtain(forSubscribers configuredSubscribers: Int) -> OpenFileBudget {
        let openFiles = raise(toward: configuredSubscribers + reserve)
        return OpenFileBudget(configuredSubscribers: configuredSubscribers, openFiles: openFiles)
    }
}
