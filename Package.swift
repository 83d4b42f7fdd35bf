// swift-tools-version:6.0
import PackageDescription

/// Headway: a progress-reporting daemon. The targets are layered from the bottom up, each
/// importing only the ones below it (the dependencies declared here keep the direction):
/// C system libraries; the lifecycle of long-running parts; a pure domain core; the store
/// (SQLite or PostgreSQL); an HTTP layer that knows nothing of tasks; telemetry (logs,
/// metrics); access (tokens, secrets); the event stream (broker, subscribers, catch-ups);
/// webhook delivery; the HTTP API (routes, problems, browser checks), which imports neither
/// the webhook transport nor the composition root; the daemon that wires them together;
/// and thin executables.
/// Linux only: the HTTP layer waits on epoll and eventfd, and threads are named through /proc.

/// Release builds of the daemon's code leave out the run-time checks of exclusive access
/// (a call into the runtime at each access to a class's stored property or a global: about
/// 3 % of the instructions of a request). Debug builds, which the tests run, keep them, and
/// the compiler still checks what it can prove statically. They also optimize across the
/// daemon's modules (`-cross-module-optimization`: a generic or small function of one module
/// is specialized or inlined in the others): 2 % less CPU per progress update
/// (bench/cpu-ab.sh, both durabilities).
let daemonSettings: [SwiftSetting] = [
    .unsafeFlags(["-enforce-exclusivity=unchecked", "-cross-module-optimization"], .when(configuration: .release)),
]

let package = Package(
    name: "Headway",
    products: [
        .executable(name: "headwayd", targets: ["headwayd"]),
        .executable(name: "headway", targets: ["headway"]),
        // The Swift client: `HeadwayClient` (async calls, the event stream) and
        // `ProgressReporter` (a Foundation `Progress` tree reported as a task tree).
        .library(name: "HeadwayClient", targets: ["HeadwayClient"]),
    ],
    targets: [
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        // GnuTLS: the CSPRNG and SHA-256 of token secrets, the HMAC of webhook signatures, and
        // the certificates of HTTPS.
        .systemLibrary(
            name: "CGnuTLS",
            pkgConfig: "gnutls",
            providers: [.apt(["libgnutls28-dev"])]
        ),
        // libcurl: the HTTP client of the `headway` command and of webhook deliveries.
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // libpq: PostgreSQL, for several daemons sharing one database.
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // The shape every long-running part shares (Service, ServiceGroup) and how its
        // thread sleeps (Doorbell); knows nothing of tasks or HTTP.
        .target(name: "Lifecycle", swiftSettings: daemonSettings),
        .target(name: "HeadwayCore", swiftSettings: daemonSettings),
        // The reader of command-line words both executables parse their options with, and
        // their "did you mean" for a mistyped one.
        .target(name: "ArgumentParsing", swiftSettings: daemonSettings),
        .target(name: "HeadwayStore", dependencies: ["CLibPQ", "CSQLite", "HeadwayCore", "Lifecycle"],
                swiftSettings: daemonSettings),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "CGnuTLS", "Lifecycle"], swiftSettings: daemonSettings),
        // The daemon's logger, its metrics and the access log of HTTP exchanges.
        .target(name: "Telemetry", dependencies: ["HeadwayCore", "HeadwayStore", "HTTPServer", "Lifecycle"],
                swiftSettings: daemonSettings),
        // Tokens (their secrets, the in-memory registry, scopes) and webhook secrets.
        .target(name: "Access", dependencies: ["CGnuTLS", "HeadwayCore", "HeadwayStore", "Lifecycle"],
                swiftSettings: daemonSettings),
        // The event broker: subscribers, fan-out rounds, catch-ups and their memory budget.
        .target(name: "EventStream", dependencies: ["HeadwayCore", "HeadwayStore", "HTTPServer", "Lifecycle", "Telemetry"],
                swiftSettings: daemonSettings),
        // Webhook delivery: the dispatcher, the HTTP transport (libcurl) and host lookups.
        .target(name: "Webhooks", dependencies: ["Access", "CCurl", "HeadwayCore", "HeadwayStore", "Lifecycle", "Telemetry"],
                swiftSettings: daemonSettings),
        // The HTTP API: routes, problem replies, browser checks, the dashboard's files.
        .target(name: "HeadwayAPI", dependencies: ["Access", "EventStream", "HeadwayCore", "HeadwayStore", "HTTPServer",
                                                   "Lifecycle", "Telemetry"],
                swiftSettings: daemonSettings),
        // The composition root: configuration and reload, maintenance, the application that
        // starts every part, and `headwayd token`.
        .target(name: "Daemon", dependencies: ["Access", "ArgumentParsing", "EventStream", "HeadwayAPI", "HeadwayCore", "HeadwayStore", "HTTPServer",
                                               "Lifecycle", "Telemetry", "Webhooks"],
                swiftSettings: daemonSettings),
        // Release builds of the daemon allocate with jemalloc (Debian `libjemalloc-dev`) instead
        // of glibc's malloc: requests are parsed on one thread, written on another, their
        // events freed on a third, the pattern its per-thread caches serve best (3 % less CPU
        // per update, 3 % more updates/s while 10,000 subscribers receive). Debug builds, which
        // the sanitizers instrument with their own allocator, keep glibc's.
        .executableTarget(name: "headwayd", dependencies: ["Daemon", "HeadwayCore", "Telemetry"], swiftSettings: daemonSettings,
                          linkerSettings: [.linkedLibrary("jemalloc", .when(configuration: .release))]),
        // The Swift client of the API, on libcurl: the `headway` command's and any Swift runner's.
        .target(name: "HeadwayClient", dependencies: ["CCurl", "HeadwayCore", "Lifecycle"]),
        // The `headway` command: its parser and commands in a library the tests use; the
        // executable only calls it.
        .target(name: "HeadwayCLI", dependencies: ["ArgumentParsing", "CCurl", "HeadwayClient", "HeadwayCore", "HeadwayStore", "Lifecycle"]),
        .executableTarget(name: "headway", dependencies: ["HeadwayCLI", "HeadwayCore"]),
        // Helpers shared by the test targets only (a raw HTTP client, temporary files).
        .target(name: "HeadwayTestSupport"),
        .testTarget(name: "LifecycleTests", dependencies: ["Lifecycle"]),
        .testTarget(name: "HeadwayCLITests", dependencies: ["ArgumentParsing", "HeadwayCLI", "HeadwayClient", "HeadwayCore", "HeadwayStore",
                                                            "HeadwayTestSupport"],
                    exclude: ["golden"]),
        .testTarget(name: "HeadwayClientTests", dependencies: ["HeadwayClient", "HeadwayTestSupport"]),
        // libcurl: the webhook URL rules are checked against its own URL parser.
        .testTarget(name: "HeadwayCoreTests", dependencies: ["HeadwayCore", "CCurl"]),
        .testTarget(name: "HeadwayStoreTests", dependencies: ["HeadwayStore", "HeadwayCore", "HeadwayTestSupport", "Lifecycle"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "HeadwayTestSupport", "Lifecycle"]),
        // The daemon's targets, tested together: in-process units and live daemons.
        .testTarget(name: "HeadwayServiceTests", dependencies: [
            "Access", "Daemon", "EventStream", "HeadwayAPI", "Telemetry", "Webhooks",
            "HeadwayCore", "HeadwayStore", "HTTPServer", "HeadwayTestSupport", "Lifecycle",
        ]),
    ],
    swiftLanguageModes: [.v6]
)
