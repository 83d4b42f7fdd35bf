import Dispatch
import Foundation
import Lifecycle

/// The threads that run host lookups (`HostLookup`): getaddrinfo blocks, with no time limit
/// of its own, so each lookup needs a thread while it runs, and these are never more than
/// `maximumThreads`. A thread is started when a lookup is queued and none is idle, and
/// ends after `idleSeconds` without one; a lookup queued while all are busy waits for the
/// first to be free (whoever asked still hears within their own time limit, `HostLookup`).
///
/// A service of the daemon's `ServiceGroup` (`headway-lookups`): its stop drops the lookups
/// still queued (each told `stopped`), ends the idle threads at once, and each busy one as
/// soon as its lookup returns (a lookup cannot be interrupted; the stop does not wait for it).
package final class LookupThreads: Service {
    /// Why a lookup was not run.
    enum Refusal: Sendable {
        /// The pool has stopped (or stopped while the lookup was queued).
        case stopped
        /// No thread runs and none could be started (the process's or its cgroup's limit).
        case noThread
    }

    /// A lookup to run: called once, on a thread of the pool with nil, or with why it was
    /// not run (then on the thread that queued it or the one that stopped the pool).
    typealias Job = @Sendable (_ refusal: Refusal?) -> Void

    /// The most threads running lookups at once.
    let maximumThreads: Int
    /// The name the threads show in `top -H` and /proc (at most 15 bytes).
    let threadName: String
    /// How long a thread waits for a lookup before it ends.
    let idleSeconds: Double

    private struct State {
        var queued: [Job] = []
        /// Threads started and not yet ended.
        var threads = 0
        /// Threads waiting for a lookup.
        var idle = 0
        var stopping = false
    }

    /// Shared by whoever queues a lookup (a webhook's attempt, a request's check) and the threads.
    private let state = Locked(State())
    /// Signalled once per lookup queued, and once per thread at the stop.
    private let work = DispatchSemaphore(value: 0)
    private let stopRequested = Doorbell()

    init(maximumThreads: Int, threadName: String = "headway-lookup", idleSeconds: Double = 10) {
        self.maximumThreads = max(1, maximumThreads)
        self.threadName = threadName
        self.idleSeconds = idleSeconds
    }

    /// How many threads are running (busy or idle).
    var threadCount: Int { state.withLock { $0.threads } }

    /// Queues `job`: run on a thread of the pool as soon as one is free; refused at once,
    /// on the caller's thread, once the pool has stopped or when no thread runs and none
    /// can be started.
    func submit(_ job: @escaping Job) {
        enum Step { case queued, startThread, refuse }
        let step: Step = state.withLock { state in
            guard !state.stopping else { return .refuse }
            state.queued.append(job)
            // One more thread while more lookups wait than threads are idle, up to the bound.
            guard state.queued.count > state.idle && state.threads < maximumThreads else { return .queued }
            state.threads += 1
            return .startThread
        }
        switch step {
        case .refuse: return job(.stopped)
        case .queued: work.signal()
        case .startThread:
            work.signal()
            if !startThread({ [self] in serve() }) {
                let orphaned: [Job] = state.withLock { state in
                    state.threads -= 1
                    guard state.threads == 0 else { return [] }
                    defer { state.queued = [] }
                    return state.queued
                }
                for job in orphaned { job(.noThread) }
            }
        }
    }

    /// Waits for the stop (the threads are started by `submit`).
    package func run() {
        while !state.withLock({ $0.stopping }) { stopRequested.wait() }
    }

    /// Drops the lookups queued and ends the threads (see the type). May come from any thread.
    package func requestStop() {
        let (dropped, threads): ([Job], Int) = state.withLock { state in
            guard !state.stopping else { return ([], 0) }
            state.stopping = true
            defer { state.queued = [] }
            return (state.queued, state.threads)
        }
        for _ in 0..<threads { work.signal() }
        for job in dropped { job(.stopped) }
        stopRequested.ring()
    }

    /// A thread's life: runs lookups until it has waited `idleSeconds` for none, or the stop.
    private func serve() {
        nameCurrentThread(threadName)
        enum Step { case run(Job), waitAgain, end }
        while true {
            state.withLock { $0.idle += 1 }
            let woken = work.wait(timeout: .now() + idleSeconds) == .success
            let step: Step = state.withLock { state in
                state.idle -= 1
                if !state.stopping, !state.queued.isEmpty { return .run(state.queued.removeFirst()) }
                guard state.stopping || !woken else { return .waitAgain }
                state.threads -= 1
                return .end
            }
            switch step {
            case .run(let job): job(nil)
            case .waitAgain: continue
            case .end: return
            }
        }
    }

    /// Runs `body` on a new detached thread; false when none could be made (the process's
    /// or its cgroup's thread limit), which Foundation's `Thread.start()` would not say.
    private func startThread(_ body: @escaping @Sendable () -> Void) -> Bool {
        final class Body { let run: @Sendable () -> Void; init(_ run: @escaping @Sendable () -> Void) { self.run = run } }
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return false
        }
        return true
    }
}
