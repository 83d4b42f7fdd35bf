import Foundation
import HeadwayClient
import HeadwayTestSupport

/// A live `headwayd` on 127.0.0.1 with a database in a temporary folder, that can be
/// stopped and started again on the same port and database.
final class RestartableDaemon {
    let directory = TemporaryDirectory()
    private var daemon: DaemonProcess
    private(set) var port: Int
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }
    var client: HeadwayClient { HeadwayClient(url: url, connectTimeout: .seconds(2), requestTimeout: .seconds(5)) }

    init() throws {
        daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("h.db")], logPath: directory.file("headwayd.log"))
        port = daemon.port
    }

    /// Stops the daemon with SIGTERM and waits for it.
    func stop() { daemon.stop(SIGTERM) }

    /// Starts it again on the same port and database.
    func restart() throws {
        daemon = try DaemonProcess(["--listen", "127.0.0.1:\(port)", "--db", directory.file("h.db")],
                                   logPath: directory.file("headwayd-\(UUID().uuidString).log"))
    }

    /// Stops the daemon and removes its folder.
    func remove() {
        stop()
        directory.remove()
    }
}

/// A clock whose time moves only when a test calls `advance(by:)`.
final class ManualClock: Clock, @unchecked Sendable {  // `current` and `sleepers` only under `lock`
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (left: Instant, right: Instant) -> Bool { left.offset < right.offset }
    }

    private let lock = NSLock()
    private var current = Instant(offset: .zero)
    private var sleepers: [Int: (deadline: Instant, continuation: CheckedContinuation<Void, any Error>)] = [:]
    private var nextSleeper = 0

    var now: Instant { lock.withLock { current } }
    var minimumResolution: Duration { .zero }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = lock.withLock { () -> Int in
            nextSleeper += 1
            return nextSleeper
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let due = lock.withLock { () -> Bool in
                    if deadline <= current || Task.isCancelled { return true }
                    sleepers[id] = (deadline, continuation)
                    return false
                }
                if due { continuation.resume() }
            }
        } onCancel: {
            lock.withLock { sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
        try Task.checkCancellation()
    }

    /// Moves the time on by `duration`, waking the sleepers whose deadline has come.
    func advance(by duration: Duration) {
        let due = lock.withLock { () -> [CheckedContinuation<Void, any Error>] in
            current = current.advanced(by: duration)
            let ready = sleepers.filter { $0.value.deadline <= current }
            for id in ready.keys { sleepers.removeValue(forKey: id) }
            return ready.map(\.value.continuation)
        }
        for continuation in due { continuation.resume() }
    }
}

/// A `Progress` whose `localizedDescription` can be set (swift-corelibs-foundation's is
/// read-only and empty).
final class LabeledProgress: Progress, @unchecked Sendable {  // `text` only under `lock`
    private let lock = NSLock()
    private var text = ""

    init(totalUnitCount: Int64, label: String) {
        super.init(parent: nil, userInfo: nil)
        self.totalUnitCount = totalUnitCount
        self.label = label
    }

    var label: String {
        get { lock.withLock { text } }
        set { lock.withLock { text = newValue } }
    }

    override var localizedDescription: String! { label }
}

/// The warnings a reporter gave, kept for a test to read.
final class Warnings: @unchecked Sendable {  // `lines` only under `lock`
    private let lock = NSLock()
    private var lines: [String] = []
    var all: [String] { lock.withLock { lines } }
    func record(_ line: String) { lock.withLock { lines.append(line) } }
}

/// Polls `condition` up to `attempts` times, 20 ms apart; whether it became true.
func eventually(_ attempts: Int = 500, _ condition: () async -> Bool) async -> Bool {
    for _ in 0..<attempts {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return await condition()
}
