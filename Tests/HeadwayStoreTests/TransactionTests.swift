import Foundation
import HeadwayTestSupport
import Testing
@testable import HeadwayStore

/// A connection to a fresh database file with one table `t (x INTEGER)`.
private final class ScratchDatabase {
    let directory = TemporaryDirectory()
    let database: Database

    init() throws {
        database = try Database(path: directory.file("scratch.db"))
        try database.execute("CREATE TABLE t (x INTEGER)")
    }

    deinit {
        database.close()
        directory.remove()
    }

    /// The values of `t`, in order, as another connection sees them (committed only).
    func committedValues() throws -> [Int64] {
        let other = try Database(path: database.path)
        defer { other.close() }
        return try other.rows("SELECT x FROM t ORDER BY x") { $0.int(0) }
    }

    func insert(_ value: Int64) throws {
        try database.run("INSERT INTO t (x) VALUES (?)", [.integer(value)])
    }
}

private struct Refused: Error, Equatable {}

@Suite struct TransactionTests {
    /// Texts are bound through their own bytes with their length: an empty text stays an
    /// empty text (not NULL), and short, long and non-ASCII texts come back as they went.
    @Test func boundTextsComeBackAsTheyWent() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("texts.db"))
        defer { database.close() }
        try database.execute("CREATE TABLE texts (n INTEGER, x TEXT) STRICT")
        let texts = ["", "a", "fifteen bytes!!", "sixteen bytes!!!", "héllo 😀", String(repeating: "long ", count: 400),
                     String(Substring("a slice of a longer text").dropFirst(2))]
        for (index, text) in texts.enumerated() {
            try database.run("INSERT INTO texts (n, x) VALUES (?, ?)", [.integer(Int64(index)), .text(text)])
        }
        #expect(try database.rows("SELECT x FROM texts ORDER BY n") { $0.text(0) } == texts)
        #expect(try database.scalar("SELECT count(*) FROM texts WHERE x IS NULL") == 0)
        #expect(try database.scalar("SELECT length(CAST(x AS BLOB)) FROM texts WHERE n = 4") == Int64("héllo 😀".utf8.count))
    }

    /// A statement taken again keeps no binding of its last run: parameters bound again
    /// take their new values, and those left out are NULL.
    @Test func aStatementForgetsItsLastBindings() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let database = try Database(path: directory.file("bindings.db"))
        defer { database.close() }
        let sql = "SELECT ?1, ?2, ?3"
        let read = { (arguments: [SQLValue]) in
            try database.rows(sql, arguments) { [$0.isNull(0) ? nil : $0.text(0), $0.isNull(1) ? nil : $0.text(1),
                                                 $0.isNull(2) ? nil : $0.text(2)] }.first
        }
        #expect(try read([.text("a"), .text("b"), .text("c")]) == ["a", "b", "c"])
        #expect(try read([.text("d")]) == ["d", nil, nil])
        #expect(try read([.text("e"), .text("f"), .text("g")]) == ["e", "f", "g"])
        #expect(try read([]) == [nil, nil, nil])
        try database.execute("CREATE TABLE kept (a TEXT, b TEXT) STRICT")
        try database.run("INSERT INTO kept VALUES (?, ?)", [.text("one"), .text("two")])
        try database.run("INSERT INTO kept VALUES (?, ?)", [.text("three")])
        #expect(try database.scalar("SELECT count(*) FROM kept WHERE b IS NULL") == 1)
    }

    @Test func aTransactionCommitsWhenItsBodyReturns() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        let value = try database.inTransaction(.immediate) { () throws -> String in
            try scratch.insert(1)
            try scratch.insert(2)
            #expect(database.isInsideTransaction)
            return "done"
        }
        #expect(value == "done")
        #expect(!database.isInsideTransaction)
        #expect(try scratch.committedValues() == [1, 2])
        #expect(database.rollbacks == 0)
    }

    @Test func aTransactionRollsBackWhenItsBodyThrowsAndCountsIt() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        #expect(throws: Refused()) {
            try database.inTransaction(.deferred) {
                try scratch.insert(1)
                throw Refused()
            }
        }
        #expect(!database.isInsideTransaction)
        #expect(try scratch.committedValues() == [])
        #expect(database.rollbacks == 1)
    }

    /// A rollback that undid nothing leaves what a cache remembers true: it is not counted.
    @Test func aRollbackWithoutChangesIsNotCounted() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        #expect(throws: Refused()) { try database.inTransaction(.immediate) { throw Refused() } }
        #expect(throws: Refused()) { try database.inSavepoint { throw Refused() } }
        #expect(database.rollbacks == 0)
        #expect(!database.isInsideTransaction)
    }

    /// A deferred foreign key fails only at `COMMIT`, which leaves the transaction open:
    /// the helper rolls it back, counts it and throws the commit's error.
    @Test func aFailedCommitRollsBackAndThrowsTheCommitError() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        try database.execute("""
            PRAGMA foreign_keys = ON;
            CREATE TABLE parent (id INTEGER PRIMARY KEY);
            CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
            """)
        let error = #expect(throws: DatabaseError.self) {
            try database.inTransaction(.immediate) {
                try scratch.insert(1)
                try database.run("INSERT INTO child (parent_id) VALUES (42)")
            }
        }
        #expect(error?.code == 787, "SQLITE_CONSTRAINT_FOREIGNKEY")
        #expect(error?.sql == "COMMIT")
        #expect(!database.isInsideTransaction)
        #expect(try scratch.committedValues() == [])
        #expect(try database.scalar("SELECT count(*) FROM child") == 0)
        #expect(database.rollbacks == 1)
    }

    /// A savepoint that throws undoes only its own changes; the enclosing transaction and
    /// the savepoints around it go on and commit.
    @Test func nestedSavepointsRollBackOnlyWhatThrew() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        var refusals: [Bool] = []
        try database.inTransaction(.immediate) {
            try scratch.insert(1)
            try database.inSavepoint {
                try scratch.insert(2)
                refusals.append(Self.refuses {
                    try database.inSavepoint {
                        try scratch.insert(3)
                        throw Refused()
                    }
                })
                try scratch.insert(4)
                try database.inSavepoint { try scratch.insert(5) }
            }
            refusals.append(Self.refuses {
                try database.inSavepoint {
                    try scratch.insert(6)
                    try database.inSavepoint { try scratch.insert(7) }
                    throw Refused()
                }
            })
            #expect(database.isInsideTransaction)
        }
        #expect(refusals == [true, true])
        #expect(try scratch.committedValues() == [1, 2, 4, 5])
        #expect(database.rollbacks == 2)
    }

    /// Whether `body` threw `Refused`.
    private static func refuses(_ body: () throws -> Void) -> Bool {
        do {
            try body()
            return false
        } catch {
            return error is Refused
        }
    }

    /// Outside a transaction a savepoint is a transaction of its own.
    @Test func aSavepointAloneIsItsOwnTransaction() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        try database.inSavepoint { try scratch.insert(1) }
        #expect(!database.isInsideTransaction)
        #expect(throws: Refused()) {
            try database.inSavepoint {
                try scratch.insert(2)
                throw Refused()
            }
        }
        #expect(!database.isInsideTransaction)
        #expect(try scratch.committedValues() == [1])
        #expect(database.rollbacks == 1)
    }
}

/// Runs `body` on a new thread and returns its result.
private func onAnotherThread<Value: Sendable>(_ body: @escaping @Sendable () -> Value) -> Value {
    let done = DispatchSemaphore(value: 0)
    let box = Box<Value>()
    let thread = Thread {
        box.value = body()
        done.signal()
    }
    thread.start()
    done.wait()
    return box.value!
}

@Suite struct ThreadConfinementTests {
    @Test func aConfinedConnectionIsUsableOnlyOnItsThread() throws {
        let scratch = try ScratchDatabase()
        let database = scratch.database
        #expect(database.confinement == .anyThread)
        #expect(database.isUsable(on: .current))
        #expect(onAnotherThread { database.isUsable(on: .current) })

        database.confine(to: .currentThread)
        #expect(database.confinement == .thread(.current))
        #expect(database.isUsable(on: .current))
        #expect(!onAnotherThread { database.isUsable(on: .current) })
        try scratch.insert(1)

        database.confine(to: .noThread)
        #expect(!database.isUsable(on: .current))
        #expect(!onAnotherThread { database.isUsable(on: .current) })
        database.confine(to: .anyThread)
    }

    /// The writer's connection belongs to the writer thread: a job may use it, any other
    /// thread may not.
    @Test func theWritersConnectionIsUsableOnlyOnTheWriterThread() throws {
        let fixture = try StoreFixture()
        let (connection, usableInJob) = try fixture.write { database in (database, database.isUsable(on: .current)) }
        #expect(usableInJob)
        #expect(!connection.isUsable(on: .current))
        #expect(!onAnotherThread { connection.isUsable(on: .current) })
    }

    /// A reader's connection belongs to the thread in `read` while it reads, and to no
    /// thread once the read is over (a connection kept past its read is caught).
    @Test func aReadersConnectionIsUsableOnlyInsideARead() throws {
        let fixture = try StoreFixture()
        let reader = try DatabaseReader(path: fixture.path)
        defer { reader.close() }
        let (kept, version) = try reader.read { database in
            #expect(database.isUsable(on: .current))
            #expect(!onAnotherThread { database.isUsable(on: .current) })
            return (database, try Migrator.recordedVersion(in: database))
        }
        #expect(version == Migrator().latestVersion)
        #expect(!kept.isUsable(on: .current))
        #expect(!onAnotherThread { kept.isUsable(on: .current) })
        #expect(try reader.schemaVersion() == Migrator().latestVersion, "the next read may use it again")
    }
}
