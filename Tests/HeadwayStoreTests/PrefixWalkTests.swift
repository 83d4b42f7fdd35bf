import Testing
import HeadwayCore
@testable import HeadwayStore

/// Subtree walks within a task prefix, on trees an unprefixed token built across prefixes.
@Suite struct PrefixWalkTests {
    /// `a.root` with `outside` children of another prefix first, then `inside` of its own
    /// (each `b.k…` with an `a.` child of its own, below the other prefix).
    private func mixedTree(outside: Int, inside: Int, in fixture: StoreFixture) throws {
        let store = fixture.store
        _ = try fixture.write { database in
            _ = try store.register(Registration(id: "a.root", name: "R"), now: 1, in: database)
            for index in 0..<outside {
                _ = try store.register(Registration(id: "b.k\(index)", name: "B", parentID: "a.root"), now: 1, in: database)
                _ = try store.register(Registration(id: "a.under-b\(index)", name: "A", parentID: "b.k\(index)"), now: 1, in: database)
            }
            for index in 0..<inside {
                _ = try store.register(Registration(id: "a.k\(index)", name: "A", parentID: "a.root"), now: 1, in: database)
            }
        }
    }

    /// Passing over another prefix's tasks costs a bounded step too: rows read and passed
    /// over count against `stepTasks` as much as tasks changed.
    @Test func aPrefixedCancelPassesOverOtherPrefixesInBoundedSteps() throws {
        let fixture = try StoreFixture(stepTasks: 10)
        let store = fixture.store
        try mixedTree(outside: 50, inside: 5, in: fixture)
        var step = try fixture.write { try store.cancel("a.root", taskPrefix: "a.", now: 2, in: $0) }
        var steps = [step]
        while let walk = step.remaining {
            step = try fixture.write { try store.continueWalk(walk, in: $0) }
            steps.append(step)
        }
        #expect(steps.count >= 5, "50 rows passed over, at most 10 a step: \(steps.count) steps")
        #expect(steps.map(\.count).reduce(0, +) == 6, "the root and its 5 children of the prefix")
        let requested = try fixture.read { database in
            try database.rows("SELECT id FROM tasks WHERE cancel_requested = 1 ORDER BY id", []) { $0.text(0) }
        }
        #expect(requested == ["a.k0", "a.k1", "a.k2", "a.k3", "a.k4", "a.root"])
    }

    /// The delete's check runs before anything is deleted; it throws, and the change
    /// numbers it would have used are given back.
    @Test func aPrefixedDeleteOfAMixedSubtreeThrowsBeforeDeletingAnything() throws {
        let fixture = try StoreFixture(stepTasks: 10)
        let store = fixture.store
        try mixedTree(outside: 1, inside: 30, in: fixture)
        let before = try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") }
        #expect(throws: AccessRefusal.subtreeOutsidePrefix(prefix: "a.", taskID: "a.root")) {
            _ = try fixture.write { try store.delete("a.root", taskPrefix: "a.", now: 2, in: $0) }
        }
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tasks") } == before)
        #expect(try fixture.read { try $0.scalar("SELECT count(*) FROM tombstones") } == 0)
        // Within the prefix (a leaf, or a subtree with none outside) and without one: as before.
        #expect(try fixture.write { try store.delete("a.k0", taskPrefix: "a.", now: 3, in: $0) }.count == 1)
        #expect(try fixture.read { try TaskRepository.descendantOutside(prefix: "b.", below: "b.k0", in: $0) } == "a.under-b0")
        #expect(try fixture.read { try TaskRepository.descendantOutside(prefix: "a.", below: "a.k1", in: $0) } == nil)
    }
}
