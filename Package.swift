// swift-tools-version:6.0
import PackageDescription

/// Headway: a progress-reporting daemon. The targets are layered from the bottom up:
/// C system libraries, a pure domain core, the SQLite store, an HTTP layer that knows
/// nothing of tasks, the service that wires them together, and thin executables.
/// Linux only: the HTTP layer waits on epoll and eventfd, and threads are named through /proc.
let package = Package(
    name: "Headway",
    products: [
        .executable(name: "headwayd", targets: ["headwayd"]),
    ],
    targets: [
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(name: "HeadwayCore"),
        .target(name: "HeadwayStore", dependencies: ["CSQLite", "HeadwayCore"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
        .target(name: "HeadwayService", dependencies: ["HeadwayCore", "HeadwayStore", "HTTPServer"]),
        .executableTarget(name: "headwayd", dependencies: ["HeadwayService"]),
        // Helpers shared by the test targets only (a raw HTTP client, temporary files).
        .target(name: "HeadwayTestSupport"),
        .testTarget(name: "HeadwayCoreTests", dependencies: ["HeadwayCore"]),
        .testTarget(name: "HeadwayStoreTests", dependencies: ["HeadwayStore", "HeadwayTestSupport"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "HeadwayTestSupport"]),
        .testTarget(name: "HeadwayServiceTests", dependencies: ["HeadwayService", "HeadwayTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
