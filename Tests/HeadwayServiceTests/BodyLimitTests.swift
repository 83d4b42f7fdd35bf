import Testing
@testable import Daemon
import HeadwayCore

/// `--max-body-bytes`: a body of exactly the limit is read, one byte more is refused 413
/// `body_too_large` naming the limit, and the refusal stores nothing.
@Suite struct BodyLimitTests {
    /// A registration of task `id` padded (inside its metadata) to exactly `bytes` bytes.
    private func registration(_ id: String, bytes: Int) -> String {
        let empty = #"{"id":"\#(id)","name":"N","metadata":{"pad":""}}"#
        let pad = String(repeating: "x", count: bytes - empty.utf8.count)
        return #"{"id":"\#(id)","name":"N","metadata":{"pad":"\#(pad)"}}"#
    }

    @Test func aBodyAtTheLimitIsReadAndOneBytePastItIsRefused() throws {
        let daemon = try LiveDaemon(transport: .socket, arguments: ["--max-body-bytes", "1024"])
        let atLimit = registration("at", bytes: 1024)
        #expect(atLimit.utf8.count == 1024)
        #expect(try daemon.request("POST", "/v1/tasks", json: atLimit).status == 201)

        let past = registration("past", bytes: 1025)
        // A refused body is not read: the server closes that connection.
        let refused = try daemon.connect().request("POST", "/v1/tasks", json: past)
        #expect(refused.status == 413)
        #expect(refused.problemCode == "body_too_large")
        #expect(refused.text.contains("1024"), "the problem names the limit")
        #expect(try daemon.request("GET", "/v1/tasks/past").status == 404)
    }

    @Test func theFlagHasBounds() throws {
        guard case .run(let defaults) = try Configuration.parse(arguments: [], environment: [:]),
              case .run(let set) = try Configuration.parse(arguments: [], environment: ["HEADWAY_MAX_BODY_BYTES": "2048"])
        else { throw UsageError("expected a run command") }
        #expect(defaults.maximumBodyBytes == 65_536)
        #expect(set.maximumBodyBytes == 2048)
        for bad in ["1023", "16777217", "64k"] {
            #expect(throws: UsageError("--max-body-bytes must be a whole number from 1024 to 16777216, not '\(bad)'")) {
                _ = try Configuration.parse(arguments: ["--max-body-bytes", bad], environment: [:])
            }
        }
    }
}
