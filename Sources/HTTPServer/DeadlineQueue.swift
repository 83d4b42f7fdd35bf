/// Sockets that each have a deadline, given in the order of their deadlines (each is the
/// same time after its insertion, on a monotonic clock): the earliest is found at once,
/// a removal is a dictionary removal, and a socket number may come back later.
///
/// Insertions are kept in a queue; one whose socket was removed (or inserted again, with
/// another serial: its number was reused) is skipped when it reaches the front, and the
/// skipped ones are dropped once they outnumber the sockets held.
struct DeadlineQueue<Value> {
    struct Entry {
        var value: Value
        var deadline: UInt64
        fileprivate var serial: UInt64
    }

    private(set) var entries: [Int32: Entry] = [:]
    private var insertions: [(fd: Int32, serial: UInt64)] = []
    private var insertionsStart = 0
    private var nextSerial: UInt64 = 0

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    func contains(_ fd: Int32) -> Bool { entries[fd] != nil }

    /// Adds `fd` (replacing its entry, if any) with a deadline no earlier than any held.
    mutating func insert(_ fd: Int32, _ value: Value, deadline: UInt64) {
        let serial = nextSerial
        nextSerial += 1
        entries[fd] = Entry(value: value, deadline: deadline, serial: serial)
        insertions.append((fd, serial))
        if insertions.count - insertionsStart > 2 * entries.count + 64 {
            // Compacted in place: the array keeps its room for the insertions to come.
            var kept = 0
            for index in insertionsStart..<insertions.count where entries[insertions[index].fd]?.serial == insertions[index].serial {
                insertions[kept] = insertions[index]
                kept += 1
            }
            insertions.removeSubrange(kept...)
            insertionsStart = 0
        }
    }

    /// Changes the value held for `fd`, if it is held (its deadline stays).
    mutating func modifyValue(of fd: Int32, _ change: (inout Value) -> Void) {
        if let index = entries.index(forKey: fd) { change(&entries.values[index].value) }
    }

    /// Removes `fd`; its entry, if it was held.
    @discardableResult
    mutating func remove(_ fd: Int32) -> Entry? { entries.removeValue(forKey: fd) }

    /// The entry with the earliest deadline (dropping the skipped insertions before it).
    mutating func first() -> (fd: Int32, entry: Entry)? {
        while insertionsStart < insertions.count {
            let insertion = insertions[insertionsStart]
            if let entry = entries[insertion.fd], entry.serial == insertion.serial { return (insertion.fd, entry) }
            insertionsStart += 1
        }
        insertions.removeAll(keepingCapacity: true)
        insertionsStart = 0
        return nil
    }

    /// Removes and returns the sockets whose deadline is `now` or earlier, earliest first.
    mutating func removeExpired(now: UInt64) -> [(fd: Int32, value: Value)] {
        var expired: [(fd: Int32, value: Value)] = []
        while let first = first(), first.entry.deadline <= now {
            remove(first.fd)
            expired.append((first.fd, first.entry.value))
        }
        return expired
    }
}
