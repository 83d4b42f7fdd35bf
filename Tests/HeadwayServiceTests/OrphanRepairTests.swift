import Foundation
import HeadwayStore
import HeadwayTestSupport
import Testing

/// A subtree delete runs in steps; a crash between them leaves tasks whose parent is gone.
/// The next start deletes them, with their subtrees and tombstones.
@Suite struct OrphanRepairTests {
    @Test func aStartDeletesWhatAnInterruptedDeleteLeft() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("headway.db")
        do {
            let daemon = try LiveDaemon(transport: .inProcess, adjust: { $0.databasePath = path })
            for body in [#"{"id":"root","name":"R"}"#, #"{"id":"kept","name":"K"}"#,
                         #"{"id":"c1","name":"C","parent_id":"root"}"#, #"{"id":"c2","name":"C","parent_id":"root"}"#,
                         #"{"id":"g1","name":"G","parent_id":"c1"}"#] {
                _ = try daemon.register(body)
            }
        }
        // What the first step of a delete commits before a crash: the root and its tombstone.
        let database = try Database(path: path)
        try database.execute("DELETE FROM tasks WHERE id = 'root'")
        database.close()

        let restarted = try LiveDaemon(transport: .inProcess, adjust: { $0.databasePath = path })
        var remaining = ["c1", "c2", "g1"]
        for _ in 0..<1000 where !remaining.isEmpty {
            remaining = try remaining.filter { try restarted.request("GET", "/v1/tasks/\($0)").status != 404 }
            if !remaining.isEmpty { usleep(5_000) }
        }
        #expect(remaining.isEmpty, "left without their parent: \(remaining)")
        #expect(try restarted.request("GET", "/v1/tasks/kept").status == 200)
        let check = try Database(path: path, readOnly: true)
        defer { check.close() }
        #expect(try check.scalar("SELECT count(*) FROM tombstones WHERE id IN ('c1', 'c2', 'g1')") == 3)
    }
}
