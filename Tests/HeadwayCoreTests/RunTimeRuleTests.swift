import Testing
@testable import HeadwayCore

private let start: EpochMilliseconds = 1_800_000_000_000

/// Registers a task at `start` from a JSON body, as the store would.
private func registered(_ body: String, now: EpochMilliseconds = start) throws -> TaskRecord {
    let registration = try Registration.parse(JSONValue.parse(Array(body.utf8)) ?? .null)
    return try TaskRules.register(registration, id: "t", now: now, defaultStallTimeoutSeconds: 30)
}

/// The `field` of a refusal of `body` at registration, with its code.
private func refusal(_ body: String, now: EpochMilliseconds = start) -> (code: String, fields: [String])? {
    do {
        _ = try registered(body, now: now)
        return nil
    } catch let error as TaskError {
        if case .invalidRequest(let errors) = error { return (error.code, errors.map(\.field)) }
        return (error.code, [])
    } catch {
        return nil
    }
}

@Suite struct RunTimeRuleTests {
    @Test func expectedSecondsCountFromTheStartNotFromTheRegistration() throws {
        var task = try registered(#"{"name":"Queued","state":"pending","expected_seconds":60}"#)
        #expect(RunTimeRule.dueAt(task) == nil, "a pending task has not started: its queue time is not its run")
        #expect(RunTimeRule.apply(to: &task, now: start + 3_600_000) == nil)
        let started = try #require(try? TaskRules.heartbeat(Heartbeat(), to: task, now: start + 600_000).task)
        #expect(started.overdueAt == start + 660_000, "due a full expected run after the first start")
        task = started
        #expect(RunTimeRule.apply(to: &task, now: start + 659_999) == nil)
        #expect(!task.overdue)
        #expect(RunTimeRule.apply(to: &task, now: start + 700_000) == .overdue)
        #expect(task.overdue && task.overdueSince == start + 660_000, "overdue since the due moment, not since the sweep")
        #expect(task.overdueAt == nil, "nothing more for the sweeper")
        #expect(RunTimeRule.apply(to: &task, now: start + 800_000) == nil, "raised once")
    }

    @Test func theEarlierOfDeadlineAndExpectedRunIsTheDueMoment() throws {
        let deadline = start + 30_000
        let body = #"{"name":"Both","expected_seconds":60,"deadline":"\#(Timestamp.rfc3339(deadline))"}"#
        var task = try registered(body)
        #expect(RunTimeRule.dueAt(task) == deadline)
        #expect(RunTimeRule.apply(to: &task, now: deadline - 1) == nil)
        #expect(RunTimeRule.apply(to: &task, now: deadline) == .overdue)
        #expect(task.overdueSince == deadline)
        let pending = try registered(#"{"name":"Queued","state":"pending","deadline":"\#(Timestamp.rfc3339(deadline))"}"#)
        #expect(RunTimeRule.sweepAt(pending) == deadline, "a deadline holds for a pending task too")
    }

    @Test func aFinishedTaskIsNeverNewlyFlaggedButKeepsItsFlag() throws {
        var task = try registered(#"{"name":"Job","expected_seconds":10}"#)
        let done = try TaskRules.finish(Finish(outcome: .succeeded), task: task, now: start + 5_000).task
        #expect(done.overdueAt == nil)
        var finished = done
        #expect(RunTimeRule.apply(to: &finished, now: start + 60_000) == nil)
        #expect(!finished.overdue)

        #expect(RunTimeRule.apply(to: &task, now: start + 10_000) == .overdue)
        let late = try TaskRules.finish(Finish(outcome: .succeeded), task: task, now: start + 20_000).task
        #expect(late.overdue && late.overdueSince == start + 10_000, "a task that ran late still says so once it succeeded")
    }

    @Test func onlyASuccessSoonerThanMinSecondsIsTooQuick() throws {
        let task = try registered(#"{"name":"Backup","min_seconds":60}"#)
        let quick = try TaskRules.finish(Finish(outcome: .succeeded), task: task, now: start + 3_000).task
        #expect(quick.tooQuick)
        let failed = try TaskRules.finish(Finish(outcome: .failed), task: task, now: start + 3_000).task
        #expect(!failed.tooQuick, "a failure is not judged by its length")
        let honest = try TaskRules.finish(Finish(outcome: .succeeded), task: task, now: start + 60_000).task
        #expect(!honest.tooQuick, "exactly min_seconds is long enough")
        let plain = try registered(#"{"name":"Plain"}"#)
        #expect(try !TaskRules.finish(Finish(outcome: .succeeded), task: plain, now: start + 1).task.tooQuick)
    }

    @Test func aTaskThatNeverReportedAStartIsMeasuredFromItsRegistration() throws {
        let pending = try registered(#"{"name":"Queued","state":"pending","min_seconds":60}"#)
        #expect(try TaskRules.finish(Finish(outcome: .succeeded), task: pending, now: start + 59_999).task.tooQuick)
        #expect(try !TaskRules.finish(Finish(outcome: .succeeded), task: pending, now: start + 60_000).task.tooQuick)
        let started = try TaskRules.heartbeat(Heartbeat(), to: pending, now: start + 50_000).task
        #expect(try TaskRules.finish(Finish(outcome: .succeeded), task: started, now: start + 100_000).task.tooQuick,
                "once started, the run counts from its start")
    }

    @Test func badRunTimeFieldsAreRefusedWithTheirField() {
        for (body, field) in [
            (#"{"name":"x","expected_seconds":0}"#, "expected_seconds"),
            (#"{"name":"x","expected_seconds":-5}"#, "expected_seconds"),
            (#"{"name":"x","expected_seconds":1e12}"#, "expected_seconds"),
            (#"{"name":"x","expected_seconds":"60"}"#, "expected_seconds"),
            (#"{"name":"x","min_seconds":0}"#, "min_seconds"),
            (#"{"name":"x","min_seconds":40000000}"#, "min_seconds"),
            (#"{"name":"x","expected_seconds":60,"min_seconds":60}"#, "min_seconds"),
            (#"{"name":"x","deadline":"tomorrow"}"#, "deadline"),
            (#"{"name":"x","deadline":"2027-02-30T00:00:00Z"}"#, "deadline"),
            (#"{"name":"x","deadline":"2027-01-15T10:00:00"}"#, "deadline"),
            (#"{"name":"x","deadline":1800000000}"#, "deadline"),
        ] {
            let refused = refusal(body)
            #expect(refused?.code == "invalid_request", "\(body)")
            #expect(refused?.fields == [field], "\(body)")
        }
    }

    @Test func aDeadlineInThePastOrAbsurdlyFarIsRefused() {
        for deadline in [start, start - 1, start + Limits.deadlineHorizonMilliseconds + 1] {
            let refused = refusal(#"{"name":"x","deadline":"\#(Timestamp.rfc3339(deadline))"}"#)
            #expect(refused?.code == "deadline_out_of_range", "\(Timestamp.rfc3339(deadline))")
        }
        #expect(refusal(#"{"name":"x","deadline":"\#(Timestamp.rfc3339(start + 1))"}"#) == nil)
    }

    @Test func theSameDeadlineWrittenWithAnotherOffsetIsTheSameDefinition() throws {
        let utc = try Registration.parse(JSONValue.parse(Array(#"{"name":"x","deadline":"2027-01-15T10:00:00Z"}"#.utf8)) ?? .null)
        let seoul = try Registration.parse(
            JSONValue.parse(Array(#"{"name":"x","deadline":"2027-01-15T19:00:00.000+09:00"}"#.utf8)) ?? .null)
        #expect(utc.deadline == seoul.deadline)
        #expect(utc.definition == seoul.definition)
    }
}
