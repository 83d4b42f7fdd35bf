/// Sockets that each have a deadline, given in the order of their deadlines (each is the
/// same time after its insertion, on a monotonic clock): the earliest is found at once,
/// a removal clears the socket's slot, and a socket number may come back later.
///
/// Each socket's entry sits in a slot indexed by its number (socket numbers are small and
/// dense: the lowest free one is reused), so holding, finding and removing one hash
/// nothing; the slots grow to the highest number held and stay. Insertions are kept in a
/// queue; one whose socket was removed (or inserted again, with another serial: its number
/// was reused) is skipped when it reaches the front, and the skipped ones are dropped once
/// they outnumber the sockets held. Socket numbers must not be negative (none is held).
///
/// The slots are as many as the highest socket number held so far: at most the process's
/// limit on open files (the lowest free number is always reused), a few hundred bytes each
/// at the most (the accept loop's entries hold a socket address), kept after a peak.
struct DeadlineQueue<Value> {
    struct Entry {
        var value: Value
        var deadline: UInt64
        fileprivate var serial: UInt64
    }

    private var slots: [Entry?] = []
    private var insertions: [(fd: Int32, serial: UInt64)] = []
    private var insertionsStart = 0
    private var nextSerial: UInt64 = 0

    /// How many sockets are held.
    private(set) var count = 0
    var isEmpty: Bool { count == 0 }

    /// The sockets held, in the order of their numbers.
    var sockets: [Int32] { slots.indices.filter { slots[$0] != nil }.map { Int32($0) } }

    func contains(_ fd: Int32) -> Bool { entry(fd) != nil }

    /// The entry held for `fd`, if any.
    private func entry(_ fd: Int32) -> Entry? { fd >= 0 && Int(fd) < slots.count ? slots[Int(fd)] : nil }

    /// Adds `fd` (replacing its entry, if any) with a deadline no earlier than any held.
    mutating func insert(_ fd: Int32, _ value: Value, deadline: UInt64) {
        precondition(fd >= 0, "a socket number is never negative")
        let serial = nextSerial
        nextSerial += 1
        let slot = Int(fd)
        if slot >= slots.count { slots.append(contentsOf: repeatElement(nil, count: slot + 1 - slots.count)) }
        if slots[slot] == nil { count += 1 }
        slots[slot] = Entry(value: value, deadline: deadline, serial: serial)
        insertions.append((fd, serial))
        if insertions.count - insertionsStart > 2 * count + 64 {
            // Compacted in place: the array keeps its room for the insertions to come.
            var kept = 0
            for index in insertionsStart..<insertions.count where entry(insertions[index].fd)?.serial == insertions[index].serial {
                insertions[kept] = insertions[index]
                kept += 1
            }
            insertions.removeSubrange(kept...)
            insertionsStart = 0
        }
    }

    /// Changes the value held for `fd`, if it is held (its deadline stays).
    mutating func modifyValue(of fd: Int32, _ change: (inout Value) -> Void) {
        guard entry(fd) != nil else { return }
        change(&slots[Int(fd)]!.value)
    }

    /// Removes `fd`; its entry, if it was held.
    @discardableResult
    mutating func remove(_ fd: Int32) -> Entry? {
        guard let removed = entry(fd) else { return nil }
        slots[Int(fd)] = nil
        count -= 1
        return removed
    }

    /// The entry with the earliest deadline (dropping the skipped insertions before it).
    mutating func first() -> (fd: Int32, entry: Entry)? {
        while insertionsStart < insertions.count {
            let insertion = insertions[insertionsStart]
            if let entry = entry(insertion.fd), entry.serial == insertion.serial { return (insertion.fd, entry) }
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
