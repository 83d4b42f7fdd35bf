#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread, as `pthread_self()` names it: comparable across threads.
public struct ThreadID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: UInt

    /// The calling thread.
    public static var current: ThreadID {
        #if canImport(Glibc)
        ThreadID(rawValue: UInt(pthread_self()))
        #else
        ThreadID(rawValue: UInt(bitPattern: pthread_self()))
        #endif
    }

    /// `thread 0x…`, for messages.
    public var description: String { "thread 0x" + String(rawValue, radix: 16) }
}

/// Which threads may use a database connection. SQLite connections are opened without
/// SQLite's own mutex, so two threads using one at once would corrupt it; each statement a
/// connection runs checks its confinement first and stops the process on a misuse (a
/// `precondition`, kept in release builds: the check is one atomic load and one
/// `pthread_self()`, nothing beside a statement's step).
///
/// - The writer's connection is confined to the writer thread, from its first job on.
/// - A reader's connection is confined to the thread holding the reader's lock while it
///   runs a read, and to no thread between reads.
/// - A connection used for a moment (the setup at start, a test) may be used anywhere; its
///   owner keeps the uses apart.
public enum ThreadConfinement: Equatable, Sendable, CustomStringConvertible {
    /// Any thread may use the connection.
    case anyThread
    /// Only this thread may use the connection.
    case thread(ThreadID)
    /// No thread may use the connection (it is idle, waiting for its next holder).
    case noThread

    /// Only the calling thread.
    public static var currentThread: ThreadConfinement { .thread(.current) }

    /// Whether `thread` may use a connection so confined.
    public func allows(_ thread: ThreadID) -> Bool {
        switch self {
        case .anyThread: true
        case .thread(let owner): owner == thread
        case .noThread: false
        }
    }

    /// What the confinement allows, for messages.
    public var description: String {
        switch self {
        case .anyThread: "usable on any thread"
        case .thread(let owner): "confined to \(owner)"
        case .noThread: "idle (confined to no thread)"
        }
    }

    // Stored in one atomic word: 0 and UInt.max are never the `pthread_t` of a live thread
    // (glibc's is the address of the thread's descriptor).
    var encoded: UInt {
        switch self {
        case .anyThread: 0
        case .thread(let owner): owner.rawValue
        case .noThread: UInt.max
        }
    }

    init(encoded: UInt) {
        switch encoded {
        case 0: self = .anyThread
        case UInt.max: self = .noThread
        default: self = .thread(ThreadID(rawValue: encoded))
        }
    }
}

extension Database {
    /// Which threads may use this connection now.
    public var confinement: ThreadConfinement { ThreadConfinement(encoded: confinementValue.load(ordering: .relaxed)) }

    /// Says which threads may use this connection from now on (see `ThreadConfinement`).
    public func confine(to confinement: ThreadConfinement) {
        confinementValue.store(confinement.encoded, ordering: .relaxed)
    }

    /// Whether `thread` may use this connection now; every statement checks it for the
    /// calling thread and stops the process when it may not.
    public func isUsable(on thread: ThreadID) -> Bool {
        let encoded = confinementValue.load(ordering: .relaxed)
        return encoded == 0 || encoded == thread.rawValue
    }
}
