/// The members of a JSON object, in the order they were written, each name once.
///
/// Request bodies are small objects read a field at a time, so the members are kept in
/// one array and found by a scan: for a dozen short names that costs less than hashing
/// them into a dictionary and allocating its table, which was most of a parse.
/// Equality ignores the order, as JSON's does.
public struct JSONObject: Equatable, Sendable, Sequence, ExpressibleByDictionaryLiteral {
    public typealias Element = (key: String, value: JSONValue)

    /// The members, in the order they were written or set.
    public private(set) var members: [Element]

    public init() { members = [] }

    /// An object of `members`, whose names the caller has checked are distinct.
    init(distinctMembers members: [Element]) { self.members = members }

    /// The members of `dictionary` (in its order, which is arbitrary).
    public init(_ dictionary: [String: JSONValue]) { members = dictionary.map { ($0.key, $0.value) } }

    /// A later duplicate name replaces the earlier member's value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        members = []
        members.reserveCapacity(elements.count)
        for (key, value) in elements { self[key] = value }
    }

    /// The value of the member named `key`; setting nil removes the member.
    public subscript(key: String) -> JSONValue? {
        get { members.first { $0.key.isSameText(as: key) }?.value }
        set {
            let index = members.firstIndex { $0.key == key }
            switch (index, newValue) {
            case (let index?, let value?): members[index].value = value
            case (let index?, nil): members.remove(at: index)
            case (nil, let value?): members.append((key, value))
            case (nil, nil): break
            }
        }
    }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map(\.key) }
    public var values: [JSONValue] { members.map(\.value) }

    public func makeIterator() -> IndexingIterator<[Element]> { members.makeIterator() }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.count == rhs.count else { return false }
        // Names are distinct on both sides: the same count and every member found equal
        // on the other side is the same set of members.
        if lhs.count <= 16 { return lhs.members.allSatisfy { rhs[$0.key] == $0.value } }
        let other = Dictionary(rhs.members, uniquingKeysWith: { first, _ in first })
        return lhs.members.allSatisfy { other[$0.key] == $0.value }
    }
}

extension String {
    /// `self == other`, the lengths compared first. A request's fields are looked up by
    /// name among names that mostly differ in length, and comparing the lengths of two
    /// native strings is two loads, where `==` on two unequal strings is a call into the
    /// standard library.
    @inline(__always)
    func isSameText(as other: String) -> Bool { utf8.count == other.utf8.count && self == other }
}
