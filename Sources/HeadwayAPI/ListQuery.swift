import HTTPServer
import HeadwayCore
import HeadwayStore
import Foundation

/// The query of `GET /v1/tasks`, validated.
struct ListQuery {
    var filter = TaskFilter()
    var pageSize = 50
    var beforeKey: Int64?
    /// Only tasks whose id starts with this (`id_prefix`: a search by id).
    var idPrefix: String?

    static let allowed: Set<String> = ["state", "stalled", "parent_id", "root", "page_size", "page_token", "id_prefix", "q",
                                       "overdue"]

    static func parse(_ parameters: [(name: String, value: String)]) throws -> ListQuery {
        var result = ListQuery()
        var query = QueryReader(parameters, allowed: allowed)
        result.filter.states = query.choices("state", of: TaskState.allCases).sorted { $0.rawValue < $1.rawValue }
        result.filter.stalled = query.boolean("stalled")
        result.filter.rootOnly = query.boolean("root") ?? false
        // As `root`: true keeps only the overdue tasks; false is every task.
        result.filter.overdueOnly = query.boolean("overdue") ?? false
        result.filter.parentID = query.id("parent_id")
        result.pageSize = query.integer("page_size", in: 1...500) ?? result.pageSize
        result.idPrefix = query.id("id_prefix")
        result.filter.search = query.searchText("q", maxLength: Limits.nameLength)
        result.pageToken = query.single("page_token")
        guard query.errors.isEmpty else { throw TaskError.invalidRequest(query.errors) }
        return result
    }

    /// The `page_token` as given, checked by `resolvePageToken` once the filter is whole.
    var pageToken: String?

    /// Reads `pageToken`: where the page starts. A token issued for another filter (or
    /// another token's prefix) is refused.
    mutating func resolvePageToken() throws {
        guard let pageToken else { return }
        guard let decoded = PageToken(encoded: pageToken), decoded.matches(filter) else { throw Problem.invalidPageToken }
        beforeKey = decoded.beforeKey
    }

    /// Narrows the listing to the ids the caller's token may see (`tokenPrefix`) and that
    /// `id_prefix` asks for: the longer prefix when one extends the other; false when they
    /// exclude each other (nothing can match). Call before `resolvePageToken`.
    mutating func restrict(toTokenPrefix tokenPrefix: String?) -> Bool {
        switch (tokenPrefix, idPrefix) {
        case (nil, nil): return true
        case (let only?, nil), (nil, let only?): filter.taskPrefix = only
        case (let token?, let wanted?):
            guard wanted.hasPrefix(token) || token.hasPrefix(wanted) else { return false }
            filter.taskPrefix = wanted.count > token.count ? wanted : token
        }
        return true
    }
}

/// An opaque continuation token: where the next page starts, tied to the filter it was
/// issued for so it cannot be reused with another listing.
struct PageToken: Equatable {
    var beforeKey: Int64
    var fingerprint: UInt64

    init(beforeKey: Int64, filter: TaskFilter) {
        self.beforeKey = beforeKey
        self.fingerprint = Self.fingerprint(filter)
    }

    init?(encoded: String) {
        var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard encoded.count <= 64, let data = Data(base64Encoded: base64),
              let text = String(data: data, encoding: .utf8) else { return nil }
        let parts = text.split(separator: ":")
        guard parts.count == 3, parts[0] == "v1", let key = Int64(parts[1]), key > 0,
              let fingerprint = UInt64(parts[2], radix: 16) else { return nil }
        self.beforeKey = key
        self.fingerprint = fingerprint
    }

    var encoded: String {
        Data("v1:\(beforeKey):\(String(fingerprint, radix: 16))".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    func matches(_ filter: TaskFilter) -> Bool { fingerprint == Self.fingerprint(filter) }

    /// FNV-1a over a canonical description of the filter.
    private static func fingerprint(_ filter: TaskFilter) -> UInt64 {
        var text = "\(filter.states.map(\.rawValue).joined(separator: ","))|\(filter.stalled.map(String.init) ?? "")|\(filter.parentID ?? "")|\(filter.rootOnly)|\(filter.taskPrefix ?? "")"
        // A search adds its text (after a character no text holds); a listing without one
        // keeps the fingerprint it always had.
        if let search = filter.search { text += "|\u{1}" + search }
        if filter.overdueOnly { text += "|\u{2}overdue" }
        return text.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
    }
}
