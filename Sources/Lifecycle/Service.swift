import Foundation

/// A long-running part of the daemon (the writer, the event broker, the HTTP server, …):
/// one shape for all of them, so that one `ServiceGroup` starts them in a declared order
/// and stops them in the reverse order.
///
/// The group calls `prepare()` on its own thread (where the service may fail, e.g. a port
/// in use), then `run()` on a thread of the service's own; `requestStop()` may come from
/// any thread at any time, even before `run()` begins.
public protocol Service: AnyObject, Sendable {
    /// Gets ready to run: binds sockets, starts libraries. Throws when the service cannot
    /// start; it then leaves nothing behind. Does nothing unless a service needs it.
    func prepare() throws

    /// Does the service's work on the calling thread until a stop is requested, then winds
    /// down gracefully (finishes what was accepted) and returns.
    func run()

    /// Asks `run()` to wind down and return; returns at once. Later calls do nothing.
    func requestStop()
}

extension Service {
    public func prepare() throws {}
}

/// Starts services in the order given, each on a thread of its own named after it, and
/// stops them in the reverse order: each is asked to stop only once every service started
/// after it has finished running, so (for example) the HTTP server has answered its last
/// request before the writer commits its last batch.
public final class ServiceGroup: Sendable {
    /// A service and the name of its thread (at most 15 bytes show in `top -H`).
    public struct Member: Sendable {
        public var name: String
        public var service: any Service

        public init(_ name: String, _ service: any Service) {
            self.name = name
            self.service = service
        }
    }

    private struct Running: Sendable {
        var member: Member
        var finished: DispatchSemaphore
    }

    private enum Phase: Sendable {
        case idle, running([Running]), stopped
    }

    private let members: [Member]
    /// Shared by `start` (the main thread) and `stop` (whichever thread stops the group).
    private let phase = Locked<Phase>(.idle)
    /// Held by `stop()` from start to end, so a second caller waits for the first to finish.
    private let stopping = Locked<Void>(())

    /// A group of `members`, started in this order and stopped in the reverse one.
    public init(_ members: [Member]) {
        self.members = members
    }

    /// Prepares and starts each member in order. When one cannot be prepared, those
    /// already running are stopped (in reverse order) and its error is thrown.
    public func start() throws {
        var running: [Running] = []
        for member in members {
            do {
                try member.service.prepare()
            } catch {
                Self.stop(running)
                phase.withLock { $0 = .stopped }
                throw error
            }
            let finished = DispatchSemaphore(value: 0)
            let thread = Thread { [member] in
                nameCurrentThread(member.name)
                member.service.run()
                finished.signal()
            }
            thread.name = member.name
            thread.start()
            running.append(Running(member: member, finished: finished))
        }
        phase.withLock { $0 = .running(running) }
    }

    /// Stops every running member, last started first, each after the ones started after it
    /// have returned from `run()`; returns when all have. Later calls return at once (once
    /// the first has finished).
    public func stop() {
        stopping.withLock { _ in
            let running = phase.withLock { phase -> [Running] in
                defer { phase = .stopped }
                if case .running(let running) = phase { return running }
                return []
            }
            Self.stop(running)
        }
    }

    private static func stop(_ running: [Running]) {
        for entry in running.reversed() {
            entry.member.service.requestStop()
            entry.finished.wait()
        }
    }
}

/// Names the calling thread for the operating system (`top -H`, /proc/…/comm; at most 15
/// bytes); does nothing where /proc is missing.
public func nameCurrentThread(_ name: String) {
    try? String(decoding: name.utf8.prefix(15), as: UTF8.self)
        .write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
}
