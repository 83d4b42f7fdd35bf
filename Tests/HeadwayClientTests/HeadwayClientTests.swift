import Foundation
import HeadwayClient
import HeadwayTestSupport
import Testing

/// `HeadwayClient` against a live headwayd: the typed calls, problems as typed errors, and
/// the event stream resuming across a restart of the daemon.
@Suite(.serialized) struct HeadwayClientTests {
    /// The run-time rules go with a registration (the deadline as an RFC 3339 time) and come
    /// back on the task, with its flags.
    @Test func runTimeRulesGoAndComeBack() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        // Rules far longer than the test: on a loaded machine a test's next step can wait for
        // a thread for a minute and more.
        let deadline = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 86_400).rounded(.down))
        let task = try await daemon.client.register(TaskRegistration(id: "nightly", name: "Nightly export",
                                                                     expectedSeconds: 172_800, deadline: deadline,
                                                                     minSeconds: 86_400))
        #expect(task.expectedSeconds == 172_800 && task.minSeconds == 86_400 && task.deadline == deadline)
        #expect(!task.overdue && task.overdueSince == nil && !task.tooQuick)
        let finished = try await daemon.client.finish("nightly", outcome: .succeeded)
        #expect(finished.tooQuick, "a success a moment after its start is sooner than a day")
    }

    @Test func registerReportFinishRoundTrip() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let registered = try await client.register(TaskRegistration(id: "copy", name: "Copy photos", total: 10, unit: "files"))
        #expect(registered.id == "copy" && registered.state == .running && registered.total == 10 && registered.completed == 0)
        #expect(try await client.register(TaskRegistration(id: "copy", name: "Copy photos", total: 10, unit: "files")) == registered,
                "registering again is idempotent")

        var task = try await client.progress("copy", TaskUpdate(completed: 4, label: "Copying", seq: 1))
        #expect(task.completed == 4 && task.label == "Copying" && task.seq == 1)
        task = try await client.progress("copy", TaskUpdate(increment: 3, seq: 2))
        task = try await client.progress("copy", TaskUpdate(increment: 3, seq: 2))
        #expect(task.completed == 7, "a repeated seq is not counted twice")
        task = try await client.heartbeat("copy", label: "Still copying")
        #expect(task.label == "Still copying" && task.completed == 7)

        _ = try await client.register(TaskRegistration(id: "other", name: "Other"))
        let results = try await client.progress([(taskID: "copy", update: TaskUpdate(completed: 9, seq: 3)),
                                                 (taskID: "nope", update: TaskUpdate(increment: 1))])
        #expect(results.count == 2)
        #expect(results[0].taskID == "copy" && results[0].task?.completed == 9 && results[0].problem == nil)
        #expect(results[1].taskID == "nope" && results[1].task == nil && results[1].problem?.code == .notFound
                && results[1].problem?.status == 404)

        let canceled = try await client.cancel("other")
        #expect(canceled.cancelRequested)
        #expect(try await client.progress("other", TaskUpdate(increment: 1)).cancelRequested)

        let finished = try await client.finish("copy", outcome: .succeeded, message: "done")
        #expect(finished.state == .succeeded && finished.message == "done" && finished.finishedAt != nil)
        #expect(try await client.task("copy") == finished)

        // Paged: three tasks, two a page, newest first.
        _ = try await client.register(TaskRegistration(id: "third", name: "Third"))
        let first = try await client.tasks(pageSize: 2)
        #expect(first.tasks.map(\.id) == ["third", "other"] && first.totalSize == 3)
        let token = try #require(first.nextPageToken)
        let second = try await client.tasks(pageSize: 2, pageToken: token)
        #expect(second.tasks.map(\.id) == ["copy"] && second.nextPageToken == nil)
        #expect(try await client.tasks(TaskFilter(states: [.succeeded])).tasks.map(\.id) == ["copy"])
    }

    @Test func aProblemIsATypedErrorWithItsCode() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        _ = try await client.register(TaskRegistration(id: "job", name: "Job", total: 10))
        _ = try await client.progress("job", TaskUpdate(completed: 5))
        do {
            _ = try await client.progress("job", TaskUpdate(completed: 2))
            Issue.record("a regression was accepted")
        } catch {
            #expect(error.code == .progressRegression)
            #expect(error.status == 422)
            guard case .problem(let problem) = error else { throw error }
            #expect(!problem.detail.isEmpty && !problem.title.isEmpty)
            #expect(!error.isTransient)
        }
        await #expect(throws: HeadwayError.self) { try await client.task("missing") }
        do {
            _ = try await client.task("missing")
        } catch {
            #expect(error.code == .notFound && error.status == 404)
        }
        do {
            _ = try await client.register(TaskRegistration(id: "bad id", name: "Job"))
        } catch {
            #expect(error.code == .invalidRequest)
            guard case .problem(let problem) = error else { throw error }
            #expect(problem.errors.map(\.field) == ["id"], "\(problem.errors)")
        }
        daemon.stop()
        do {
            _ = try await client.task("job")
            Issue.record("a stopped daemon answered")
        } catch {
            guard case .unreachable = error else { throw error }
            #expect(error.isTransient && error.code == nil)
        }
    }

    /// The stream resumes after the daemon restarts: the changes made while it was down
    /// or reconnecting arrive (in their latest state), none twice, no second snapshot.
    @Test func eventsResumeAfterARestartWithoutGapOrDuplicate() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        _ = try await client.register(TaskRegistration(id: "t", name: "Watched", total: 100))
        let seen = EventLog()
        let reader = Task {
            do {
                for try await event in client.events(EventFilter(taskIDs: ["t"])) {
                    seen.append(event)
                }
            } catch let error as HeadwayError {
                seen.fail(error)
            } catch {
                Issue.record("not a HeadwayError: \(error)")
            }
        }
        defer { reader.cancel() }
        #expect(await eventually { seen.snapshots == 1 })
        for completed in 1...3 { _ = try await client.progress("t", TaskUpdate(completed: Int64(completed))) }
        #expect(await eventually { seen.completed.last == 3 }, "\(seen.completed)")

        daemon.stop()
        try daemon.restart()
        for completed in 4...5 { _ = try await client.progress("t", TaskUpdate(completed: Int64(completed))) }
        #expect(await eventually { seen.completed.last == 5 }, "\(seen.completed)")
        _ = try await client.finish("t", outcome: .succeeded)
        #expect(await eventually { seen.finished }, "\(seen.completed)")

        let completed = seen.completed
        #expect(Array(completed.prefix(3)) == [1, 2, 3], "\(completed)")
        #expect(completed.last == 5)
        #expect(zip(completed, completed.dropFirst()).allSatisfy { $0 < $1 }, "no change twice, none out of order: \(completed)")
        #expect(seen.snapshots == 1, "resumed, not restarted")
        let ids = seen.eventIDs
        #expect(Set(ids).count == ids.count, "no event id twice: \(ids)")
        #expect(seen.error == nil)
    }

    /// A reader that stops taking events closes its connection: the daemon counts no
    /// subscriber once the loop is left.
    @Test func leavingTheLoopClosesTheStream() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        _ = try await client.register(TaskRegistration(id: "t", name: "Watched"))
        for try await event in client.events() {
            if case .snapshot(let tasks, _) = event {
                #expect(tasks.map(\.id) == ["t"])
                break
            }
        }
        #expect(await eventually(300) {
            (try? TestHTTPClient(port: daemon.port).request("GET", "/metrics").text.contains("\nheadway_event_subscribers 0\n")) == true
        })
    }

    @Test func theEventStreamOfAnUnreachableServerFails() async throws {
        let daemon = try RestartableDaemon()
        let client = daemon.client
        daemon.remove()
        do {
            for try await _ in client.events() { Issue.record("an event from a stopped daemon") }
            Issue.record("the stream ended without an error")
        } catch {
            guard case .unreachable = error else { throw error }
        }
    }
}

/// The events a test's reader has taken.
final class EventLog: @unchecked Sendable {  // `events` and `error` only under `lock`
    private let lock = NSLock()
    private var events: [HeadwayEvent] = []
    private(set) var error: HeadwayError? {
        get { lock.withLock { storedError } }
        set { lock.withLock { storedError = newValue } }
    }
    private var storedError: HeadwayError?

    func append(_ event: HeadwayEvent) { lock.withLock { events.append(event) } }
    func fail(_ error: HeadwayError) { self.error = error }

    var snapshots: Int {
        lock.withLock { events.filter { if case .snapshot = $0 { true } else { false } }.count }
    }

    /// `completed` of each `task.updated` event, in order.
    var completed: [Int64] {
        lock.withLock {
            events.compactMap { event -> Int64? in
                if case .task(.updated, let task, _) = event { return task.completed }
                return nil
            }
        }
    }

    var finished: Bool {
        lock.withLock { events.contains { if case .task(.finished, _, _) = $0 { true } else { false } } }
    }

    var eventIDs: [String] { lock.withLock { events.map(\.eventID) } }
}
