import Testing
@testable import HeadwayCore

/// The accuracy rules, driven by an injected clock.
@Suite struct TaskRulesTests {
    let clock = ManualClock()

    private func task(total: Int64? = 100, completed: Int64 = 0, state: TaskState = .running) throws -> TaskRecord {
        var task = try TaskRules.register(Registration(id: "t", name: "Task", state: state, total: total),
                                          id: "t", now: clock.now(), defaultStallTimeoutSeconds: 30)
        task.completed = completed
        return task
    }

    private func problem(_ body: () throws -> Void) -> TaskError? {
        do {
            try body()
            return nil
        } catch {
            return error as? TaskError
        }
    }

    @Test func registrationSetsServerFields() throws {
        let task = try task()
        #expect(task.state == .running)
        #expect(task.mode == .quantified)
        #expect(task.fraction == 0)
        #expect(task.createdAt == clock.now())
        #expect(task.stallTimeoutMilliseconds == 30_000)
        #expect(task.lastProgressAt == nil)
        let indeterminate = try self.task(total: nil)
        #expect(indeterminate.mode == .indeterminate)
        #expect(indeterminate.fraction == nil)
    }

    @Test func registrationRefusesCompletedAboveTotal() {
        let error = problem {
            _ = try TaskRules.register(Registration(name: "x", completed: 5, total: 4), id: "t", now: 0,
                                       defaultStallTimeoutSeconds: 30)
        }
        #expect(error == .completedExceedsTotal(completed: 5, total: 4))
        #expect(error?.code == "completed_exceeds_total")
    }

    @Test func repeatedRegistrationIsIdempotentOrConflicts() throws {
        let original = Registration(id: "t", name: "Task", total: 100)
        let task = try TaskRules.register(original, id: "t", now: 0, defaultStallTimeoutSeconds: 30)
        #expect(try TaskRules.reregister(original, existing: task) == task)
        let error = problem { _ = try TaskRules.reregister(Registration(id: "t", name: "Other"), existing: task) }
        #expect(error == .registrationConflict("t"))
        #expect(error?.code == "task_conflict")
    }

    @Test func progressAppliesAbsoluteAndIncrement() throws {
        clock.advance(by: 1500)
        let first = try TaskRules.progress(ProgressUpdate(completed: 40, label: "Copying"), to: task(), now: clock.now())
        #expect(first.task.completed == 40)
        #expect(first.task.fraction == 0.4)
        #expect(first.task.label == "Copying")
        #expect(first.task.lastProgressAt == clock.now())
        let second = try TaskRules.progress(ProgressUpdate(increment: 5), to: first.task, now: clock.now())
        #expect(second.task.completed == 45)
    }

    @Test func progressNeverRegresses() throws {
        let error = problem { _ = try TaskRules.progress(ProgressUpdate(completed: 9), to: task(completed: 10), now: 0) }
        #expect(error == .progressRegression(id: "t", completed: 10, requested: 9))
        #expect(error?.code == "progress_regression")
    }

    @Test func completedNeverExceedsTotal() throws {
        #expect(problem { _ = try TaskRules.progress(ProgressUpdate(completed: 101), to: task(), now: 0) }?.code
            == "completed_exceeds_total")
        #expect(problem { _ = try TaskRules.progress(ProgressUpdate(increment: 11), to: task(completed: 90), now: 0) }?.code
            == "completed_exceeds_total")
        #expect(problem { _ = try TaskRules.progress(ProgressUpdate(total: 9), to: task(completed: 10), now: 0) }?.code
            == "total_below_completed")
        // total may change while it stays at or above completed
        let grown = try TaskRules.progress(ProgressUpdate(completed: 150, total: 200), to: task(completed: 10), now: 0)
        #expect(grown.task.total == 200)
        let shrunk = try TaskRules.progress(ProgressUpdate(total: 10), to: task(completed: 10), now: 0)
        #expect(shrunk.task.fraction == 1)
    }

    @Test func incrementCannotOverflowTheCount() throws {
        let error = problem {
            _ = try TaskRules.progress(ProgressUpdate(increment: Limits.maxCount), to: task(total: nil, completed: 1), now: 0)
        }
        #expect(error?.code == "count_out_of_range")
    }

    @Test func completedAndIncrementAreExclusive() throws {
        let error = problem { _ = try TaskRules.progress(ProgressUpdate(completed: 1, increment: 1), to: task(), now: 0) }
        #expect(error == .completedAndIncrement)
        #expect(error?.code == "completed_and_increment")
    }

    @Test func repeatedSeqIsAcknowledgedNotApplied() throws {
        let applied = try TaskRules.progress(ProgressUpdate(increment: 5, runnerSeq: 3), to: task(), now: 0)
        #expect(applied.task.completed == 5)
        #expect(applied.task.lastRunnerSeq == 3)
        for seq: Int64 in [3, 2] {
            let repeated = try TaskRules.progress(ProgressUpdate(increment: 5, runnerSeq: seq), to: applied.task, now: 0)
            #expect(repeated == .unchanged(applied.task))
        }
        let next = try TaskRules.progress(ProgressUpdate(increment: 5, runnerSeq: 4), to: applied.task, now: 0)
        #expect(next.task.completed == 10)
        let heartbeat = try TaskRules.heartbeat(Heartbeat(runnerSeq: 4), to: next.task, now: 0)
        #expect(heartbeat == .unchanged(next.task))
    }

    @Test func pendingBecomesRunningAtFirstSignal() throws {
        let pending = try task(state: .pending)
        #expect(pending.state == .pending)
        #expect(try TaskRules.progress(ProgressUpdate(increment: 1), to: pending, now: 0).task.state == .running)
        #expect(try TaskRules.heartbeat(Heartbeat(), to: pending, now: 0).task.state == .running)
    }

    @Test func heartbeatIsASignalWithoutProgress() throws {
        clock.advance(by: 5000)
        let beat = try TaskRules.heartbeat(Heartbeat(label: "Waiting for lock"), to: task(), now: clock.now())
        #expect(beat.task.lastSignalAt == clock.now())
        #expect(beat.task.lastProgressAt == nil)
        #expect(beat.task.label == "Waiting for lock")
    }

    @Test func finishedTasksAcceptNoMoreProgress() throws {
        let finished = try TaskRules.finish(Finish(outcome: .failed, message: "disk full"), task: task(), now: 7).task
        #expect(finished.state == .failed)
        #expect(finished.finishedAt == 7)
        #expect(finished.message == "disk full")
        #expect(problem { _ = try TaskRules.progress(ProgressUpdate(increment: 1), to: finished, now: 8) }?.code == "task_finished")
        #expect(problem { _ = try TaskRules.heartbeat(Heartbeat(), to: finished, now: 8) } == .taskFinished(id: "t", state: .failed))
        #expect(problem { _ = try TaskRules.requestCancel(finished, now: 8) }?.code == "task_finished")
    }

    @Test func finishingAgainIsANoOpOrAConflict() throws {
        let finished = try TaskRules.finish(Finish(outcome: .succeeded), task: task(), now: 7).task
        #expect(try TaskRules.finish(Finish(outcome: .succeeded), task: finished, now: 9) == .unchanged(finished))
        let error = problem { _ = try TaskRules.finish(Finish(outcome: .failed), task: finished, now: 9) }
        #expect(error == .outcomeConflict(id: "t", state: .succeeded, requested: .failed))
        #expect(error?.code == "outcome_conflict")
    }

    @Test func successCompletesAQuantifiedTask() throws {
        let finished = try TaskRules.finish(Finish(outcome: .succeeded), task: task(completed: 60), now: 7).task
        #expect(finished.completed == 100)
        #expect(finished.fraction == 1)
        let failed = try TaskRules.finish(Finish(outcome: .failed), task: task(completed: 60), now: 7).task
        #expect(failed.completed == 60)
        let indeterminate = try TaskRules.finish(Finish(outcome: .succeeded), task: task(total: nil), now: 7).task
        #expect(indeterminate.fraction == nil)
    }

    @Test func emptyTaskIsCompleteOnlyWhenSucceeded() throws {
        let empty = try task(total: 0)
        #expect(empty.fraction == 0)
        #expect(try TaskRules.finish(Finish(outcome: .succeeded), task: empty, now: 1).task.fraction == 1)
    }

    @Test func cancelIsRecordedOnce() throws {
        let requested = try TaskRules.requestCancel(task(), now: 3)
        #expect(requested.task.cancelRequested)
        #expect(try TaskRules.requestCancel(requested.task, now: 4) == .unchanged(requested.task))
        // the runner then finishes with canceled
        #expect(try TaskRules.finish(Finish(outcome: .canceled), task: requested.task, now: 5).task.state == .canceled)
    }

    @Test func taskJSONHasEveryDocumentedField() throws {
        let json = try task().json
        for field in ["id", "name", "label", "parent_id", "weight", "state", "mode", "completed", "total", "unit",
                      "fraction", "rate", "eta_seconds", "stalled", "stall_reason", "stalled_since",
                      "stall_timeout_seconds", "progress_timeout_seconds", "cancel_requested", "created_at",
                      "updated_at", "last_progress_at", "finished_at", "message", "metadata"] {
            #expect(json.contains("\"\(field)\":"), "missing \(field)")
        }
    }

    /// A new child is refused under a finished parent, at the deepest level, and past the
    /// most unfinished children a parent may have; one short of each limit is accepted, and
    /// finished children do not count.
    @Test func newChildrenRespectTheTreeLimits() throws {
        let limits = TreeLimits(maximumDepth: 3, maximumChildren: 2)
        var parent = try task()
        parent.depth = 2
        parent.children = ChildrenCounts(running: 1, succeeded: 5, failed: 3)
        #expect(problem { try TaskRules.checkNewChild(of: parent, limits: limits) } == nil)
        parent.depth = 3
        #expect(problem { try TaskRules.checkNewChild(of: parent, limits: limits) } == .treeTooDeep(parentID: "t", maximumDepth: 3))
        parent.depth = 2
        parent.children = ChildrenCounts(pending: 1, running: 1)
        #expect(problem { try TaskRules.checkNewChild(of: parent, limits: limits) }
                == .tooManyChildren(parentID: "t", maximumChildren: 2))
        parent.children = ChildrenCounts()
        parent.state = .failed
        #expect(problem { try TaskRules.checkNewChild(of: parent, limits: limits) } == .parentFinished("t"))
    }

    /// A change below that moves no share only signals an ancestor: its signal time moves,
    /// quietly while the signal it last published is under `signalPublishInterval` old,
    /// then as a change; an ancestor that heard a signal this recent is unchanged.
    @Test func aRollUpStepWithoutMovementIsOnlyASignal() throws {
        // Without a total of its own: its fraction is its children's mean.
        let parent = try task(total: nil)
        let nothing = ChildrenChange()
        clock.advance(by: 500)
        guard case .quiet(let signalled) = TaskRules.rollUpStep(parent, nothing, isSignal: true, now: clock.now()) else {
            Issue.record("expected a quiet signal")
            return
        }
        #expect(signalled.lastSignalAt == clock.now())
        #expect(signalled.updatedAt == parent.updatedAt)
        #expect(TaskRules.rollUpStep(signalled, nothing, isSignal: true, now: clock.now()) == .unchanged)
        #expect(TaskRules.rollUpStep(signalled, nothing, isSignal: false, now: clock.now() + 5_000) == .unchanged)
        clock.advance(by: 500)
        guard case .changed(let published) = TaskRules.rollUpStep(signalled, nothing, isSignal: true, now: clock.now()) else {
            Issue.record("a second after the last published signal, the signal shows")
            return
        }
        #expect(published.lastSignalAt == clock.now() && published.updatedAt == clock.now())
        var moves = ChildrenChange()
        moves.weight = 1
        moves.done = 0.5
        guard case .changed(let moved) = TaskRules.rollUpStep(parent, moves, isSignal: true, now: clock.now()) else {
            Issue.record("expected a change")
            return
        }
        #expect(moved.fraction == 0.5)
        let pending = try task(state: .pending)
        guard case .changed(let started) = TaskRules.rollUpStep(pending, nothing, isSignal: true, now: clock.now()) else {
            Issue.record("a pending parent starts with its child's signal")
            return
        }
        #expect(started.state == .running)
    }
}
