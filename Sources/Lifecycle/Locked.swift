import Glibc

/// State shared between threads, reached only under its lock: `withLock` gives one thread
/// at a time `inout` access — the shape of `Synchronization.Mutex`.
///
/// Why not `Mutex` itself: on Linux its lock is a futex inside the Swift runtime, which
/// ThreadSanitizer cannot see, so every access it guards was reported as a race and
/// `swift test --sanitize=thread` could not tell a real race from its own noise. This
/// lock is a `pthread_mutex_t`, which ThreadSanitizer intercepts; uncontended it costs the
/// same (one atomic instruction each way).
public final class Locked<State>: @unchecked Sendable {  // `state` is touched only while `mutex` is held
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    public init(_ initialState: consuming sending State) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        state = initialState
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the state while holding the lock.
    public func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending State) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
