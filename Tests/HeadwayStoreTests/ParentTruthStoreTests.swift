import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// What keeping parents' counts and `attention` costs the writer: nothing when a child's
/// change changes nothing for its parent, one row per ancestor whose `attention` moves.
@Suite struct ParentTruthStoreTests {
    /// Statements run by `work` in one writer job, the held rows written at its end included.
    private func statements(_ fixture: StoreFixture,
                            _ work: @escaping @Sendable (Database) throws -> Void) throws -> Int {
        let store = fixture.store
        return try fixture.write { database in
            let start = database.statementsRun
            try work(database)
            try store.cache.writeHeld(in: database)
            return database.statementsRun - start
        }
    }

    /// 50 heartbeats of children within a second of their parent's last published signal
    /// cost what 50 heartbeats of roots cost, plus the parent's one row.
    @Test func childrensHeartbeatsCostNoStatementForTheirParent() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        _ = try fixture.write { try store.register(Registration(id: "p", name: "P"), now: 1_000, in: $0) }
        for index in 0..<50 {
            _ = try fixture.write { database in
                _ = try store.register(Registration(id: "c\(index)", name: "C", parentID: "p", total: 10), now: 1_000, in: database)
                return try store.register(Registration(id: "r\(index)", name: "R", total: 10), now: 1_000, in: database)
            }
        }
        let children = try statements(fixture) { database in
            for index in 0..<50 { _ = try store.heartbeat("c\(index)", Heartbeat(), now: 1_500, in: database) }
        }
        let roots = try statements(fixture) { database in
            for index in 0..<50 { _ = try store.heartbeat("r\(index)", Heartbeat(), now: 1_500, in: database) }
        }
        #expect(children == roots + 1, "\(children) statements under a parent, \(roots) for roots")
    }

    /// A stall raised deep in a tree reaches each ancestor once; a second stall beside it
    /// changes only the counts of its parent (whose `attention` is already `stalled`), so
    /// the walk stops there.
    @Test func aStallReachesTheAncestorsWhoseAttentionMovesAndNoFurther() throws {
        let fixture = try StoreFixture(limits: TreeLimits(maximumDepth: 40))
        let store = fixture.store
        for level in 1...20 {
            _ = try fixture.write {
                try store.register(Registration(id: "c\(level)", name: "C", parentID: level == 1 ? nil : "c\(level - 1)",
                                                stallTimeoutSeconds: 600), now: 1_000, in: $0)
            }
        }
        for leaf in ["x", "y"] {
            _ = try fixture.write {
                try store.register(Registration(id: leaf, name: "Leaf", parentID: "c20", stallTimeoutSeconds: 5), now: 1_000, in: $0)
            }
        }
        _ = try fixture.write { try store.heartbeat("y", Heartbeat(), now: 3_000, in: $0) }
        let first = try fixture.write { try store.sweep(now: 6_000, limit: 10, in: $0) }
        #expect(first.events.map(\.taskID) == ["x"] + (1...20).reversed().map { "c\($0)" })
        let top = try #require(try fixture.write { try TaskRepository.find("c1", in: $0) })
        #expect(top.attention == .stalled)
        #expect(top.children == ChildrenCounts(running: 1))

        let second = try fixture.write { try store.sweep(now: 8_000, limit: 10, in: $0) }
        #expect(second.events.map(\.taskID) == ["y", "c20"])
        let parent = try #require(try fixture.write { try TaskRepository.find("c20", in: $0) })
        #expect(parent.children == ChildrenCounts(running: 2, stalled: 2))
        #expect(try fixture.write { try TaskRepository.find("c1", in: $0) }?.changeNumber == top.changeNumber)

        // Recovering one leaf keeps the stall above (the ancestors above c20 show only the
        // signal, their last published one being 5 s old); recovering both clears it all
        // the way up.
        let one = try fixture.write { try store.heartbeat("x", Heartbeat(), now: 8_100, in: $0) }
        #expect(one.events.map(\.taskID) == ["x"] + (1...20).reversed().map { "c\($0)" })
        #expect(try fixture.write { try TaskRepository.find("c1", in: $0) }?.attention == .stalled)
        #expect(try fixture.write { try TaskRepository.find("c20", in: $0) }?.children == ChildrenCounts(running: 2, stalled: 1))
        let both = try fixture.write { try store.heartbeat("y", Heartbeat(), now: 8_200, in: $0) }
        #expect(both.events.map(\.taskID) == ["y"] + (1...20).reversed().map { "c\($0)" })
        #expect(try fixture.write { try TaskRepository.find("c1", in: $0) }?.attention == nil)
    }
}
