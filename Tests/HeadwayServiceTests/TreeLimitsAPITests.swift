import HeadwayCore
import Testing
@testable import Daemon

/// The tree's limits as flags and as replies: `--max-depth`, `--max-children` and
/// `--max-tasks` at their limit and one past it, each refusal a problem with its code,
/// and nothing stored.
@Suite(.serialized) struct TreeLimitsAPITests {
    @Test func theFlagsAndTheirEnvironmentVariables() throws {
        guard case .run(let defaults) = try Configuration.parse(arguments: [], environment: [:]) else {
            throw UsageError("expected a run command")
        }
        #expect(defaults.treeLimits == TreeLimits(maximumDepth: 32, maximumChildren: 10_000, maximumTasks: 10_000_000))
        guard case .run(let set) = try Configuration.parse(
            arguments: ["--max-depth", "5", "--max-children=7"], environment: ["HEADWAY_MAX_TASKS": "9", "HEADWAY_MAX_DEPTH": "6"])
        else { throw UsageError("expected a run command") }
        #expect(set.treeLimits == TreeLimits(maximumDepth: 5, maximumChildren: 7, maximumTasks: 9))
        for flag in ["--max-depth", "--max-children", "--max-tasks", "HEADWAY_MAX_DEPTH", "HEADWAY_MAX_CHILDREN",
                     "HEADWAY_MAX_TASKS", "tree_too_deep", "too_many_children", "storage_full"] {
            #expect(Configuration.usage.contains(flag), "\(flag)")
        }
        for (flag, bad) in [("--max-depth", "0"), ("--max-children", "-1"), ("--max-tasks", "lots")] {
            #expect(throws: UsageError.self, "\(flag) \(bad)") {
                _ = try Configuration.parse(arguments: [flag, bad], environment: [:])
            }
        }
    }

    @Test(arguments: Transport.allCases) func tooDeepIs422AndStoresNothing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport, arguments: ["--max-depth", "3"])
        _ = try daemon.register(#"{"id":"a","name":"A"}"#)
        _ = try daemon.register(#"{"id":"b","name":"B","parent_id":"a"}"#)
        let atLimit = try daemon.request("POST", "/v1/tasks", json: #"{"id":"c","name":"C","parent_id":"b"}"#)
        #expect(atLimit.status == 201)
        let past = try daemon.request("POST", "/v1/tasks", json: #"{"id":"d","name":"D","parent_id":"c"}"#)
        #expect(past.status == 422)
        #expect(past.problemCode == "tree_too_deep")
        #expect(try daemon.request("GET", "/v1/tasks/d").status == 404)
    }

    @Test(arguments: Transport.allCases) func tooManyChildrenIs422(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport, arguments: ["--max-children", "2"])
        _ = try daemon.register(#"{"id":"p","name":"P"}"#)
        for id in ["k1", "k2"] {
            #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"K","parent_id":"p"}"#).status == 201)
        }
        let past = try daemon.request("POST", "/v1/tasks", json: #"{"id":"k3","name":"K","parent_id":"p"}"#)
        #expect(past.status == 422)
        #expect(past.problemCode == "too_many_children")
        #expect(try daemon.request("GET", "/v1/tasks/k3").status == 404)
    }

    @Test(arguments: Transport.allCases) func storageFullIs503WithRetryAfter(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport, arguments: ["--max-tasks", "2"])
        for id in ["t1", "t2"] {
            #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"T"}"#).status == 201)
        }
        let past = try daemon.request("POST", "/v1/tasks", json: #"{"id":"t3","name":"T"}"#)
        #expect(past.status == 503)
        #expect(past.problemCode == "storage_full")
        #expect(past.headers["retry-after"] != nil)
        #expect(try daemon.request("GET", "/v1/tasks/t3").status == 404)
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"t2","name":"T"}"#).status == 200,
                "a repeated registration is still answered")
    }
}
