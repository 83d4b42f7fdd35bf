import Dispatch
import HeadwayCore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import HeadwayStore

/// Records every event a writer publishes, in order, and runs `check` on each list as it
/// arrives (on the writer thread).
final class RecordingSink: TaskEventSink {
    let events = Locked<[TaskEvent]>([])
    private let check: (@Sendable ([TaskEvent]) -> Void)?

    init(check: (@Sendable ([TaskEvent]) -> Void)? = nil) { self.check = check }

    func publish(_ events: [TaskEvent]) {
        check?(events)
        self.events.withLock { $0 += events }
    }
}

/// The write path publishes: every change of tasks made through the store, whatever the
/// caller does with its result, reaches the writer's sink once committed, in the order of
/// the change numbers.
@Suite struct PublishedEventsTests {
    /// Registrations, updates, a batch, a terminate, a cancel in steps and a sweep, their
    /// callers publishing nothing: the sink gets every event their results carry, in
    /// order, each change visible to another connection by then; a refused write publishes
    /// nothing.
    @Test func everyCommittedChangeReachesTheSinkInCommitOrder() throws {
        // Another connection's read: a published change must be committed already.
        let path = Locked("")
        let notCommitted = Locked<[String]>([])
        let sink = RecordingSink { events in
            guard let reader = try? Database(path: path.withLock { $0 }) else {
                return notCommitted.withLock { $0.append("no reader") }
            }
            defer { reader.close() }
            for event in events {
                let stored: TaskRecord?
                do { stored = try TaskRepository.find(event.taskID, in: reader) } catch {
                    notCommitted.withLock { $0.append("\(error)") }
                    continue
                }
                let committed = event.kind == .deleted ? stored == nil : (stored?.changeNumber ?? -1) >= event.changeNumber
                if !committed { notCommitted.withLock { $0.append("\(event.kind.rawValue) \(event.taskID)") } }
            }
        }
        let fixture = try StoreFixture(stepTasks: 2, events: sink)
        path.withLock { $0 = fixture.path }
        let store = fixture.store
        var carried: [TaskEvent] = []
        carried += try fixture.write { try store.register(Registration(id: "p", name: "P"), now: 1_000, in: $0) }.events
        for child in ["p.a", "p.b", "p.c", "p.d", "p.e"] {
            carried += try fixture.write {
                try store.register(Registration(id: child, name: child, parentID: "p", total: 10), now: 1_000, in: $0)
            }.events
        }
        carried += try fixture.write {
            try store.register(Registration(id: "s", name: "S", stallTimeoutSeconds: 1), now: 1_000, in: $0)
        }.events
        carried += try fixture.write { try store.progress("p.a", ProgressUpdate(completed: 5), now: 2_000, in: $0) }.events
        let items = [ProgressItem(id: "p.b", update: ProgressUpdate(completed: 3)),
                     ProgressItem(id: "missing", update: ProgressUpdate(completed: 1)),
                     ProgressItem(id: "p.c", update: ProgressUpdate(completed: 7))]
        carried += try fixture.write { try store.progress(each: items, now: 3_000, in: $0) }.events
        #expect(throws: TaskError.self) {
            try fixture.write { try store.progress("missing", ProgressUpdate(completed: 1), now: 3_500, in: $0) }
        }
        carried += try fixture.write { try store.terminate("p.e", now: 4_000, in: $0) }.events
        // A cancel of the subtree in steps of two tasks, each step a job of its own.
        let stepsDone = DispatchSemaphore(value: 0)
        let steps = Locked<[SubtreeChange]>([])
        store.inSteps(on: fixture.writer, { database in try store.cancel("p", now: 5_000, in: database) },
                      afterEachCommit: { step in steps.withLock { $0.append(step) } },
                      completion: { _ in stepsDone.signal() })
        stepsDone.wait()
        #expect(steps.withLock { $0.count } > 1, "the cancel took several steps")
        carried += steps.withLock { $0.flatMap(\.events) }
        carried += try fixture.write { try store.sweep(now: 60_000, limit: 10, in: $0) }.events

        let published = sink.events.withLock { $0 }
        #expect(published == carried)
        #expect(published.map(\.changeNumber) == published.map(\.changeNumber).sorted())
        #expect(Set(published.map(\.changeNumber)).count == published.count, "each change once")
        #expect(published.contains { $0.kind == .cancelRequested && $0.taskID == "p.d" })
        #expect(published.contains { $0.kind == .stalled && $0.taskID == "s" })
        #expect(notCommitted.withLock { $0 } == [])
    }
}
