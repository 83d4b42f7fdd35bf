import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Daemon
@testable import HeadwayAPI

/// `GET /v1/events` against the real daemon, read with a raw-socket SSE client.
@Suite(.serialized) struct EventStreamTests {
    /// Reads the snapshot a fresh subscriber gets first (with `retry:`).
    private func snapshot(_ client: TestSSEClient) throws -> (id: Int64, tasks: [[String: Any]]) {
        let snapshot = try #require(try client.nextEvent())
        #expect(snapshot.event == "snapshot")
        #expect(snapshot.retry == 3000)
        return (try #require(snapshot.id.flatMap { Int64($0) }), snapshot.json["tasks"] as? [[String: Any]] ?? [])
    }

    @Test func snapshotFirstThenOneEventPerChangeInOrder() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"before","name":"Before"}"#)
        let client = try daemon.subscribe()
        #expect(client.status == 200)
        #expect(client.headers["content-type"] == "text/event-stream; charset=utf-8")
        #expect(client.headers["cache-control"] == "no-cache")
        #expect(client.headers["x-accel-buffering"] == "no")
        let (snapshotID, tasks) = try snapshot(client)
        #expect(tasks.map { $0["id"] as? String } == ["before"])

        try daemon.register(#"{"id":"t","name":"Copy","total":4}"#)
        try daemon.request("POST", "/v1/tasks/t/progress", json: #"{"completed":1}"#)
        try daemon.request("POST", "/v1/tasks/t/heartbeat", json: #"{"label":"Still copying"}"#)
        try daemon.request("POST", "/v1/tasks/t/cancel")
        try daemon.request("POST", "/v1/tasks/t/finish", json: #"{"outcome":"canceled"}"#)
        try daemon.request("POST", "/v1/tasks/t/progress", json: #"{"completed":2}"#)  // refused: no event
        try daemon.request("DELETE", "/v1/tasks/t")
        let events = try client.events { $0.event == "task.deleted" }
        #expect(events.map(\.event) == ["task.created", "task.updated", "task.updated", "task.cancel_requested",
                                        "task.finished", "task.deleted"])
        let ids = events.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids.count == events.count)
        #expect(ids == (1...Int64(events.count)).map { snapshotID + $0 }, "ids follow the snapshot's, one per change")
        #expect(events[1].json["completed"] as? Int == 1)
        #expect(events[2].json["label"] as? String == "Still copying")
        #expect(events[3].json["cancel_requested"] as? Bool == true)
        #expect(events[4].json["state"] as? String == "canceled")
        #expect(events[5].data == #"{"id":"t"}"#)
    }

    /// A subscriber that keeps up sees every change, even when they reach the broker all at
    /// once; only a backlog past the bound is coalesced (to each task's latest).
    /// HTTP/1.1 streams are chunked and written straight to their sockets; HTTP/1.0
    /// streams are not chunked and go through libmicrohttpd; a request head too large
    /// for the stream daemon's small buffers is served by the request daemon. All carry
    /// the same events.
    @Test func streamsWorkOverEveryHTTPVersionConnectionModeAndHeadSize() throws {
        let daemon = try LiveDaemon()
        let clients = [
            try TestSSEClient(port: daemon.application.port),
            try TestSSEClient(port: daemon.application.port, httpVersion: "HTTP/1.0"),
            try TestSSEClient(port: daemon.application.port, headers: [("Connection", "close")]),
            try TestSSEClient(port: daemon.application.port, headers: [("Cookie", String(repeating: "c", count: 3000))]),
        ]
        #expect(clients.map { $0.headers["transfer-encoding"] } == ["chunked", nil, "chunked", "chunked"])
        for client in clients { _ = try snapshot(client) }
        try daemon.register(#"{"id":"v","name":"Versions","total":3}"#)
        for completed in 1...3 { try daemon.request("POST", "/v1/tasks/v/progress", json: #"{"completed":\#(completed)}"#) }
        for client in clients {
            let events = try client.events { $0.json["completed"] as? Int == 3 }
            #expect(events.map(\.event) == ["task.created", "task.updated", "task.updated", "task.updated"])
        }
        daemon.application.shutdown()
        for client in clients { #expect(try client.remainingEvents().isEmpty) }
    }

    /// The heaviest head the stream daemon takes — 1 KiB, 8 query parameters and 24 header
    /// lines, weighing 3,063 of the 3,072 its 4 KiB of connection memory leave
    /// (`HeadScreen.weight`) — is served there, and its events arrive.
    @Test func theHeaviestStreamHeadFitsTheStreamDaemonsMemory() throws {
        let daemon = try LiveDaemon()
        let tasks = (1...8).map { "task=t\($0)" }.joined(separator: "&")
        let padding = (10..<32).map { ("X-Pad-\($0)", String(repeating: "p", count: 28)) }
        let client = try TestSSEClient(port: daemon.application.port, path: "/v1/events?\(tasks)", headers: padding)
        #expect(client.status == 200)
        #expect(client.headers["transfer-encoding"] == "chunked")
        _ = try snapshot(client)
        try daemon.register(#"{"id":"t8","name":"Heavy"}"#)
        #expect(try client.events { $0.json["id"] as? String == "t8" }.last?.event == "task.created")
    }

    /// During an update storm fan-out pauses between rounds; whatever waits for a pause,
    /// the task's latest state always arrives, in order, ids increasing. How many events
    /// arrive depends on how fast requests come compared with the pauses, so the count is
    /// proven where time is given, not measured: `FanOutRoundTests` (a round after a pause
    /// carries each task's latest) and `EventBrokerTests` (the broker's thread does so).
    @Test func eventsThatWaitForAPauseArriveInOrderEndingWithTheLatest() throws {
        let daemon = try LiveDaemon { configuration in
            // Every round counts as long and pressed: the pause is 100 times its length
            // (a round slowed to 50 ms on a busy machine still pauses within the client's
            // 5 s read timeout).
            configuration.broker.pacing = FanOutPacing(threshold: 0, minimumWaiting: 1, factor: 100)
        }
        try daemon.register(#"{"id":"storm","name":"Storm","total":100}"#)
        let client = try daemon.subscribe("?task=storm")
        _ = try snapshot(client)
        for _ in 0..<100 { try daemon.request("POST", "/v1/tasks/storm/progress", json: #"{"increment":1}"#) }
        let events = try client.events { $0.json["completed"] as? Int == 100 }
        #expect((1...100).contains(events.count))
        let ids = events.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids.count == events.count && ids == ids.sorted() && Set(ids).count == ids.count)
        let completed = events.compactMap { $0.json["completed"] as? Int }
        #expect(completed == completed.sorted())
    }

    /// One round's events for a subscriber go out as one chunk, here larger than 64 KiB
    /// (a five-digit chunk size), and arrive whole.
    @Test func aLargeRoundArrivesWhole() throws {
        let daemon = try LiveDaemon()
        let metadata = #"{"blob":""# + String(repeating: "m", count: 4000) + #""}"#
        for index in 0..<20 { try daemon.register(#"{"id":"big\#(index)","name":"Big","metadata":\#(metadata)}"#) }
        let client = try daemon.subscribe()
        _ = try snapshot(client)
        try daemon.register(#"{"id":"warm","name":"Warm"}"#)
        _ = try client.events { $0.json["id"] as? String == "warm" }
        daemon.application.pauseEventStream(true)
        for index in 0..<20 { try daemon.request("POST", "/v1/tasks/big\(index)/heartbeat", json: #"{"label":"round"}"#) }
        daemon.application.pauseEventStream(false)
        let events = try client.events { $0.json["id"] as? String == "big19" }
        #expect(events.map { $0.json["id"] as? String } == (0..<20).map { "big\($0)" })
        #expect(events.allSatisfy { ($0.json["metadata"] as? [String: Any])?["blob"] as? String == String(repeating: "m", count: 4000) })
    }

    /// A top-level task registered and finished while the broker is behind (its events
    /// coalesced) reaches the page of roots (`new_roots`) as `task.created`, in its latest
    /// state; streams of every task and of the task get its finish; a root registered
    /// after it comes after it on every stream.
    @Test func aRootRegisteredAndFinishedWhileTheBrokerIsBehindReachesNewRootsStreams() throws {
        let daemon = try LiveDaemon { $0.broker.coalescingBacklog = 1 }
        let clients = [try daemon.subscribe("?new_roots=true"), try daemon.subscribe(), try daemon.subscribe("?task=short")]
        for client in clients { _ = try snapshot(client) }
        daemon.application.pauseEventStream(true)
        try daemon.register(#"{"id":"short","name":"Short"}"#)
        try daemon.request("POST", "/v1/tasks/short/finish", json: #"{"outcome":"succeeded"}"#)
        daemon.application.pauseEventStream(false)
        try daemon.register(#"{"id":"after","name":"After"}"#)
        let heard = try zip(clients, ["after", "after", "short"]).map { client, last in
            try client.events { $0.json["id"] as? String == last }
        }
        let roots = heard[0].filter { $0.json["id"] as? String == "short" }
        #expect(roots.map(\.event) == ["task.created"], "the page of roots hears of it once, as a creation")
        #expect(roots.first?.json["state"] as? String == "succeeded", "in its latest state")
        #expect(heard[1].map(\.event) == ["task.finished", "task.created"], "every task: its finish, then the next root")
        #expect(heard[2].map(\.event) == ["task.finished"])
        #expect(roots.first?.id == heard[1].first?.id, "one change, one id")
    }

    @Test func everyChangeIsDeliveredUnlessTheBacklogPassesItsBound() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"fast","name":"Fast","total":5000}"#)
        let client = try daemon.subscribe("?task=fast")
        _ = try snapshot(client)
        daemon.application.pauseEventStream(true)
        for _ in 0..<200 { try daemon.request("POST", "/v1/tasks/fast/progress", json: #"{"increment":1}"#) }
        daemon.application.pauseEventStream(false)
        let all = try client.events { $0.json["completed"] as? Int == 200 }
        #expect(all.map { $0.json["completed"] as? Int } == (1...200).map { $0 }, "200 queued changes, 200 events")

        daemon.application.pauseEventStream(true)
        for _ in 0..<1100 { try daemon.request("POST", "/v1/tasks/fast/progress", json: #"{"increment":1}"#) }
        daemon.application.pauseEventStream(false)
        let behind = try client.events { $0.json["completed"] as? Int == 1300 }
        #expect(behind.count == 1, "a backlog of 1,100 changes of one task comes as its latest state")
    }

    @Test func resumingSendsEachChangedTaskOnceAtItsLatestStateThenLiveEvents() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"gone","name":"Gone"}"#)
        try daemon.register(#"{"id":"quiet","name":"Quiet"}"#)
        let first = try daemon.subscribe()
        let (lastSeen, _) = try snapshot(first)
        first.disconnect()

        try daemon.register(#"{"id":"x","name":"X","total":10}"#)
        for completed in 1...3 { try daemon.request("POST", "/v1/tasks/x/progress", json: #"{"completed":\#(completed)}"#) }
        try daemon.register(#"{"id":"y","name":"Y"}"#)
        try daemon.request("DELETE", "/v1/tasks/gone")

        for headers in [[("Last-Event-ID", "\(lastSeen)")], []] {
            let query = headers.isEmpty ? "?last_event_id=\(lastSeen)" : ""
            let resumed = try daemon.subscribe(query, headers: headers)
            let replayed = [try resumed.nextEvent(), try resumed.nextEvent(), try resumed.nextEvent()].compactMap { $0 }
            #expect(replayed.first?.retry == 3000)
            #expect(replayed.map(\.event) == ["task.updated", "task.created", "task.deleted"])
            #expect(replayed.map { $0.json["id"] as? String } == ["x", "y", "gone"])
            #expect(replayed[0].json["completed"] as? Int == 3, "the latest state, once")
            let replayedIDs = replayed.compactMap { $0.id.flatMap { Int64($0) } }
            #expect(replayedIDs == replayedIDs.sorted() && Set(replayedIDs).count == 3)
            try daemon.request("POST", "/v1/tasks/quiet/heartbeat")
            let live = try #require(try resumed.nextEvent())
            #expect(live.json["id"] as? String == "quiet")
            #expect(Int64(live.id ?? "") ?? 0 > replayedIDs.last!)
        }
    }

    @Test func anIdThatCannotBeResolvedGetsAFreshSnapshot() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"a","name":"A"}"#)
        let current = try snapshot(try daemon.subscribe()).id
        for lastID in ["garbage", "\(current + 1_000_000)", "-5", "0", ""] {
            let client = try daemon.subscribe(headers: [("Last-Event-ID", lastID)])
            let (id, tasks) = try snapshot(client)
            #expect(id == current, "Last-Event-ID \(lastID)")
            #expect(tasks.count == 1)
        }
    }

    @Test func filtersByTaskAndParent() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"p","name":"Parent"}"#)
        try daemon.register(#"{"id":"other","name":"Other"}"#)
        let byParent = try daemon.subscribe("?parent_id=p")
        let byTask = try daemon.subscribe("?task=other&task=p")
        #expect(try snapshot(byParent).tasks.isEmpty)
        #expect(Set(try snapshot(byTask).tasks.compactMap { $0["id"] as? String }) == ["p", "other"])
        try daemon.register(#"{"id":"c1","name":"Child","parent_id":"p"}"#)
        try daemon.request("POST", "/v1/tasks/other/heartbeat")
        try daemon.register(#"{"id":"c2","name":"Child 2","parent_id":"p"}"#)
        try daemon.request("POST", "/v1/tasks/p/heartbeat", json: #"{"label":"last"}"#)
        #expect(try byParent.events { $0.json["id"] as? String == "c2" }.map { $0.json["id"] as? String } == ["c1", "c2"])
        // A child's registration updates its parent too (roll-up); a broker that is behind may
        // coalesce those, so only the set and the last state are certain.
        let seenByTask = try byTask.events { $0.json["label"] as? String == "last" }
        #expect(Set(seenByTask.compactMap { $0.json["id"] as? String }) == ["p", "other"])
        for query in ["?task=bad%20id", "?min_duration=-1", "?min_duration=abc", "?colour=red", "?parent_id=a&parent_id=bad%20id"] {
            let refused = try daemon.subscribe(query)
            #expect(refused.status == 400, "\(query)")
            #expect(refused.errorBody.contains(#""code":"invalid_request""#))
        }
    }

    /// A dashboard with several parents open names each (`parent_id` repeated): their
    /// children come live and in a resumed catch-up, another parent's do not.
    @Test func followsTheChildrenOfSeveralParents() throws {
        let daemon = try LiveDaemon()
        for id in ["p", "q", "r"] { try daemon.register(#"{"id":"\#(id)","name":"Parent"}"#) }
        let stream = try daemon.subscribe("?parent_id=p&parent_id=q")
        let mark = try snapshot(stream).id
        for (child, parent) in [("pc", "p"), ("rc", "r"), ("qc", "q")] {
            try daemon.register(#"{"id":"\#(child)","name":"Child","parent_id":"\#(parent)"}"#)
        }
        #expect(try stream.events { $0.json["id"] as? String == "qc" }.map { $0.json["id"] as? String } == ["pc", "qc"])
        let resumed = try daemon.subscribe("?parent_id=q&parent_id=r&last_event_id=\(mark)")
        #expect(try resumed.events { $0.json["id"] as? String == "qc" }.map { $0.json["id"] as? String } == ["rc", "qc"])
    }

    /// `new_roots=true`: a page that follows its rows hears of every new top-level task (its
    /// creation only, live and in a resumed catch-up), not of children nor of others' updates.
    @Test func hearsOfNewTopLevelTasks() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"shown","name":"Shown"}"#)
        try daemon.register(#"{"id":"elsewhere","name":"Elsewhere"}"#)
        let stream = try daemon.subscribe("?task=shown&new_roots=true")
        let mark = try snapshot(stream).id
        try daemon.request("POST", "/v1/tasks/elsewhere/heartbeat", json: #"{"label":"unheard"}"#)
        try daemon.register(#"{"id":"fresh","name":"Fresh"}"#)
        try daemon.register(#"{"id":"child","name":"Child","parent_id":"elsewhere"}"#)
        try daemon.request("POST", "/v1/tasks/shown/heartbeat", json: #"{"label":"last"}"#)
        let seen = try stream.events { $0.json["label"] as? String == "last" }
        #expect(seen.map { "\($0.event ?? "") \($0.json["id"] as? String ?? "")" } == ["task.created fresh", "task.updated shown"])
        let resumed = try daemon.subscribe("?task=.&new_roots=true&last_event_id=\(mark)")
        #expect(try resumed.events { $0.json["id"] as? String == "fresh" }.map { $0.json["id"] as? String } == ["fresh"])
        let refused = try daemon.subscribe("?new_roots=maybe")
        #expect(refused.status == 400)
    }

    /// Subscribers arriving with the same query while nothing changed share one catch-up;
    /// a change, another query, or a finished task leaving the last minute means a fresh read.
    @Test func catchUpsAreSharedOnlyWhileTheyStillHold() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"done","name":"Done"}"#)
        try daemon.request("POST", "/v1/tasks/done/finish", json: #"{"outcome":"succeeded"}"#)
        try daemon.register(#"{"id":"open","name":"Open"}"#)
        let ids = { (client: TestSSEClient) in try self.snapshot(client).tasks.compactMap { $0["id"] as? String }.sorted() }

        #expect(try ids(daemon.subscribe()) == ["done", "open"])
        #expect(try ids(daemon.subscribe()) == ["done", "open"])
        #expect(daemon.application.recentCatchUps.hits == 1, "the second subscriber shared the first's snapshot")
        #expect(try ids(daemon.subscribe("?task=open")) == ["open"], "another query is read afresh")

        clock.advance(by: 59_000)
        #expect(try ids(daemon.subscribe()) == ["done", "open"])
        clock.advance(by: 2_000)
        #expect(try ids(daemon.subscribe()) == ["open"], "finished over a minute ago: no longer in a snapshot")

        try daemon.register(#"{"id":"new","name":"New"}"#)
        #expect(try ids(daemon.subscribe()) == ["new", "open"], "a change means a fresh snapshot")
        #expect(daemon.application.recentCatchUps.hits == 2)
    }

    @Test func minDurationHoldsYoungTasksAndNeverShowsShortOnes() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"old","name":"Old"}"#)
        clock.advance(by: 20_000)
        try daemon.register(#"{"id":"young","name":"Young"}"#)
        let client = try daemon.subscribe("?min_duration=10")
        #expect(try snapshot(client).tasks.map { $0["id"] as? String } == ["old"])
        try daemon.register(#"{"id":"short","name":"Short"}"#)
        try daemon.request("POST", "/v1/tasks/short/finish", json: #"{"outcome":"succeeded"}"#)
        try daemon.request("POST", "/v1/tasks/young/progress", json: #"{"increment":5}"#)
        try daemon.request("POST", "/v1/tasks/old/heartbeat")
        let oldEvent = try #require(try client.nextEvent())
        #expect(oldEvent.json["id"] as? String == "old", "young and short tasks are held back")

        clock.advance(by: 10_000)
        daemon.application.wakeEventStream()
        let released = try #require(try client.nextEvent())
        #expect(released.json["id"] as? String == "young")
        #expect(released.json["completed"] as? Int == 5, "released in its latest state")
        #expect(released.id == "\(oldEvent.id ?? "")-\(clock.now())",
                "a late release's id: the changes handed so far (ids stay increasing) and its time")
        try daemon.request("POST", "/v1/tasks/young/heartbeat")
        let after = try #require(try client.nextEvent())
        #expect(after.json["id"] as? String == "young")
        #expect(Int64(after.id ?? "") ?? 0 > Int64(oldEvent.id ?? "") ?? .max)
    }

    /// With `min_duration`, a new root a `new_roots` stream holds back is judged by its later
    /// changes too, which the stream does not otherwise follow: one that finishes sooner is
    /// never sent, one that lives is released in its latest state.
    @Test func newRootsHeldBackAreReleasedAtTheirLatestOrNever() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"shown","name":"Shown"}"#)
        clock.advance(by: 60_000)
        let client = try daemon.subscribe("?task=shown&new_roots=true&min_duration=10")
        _ = try snapshot(client)
        try daemon.register(#"{"id":"short","name":"Short"}"#)
        try daemon.register(#"{"id":"lives","name":"Lives","total":10}"#)
        try daemon.request("POST", "/v1/tasks/short/finish", json: #"{"outcome":"succeeded"}"#)
        try daemon.request("POST", "/v1/tasks/lives/progress", json: #"{"completed":4}"#)
        clock.advance(by: 10_000)
        daemon.application.wakeEventStream()
        let released = try #require(try client.nextEvent())
        #expect(released.json["id"] as? String == "lives")
        #expect(released.json["completed"] as? Int == 4, "released in its latest state")
        try daemon.request("POST", "/v1/tasks/shown/heartbeat")
        #expect(try client.nextEvent()?.json["id"] as? String == "shown", "the short one never came")
    }

    @Test func resumingWithMinDurationKeepsTasksThatWereHeldBack() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"anchor","name":"Anchor"}"#)
        clock.advance(by: 60_000)
        let client = try daemon.subscribe("?min_duration=10")
        _ = try snapshot(client)
        try daemon.register(#"{"id":"held","name":"Held"}"#)
        try daemon.request("POST", "/v1/tasks/anchor/heartbeat")
        let seen = try #require(try client.nextEvent())
        #expect(seen.json["id"] as? String == "anchor")
        client.disconnect()

        clock.advance(by: 15_000)
        let resumed = try daemon.subscribe("?min_duration=10", headers: [("Last-Event-ID", seen.id ?? "")])
        let held = try #require(try resumed.nextEvent())
        #expect(held.retry == 3000)
        #expect(held.json["id"] as? String == "held", "held back when the client left, old enough now")
        #expect(held.id == "\(seen.id ?? "")-\(clock.now())", "sent as a release")
    }

    /// A task the hold-back released after the client's last change, before the client
    /// left, is not sent again on resume: the release's id says when it was sent. A task
    /// still held when the client left is.
    @Test func resumingWithMinDurationAfterAReleaseSendsOnlyWhatWasStillHeld() throws {
        let clock = ManualClock()
        let daemon = try LiveDaemon(clock: clock)
        try daemon.register(#"{"id":"anchor","name":"Anchor"}"#)
        clock.advance(by: 60_000)
        let client = try daemon.subscribe("?min_duration=10")
        _ = try snapshot(client)
        try daemon.register(#"{"id":"released","name":"Released"}"#)
        clock.advance(by: 1_000)
        try daemon.request("POST", "/v1/tasks/anchor/heartbeat")
        let seen = try #require(try client.nextEvent())
        #expect(seen.json["id"] as? String == "anchor")
        clock.advance(by: 1_000)
        try daemon.register(#"{"id":"young","name":"Young"}"#)
        clock.advance(by: 8_000)
        daemon.application.wakeEventStream()
        let released = try #require(try client.nextEvent())
        #expect(released.json["id"] as? String == "released", "released while the client was there")
        // Its id: the changes handed so far ("young"'s creation, held) and the release time.
        let releaseID = (released.id ?? "").split(separator: "-").map(String.init)
        #expect(releaseID.count == 2 && releaseID.last == "\(clock.now())")
        #expect(Int64(releaseID.first ?? "") ?? 0 > Int64(seen.id ?? "") ?? .max)
        client.disconnect()

        // "young" came of age while the client was away: it is sent; "released" is not again.
        clock.advance(by: 5_000)
        let resumed = try daemon.subscribe("?min_duration=10", headers: [("Last-Event-ID", released.id ?? "")])
        try daemon.request("POST", "/v1/tasks/anchor/heartbeat")
        let first = try #require(try resumed.nextEvent())
        #expect(first.json["id"] as? String == "young", "held when the client left")
        let second = try #require(try resumed.nextEvent())
        #expect(second.json["id"] as? String == "anchor", "the released task is not sent again")
        #expect(Int64(second.id ?? "") ?? 0 > Int64(seen.id ?? "") ?? .max)
    }

    @Test func heartbeatCommentsKeepTheStreamAlive() throws {
        let daemon = try LiveDaemon(arguments: ["--sse-heartbeat", "0.2"])
        let client = try daemon.subscribe()
        _ = try snapshot(client)
        #expect(try client.next()?.isComment == true)
    }

    /// A client that hangs up is noticed at once (its socket's hang-up), not at the next
    /// heartbeat: its place is given back well before one is due.
    @Test func aSubscriberWhoseClientHangsUpIsLetGoAtOnce() throws {
        let daemon = try LiveDaemon(arguments: ["--sse-heartbeat", "60"])
        let client = try daemon.subscribe()
        _ = try snapshot(client)
        #expect(daemon.application.subscriberCount == 1)
        let closed = DispatchTime.now()
        client.disconnect()
        var polls = 0
        while daemon.application.subscriberCount > 0 && polls < 1000 {
            polls += 1
            usleep(2000)
        }
        let milliseconds = (DispatchTime.now().uptimeNanoseconds - closed.uptimeNanoseconds) / 1_000_000
        #expect(daemon.application.subscriberCount == 0, "still counted \(milliseconds) ms after the hang-up")
    }

    @Test func subscribersBeyondTheLimitGet503UntilAPlaceFrees() throws {
        let daemon = try LiveDaemon(arguments: ["--max-subscribers", "2", "--sse-heartbeat", "0.1"])
        let first = try daemon.subscribe()
        let second = try daemon.subscribe()
        _ = try snapshot(first)
        _ = try snapshot(second)
        let third = try daemon.subscribe()
        #expect(third.status == 503)
        #expect(third.headers["retry-after"] == "5")
        #expect(third.errorBody.contains(#""code":"too_many_subscribers""#))
        first.disconnect()
        // The server notices the closed connection when it writes (heartbeats every 0.1 s here).
        var accepted = false
        for _ in 0..<200 where !accepted {
            accepted = daemon.application.subscriberCount < 2
            if !accepted { usleep(10_000) }
        }
        #expect(accepted)
        #expect(try daemon.subscribe().status == 200)
    }

    /// When the catch-up cannot be read, the stream ends (the client reconnects later)
    /// and its place is given back.
    @Test func aCatchUpThatCannotBeReadEndsTheStreamAndGivesItsPlaceBack() throws {
        let daemon = try LiveDaemon(arguments: ["--max-subscribers", "1"])
        try daemon.register(#"{"id":"a","name":"A"}"#)
        // Closed connections: every read throws, the catch-up's included.
        daemon.application.readers.forEach { $0.close() }
        let client = try daemon.subscribe()
        #expect(client.status == 200)
        #expect(try client.remainingEvents().isEmpty, "the stream ends without a snapshot")
        // The place comes back once the server has seen the connection close.
        var polls = 0
        while daemon.application.subscriberCount > 0 && polls < 500 {
            polls += 1
            usleep(10_000)
        }
        #expect(daemon.application.subscriberCount == 0)
        #expect(try daemon.subscribe().status == 200, "the one place is free again")
    }

    @Test func shutdownEndsEveryStream() throws {
        let daemon = try LiveDaemon()
        let clients = try (0..<3).map { _ in try daemon.subscribe() }
        for client in clients { _ = try snapshot(client) }
        daemon.application.shutdown()
        for client in clients { #expect(try client.remainingEvents().isEmpty) }
    }

    /// A subscriber that stops reading falls behind, is cut off past its bound, and on
    /// reconnecting with its last id gets exactly what it missed; another subscriber is
    /// not held up meanwhile.
    @Test func aSlowSubscriberIsCutOffAndResumesExactly() throws {
        let daemon = try LiveDaemon { configuration in
            configuration.broker.streamBufferBytes = 16 * 1024
            configuration.broker.maximumPendingTasks = 500
        }
        let slow = try daemon.subscribe(receiveBuffer: 2048)
        let fast = try daemon.subscribe()
        _ = try snapshot(fast)
        // About 10 MB of events: more than the kernel's socket buffers (at most 4 MB here)
        // and the subscriber's bound (500 tasks waiting, about 2.5 MB) can absorb.
        let count = 2500
        let fastSeen = Box<Result<Int, any Error>?>(nil)
        let fastDone = DispatchSemaphore(value: 0)
        Thread {
            fastSeen.update { $0 = Result { try fast.events { $0.json["id"] as? String == "t\(count - 1)" }.count } }
            fastDone.signal()
        }.start()
        let padding = String(repeating: "p", count: 3900)
        for index in 0..<count {
            try daemon.register(#"{"id":"t\#(index)","name":"Task \#(index)","metadata":{"pad":"\#(padding)"}}"#)
        }
        #expect(fastDone.wait(timeout: .now() + 30) == .success)
        #expect(try fastSeen.value?.get() == count, "a subscriber that reads gets every event")
        // The slow one was disconnected without having to read what it was sent first.
        var polls = 0
        while daemon.application.subscriberCount > 1 && polls < 200 {
            polls += 1
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(daemon.application.subscriberCount == 1)

        var received: Set<String> = []
        var lastID: String?
        while let event = try slow.nextEvent() {
            // Its snapshot may hold the first tasks: its catch-up can read after their
            // registrations on a loaded machine (only the fast one's snapshot is awaited).
            if event.event == "snapshot" {
                lastID = event.id
                for task in event.json["tasks"] as? [[String: Any]] ?? [] {
                    if let id = task["id"] as? String { received.insert(id) }
                }
                continue
            }
            if let id = event.json["id"] as? String { received.insert(id) }
            lastID = event.id ?? lastID
        }
        #expect(received.count < count, "the slow subscriber was cut off")
        let resumed = try daemon.subscribe(headers: [("Last-Event-ID", lastID ?? "")])
        try daemon.register(#"{"id":"marker","name":"Marker"}"#)
        for event in try resumed.events(until: { $0.json["id"] as? String == "marker" }) {
            if let id = event.json["id"] as? String { received.insert(id) }
        }
        #expect(received == Set((0..<count).map { "t\($0)" } + ["marker"]))
    }
    /// Clients that subscribe and then read nothing, with a snapshot far larger than
    /// their sockets and the kernel hold: every stream is closed once its socket has taken
    /// nothing for the stall timeout, and each place is given back.
    @Test func streamsWhoseClientsReadNothingAreClosedAfterTheStallTimeout() throws {
        let daemon = try LiveDaemon(arguments: ["--stream-stall-timeout", "0.5"])
        let padding = String(repeating: "p", count: 4000)
        // About 8 MB of snapshot for each subscriber.
        for index in 0..<2000 {
            try daemon.register(#"{"id":"t\#(index)","name":"Task","metadata":{"pad":"\#(padding)"}}"#)
        }
        let readers = try (0..<8).map { _ in try daemon.subscribe(receiveBuffer: 4096) }
        #expect(readers.allSatisfy { $0.status == 200 })
        // A stream closes within the timeout plus the watcher's check interval once its
        // catch-up waits; the loop ends by itself long after that.
        var polls = 0
        while daemon.application.subscriberCount > 0 && polls < 3000 {
            polls += 1
            usleep(10_000)
        }
        #expect(daemon.application.subscriberCount == 0, "streams still open: \(daemon.application.subscriberCount)")
        for reader in readers {
            #expect(try reader.remainingEvents().allSatisfy { $0.event != "snapshot" }, "the snapshot never arrived whole")
        }
    }

    /// A reader that stops while a few tasks keep changing is cut off once what its stream
    /// holds passes the cap in bytes (far fewer tasks wait than the bound on tasks). With its
    /// last id it then resumes exactly: each task it has not seen at its latest state comes
    /// once, at that state, and nothing it already had comes again.
    @Test func aReaderThatStopsIsCutOffPastTheCapInBytesAndResumesExactly() throws {
        let daemon = try LiveDaemon(arguments: ["--stream-buffer-bytes", "16384"])
        let padding = String(repeating: "p", count: 3900)
        let tasks = (0..<6).map { "few\($0)" }
        for task in tasks { try daemon.register(#"{"id":"\#(task)","name":"Few","metadata":{"pad":"\#(padding)"}}"#) }
        let slow = try daemon.subscribe(receiveBuffer: 2048)
        var latestLabel: [String: String] = [:]
        var updates = 0
        // About 4 KB per update: the kernel's buffers hold at most a few MB.
        while daemon.application.subscriberCount > 0 && updates < 20_000 {
            let task = tasks[updates % tasks.count]
            try daemon.request("POST", "/v1/tasks/\(task)/heartbeat", json: #"{"label":"u\#(updates)"}"#)
            latestLabel[task] = "u\(updates)"
            updates += 1
        }
        #expect(daemon.application.subscriberCount == 0, "not cut off after \(updates) updates of \(tasks.count) tasks")

        var seenLabel: [String: String] = [:]
        var ids: [Int64] = []
        while let event = try slow.nextEvent() {
            if let id = event.id.flatMap({ Int64($0) }) { ids.append(id) }
            if let task = event.json["id"] as? String { seenLabel[task] = event.json["label"] as? String }
        }
        #expect(ids == ids.sorted() && Set(ids).count == ids.count)
        let lastID = try #require(ids.last, "the snapshot arrived")

        let resumed = try daemon.subscribe(headers: [("Last-Event-ID", "\(lastID)")])
        try daemon.register(#"{"id":"marker","name":"Marker"}"#)
        let replayed = try resumed.events { $0.json["id"] as? String == "marker" }.dropLast()
        let replayedIDs = replayed.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(replayedIDs.count == replayed.count && replayedIDs == replayedIDs.sorted())
        #expect(replayedIDs.allSatisfy { $0 > lastID }, "nothing at or before the last id seen")
        let replayedTasks = replayed.compactMap { $0.json["id"] as? String }
        #expect(Set(replayedTasks).count == replayedTasks.count, "each task once")
        #expect(Set(replayedTasks) == Set(tasks.filter { seenLabel[$0] != latestLabel[$0] }),
                "exactly the tasks not seen at their latest state")
        for event in replayed {
            let task = try #require(event.json["id"] as? String)
            #expect(event.json["label"] as? String == latestLabel[task], "\(task) at its latest state")
        }
    }
}
