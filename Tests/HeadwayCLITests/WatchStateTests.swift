import HeadwayCLI
import HeadwayClient
import HeadwayCore
import Testing

/// What `headway watch` keeps from the events: order, frame counters, the end of a wait.
@Suite struct WatchStateTests {
    func event(_ name: String, _ data: String) -> SSEParser.Event {
        SSEParser.Event(name: name, data: data, lastEventID: "1")
    }

    func task(_ json: String) throws -> TaskView {
        let value = try #require(JSONValue.parse(Array(json.utf8)))
        return try #require(TaskView(json: value))
    }

    @Test func eventsBuildTheTableAndBumpFramesOnSignals() {
        var state = WatchState()
        state.apply(event("snapshot", #"{"tasks":[{"id":"a","name":"A","state":"running"}]}"#))
        #expect(state.ordered.map(\.id) == ["a"])
        #expect(state.frames["a"] == nil, "a snapshot is no signal")
        state.apply(event("task.created", #"{"id":"b","name":"B","state":"running"}"#))
        state.apply(event("task.updated", #"{"id":"a","name":"A","state":"running","label":"x"}"#))
        state.apply(event("task.updated", #"{"id":"a","name":"A","state":"running","label":"y"}"#))
        state.apply(event("task.stalled", #"{"id":"a","name":"A","state":"running","stalled":true}"#))
        #expect(state.ordered.map(\.id) == ["a", "b"])
        #expect(state.frames == ["a": 2, "b": 1], "a stall does not move the glyph")
        state.apply(event("task.deleted", #"{"id":"b"}"#))
        #expect(state.ordered.map(\.id) == ["a"])
        #expect(state.apply(event("task.updated", "not json")).isEmpty)
    }

    @Test func finishedStatusWaitsForEveryTaskAndNamedOnes() {
        var state = WatchState(awaited: ["a", "c"])
        #expect(state.finishedStatus == nil, "nothing seen yet")
        state.apply(event("task.finished", #"{"id":"a","name":"A","state":"succeeded"}"#))
        #expect(state.finishedStatus == nil, "c has not appeared")
        state.apply(event("task.created", #"{"id":"c","name":"C","state":"running"}"#))
        #expect(state.finishedStatus == nil)
        state.apply(event("task.finished", #"{"id":"c","name":"C","state":"canceled"}"#))
        #expect(state.finishedStatus == 5)
        state.apply(event("task.finished", #"{"id":"d","name":"D","state":"failed"}"#))
        #expect(state.finishedStatus == 4)
    }

    /// A named task that finished before the watch began is kept beside every snapshot
    /// (which holds only tasks finished in the last minute), so `--until-done` ends.
    @Test func tasksFinishedBeforeTheWatchOutliveSnapshots() throws {
        let old = try task(#"{"id":"old","name":"Old","state":"failed"}"#)
        var state = WatchState(awaited: ["old", "new"], finishedBefore: [old])
        state.apply(event("snapshot", #"{"tasks":[{"id":"new","name":"New","state":"running"}]}"#))
        #expect(state.ordered.map(\.id) == ["new", "old"])
        #expect(state.finishedStatus == nil)
        state.apply(event("task.finished", #"{"id":"new","name":"New","state":"succeeded"}"#))
        #expect(state.finishedStatus == 4, "the old task failed")
        state.apply(event("snapshot", #"{"tasks":[]}"#))
        #expect(state.ordered.map(\.id) == ["old"], "a fresh snapshot after a long outage keeps it too")
    }

    /// A named task deleted while watched is remembered: `--until-done` cannot end well.
    @Test func deletionOfANamedTaskIsRemembered() {
        var state = WatchState(awaited: ["a"])
        state.apply(event("task.created", #"{"id":"b","name":"B","state":"running"}"#))
        state.apply(event("task.deleted", #"{"id":"b"}"#))
        #expect(state.deletedAwaited.isEmpty, "b was not named")
        state.apply(event("task.created", #"{"id":"a","name":"A","state":"running"}"#))
        state.apply(event("task.deleted", #"{"id":"a"}"#))
        #expect(state.deletedAwaited == ["a"])
    }

    /// Failed (and stalled) tasks first, then the unfinished, then the rest, each in order
    /// of appearance; more tasks than rows: the rest counted by state.
    @Test func fittingAFrameKeepsTroubleFirstAndCountsTheRest() throws {
        let tasks = try [("a", "succeeded"), ("b", "running"), ("c", "failed"), ("d", "running"), ("e", "succeeded")]
            .map { try task(#"{"id":"\#($0.0)","name":"N","state":"\#($0.1)"}"#) }
        #expect(WatchState.fit(tasks, rows: 5).shown.map(\.id) == ["c", "b", "d", "a", "e"])
        #expect(WatchState.fit(tasks, rows: 5).hidden.isEmpty)
        let three = WatchState.fit(tasks, rows: 3)
        #expect(three.shown.map(\.id) == ["c", "b", "d"], "the failed one, then both running ones")
        #expect(WatchState.hiddenLine(three.hidden) == "… 2 more: 2 succeeded")
        #expect(WatchState.fit(tasks, rows: 1).shown.map(\.id) == ["c"])
        #expect(WatchState.fit(tasks, rows: -4).shown.count == 1, "at least one row")
    }

    /// Usage errors exit 64; a server that cannot be reached at the start exits 69.
    @Test func usageAndUnreachable() throws {
        let usage = try headway("watch", "--min-duration", "90000")
        #expect(usage.status == 64)
        #expect(usage.errors.hasPrefix("headway: --min-duration must be between 0 and 86400\n"))
        let unreachable = try headway("watch", "a", "b", "--server", "http://127.0.0.1:\(unusedPort())")
        #expect(unreachable.status == 69, "\(unreachable.errors)")
        #expect(unreachable.errors.hasPrefix("headway: cannot reach http://127.0.0.1:"))
    }
}
