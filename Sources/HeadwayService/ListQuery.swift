import HTTPServer
import HeadwayCore
import HeadwayStore
import Foundation

/// The query of `GET /v1/tasks`, validated.
struct ListQuery {
    var filter = TaskFilter()
    var pageSize = 50
    var beforeKey: Int64?

    static let allowed: Set<String> = ["state", "stalled", "parent_id", "root", "page_size", "page_token"]

    static func parse(_ query: [HTTPField]) throws(Problem) -> ListQuery {
        var result = ListQuery()
        var errors: [FieldError] = []
        for field in query where !allowed.contains(field.name) {
            errors.append(FieldError(field: field.name, message: "is not a known query parameter"))
        }
        for value in query.filter({ $0.name == "state" }).flatMap({ $0.value.split(separator: ",") }) {
            if let state = TaskState(rawValue: String(value)) {
                if !result.filter.states.contains(state) { result.filter.states.append(state) }
            } else {
                errors.append(FieldError(field: "state", message: "must be pending, running, succeeded, failed or canceled"))
            }
        }
        result.filter.states.sort { $0.rawValue < $1.rawValue }
        func single(_ name: String) -> String? {
            let values = query.filter { $0.name == name }.map(\.value)
            if values.count > 1 { errors.append(FieldError(field: name, message: "may be given only once")) }
            return values.first
        }
        func boolean(_ name: String) -> Bool? {
            guard let text = single(name) else { return nil }
            switch text {
            case "true": return true
            case "false": return false
            default:
                errors.append(FieldError(field: name, message: "must be true or false"))
                return nil
            }
        }
        result.filter.stalled = boolean("stalled")
        result.filter.rootOnly = boolean("root") ?? false
        if let parent = single("parent_id") {
            if TaskID.isValid(parent) { result.filter.parentID = parent } else {
                errors.append(FieldError(field: "parent_id", message: "must match [A-Za-z0-9._~:-]{1,128}"))
            }
        }
        if let size = single("page_size") {
            if let number = Int(size), (1...500).contains(number) { result.pageSize = number } else {
                errors.append(FieldError(field: "page_size", message: "must be a whole number from 1 to 500"))
            }
        }
        if let token = single("page_token"), errors.isEmpty {
            guard let decoded = PageToken(encoded: token), decoded.matches(result.filter) else {
                throw Problem(status: 400, code: "invalid_page_token", title: "Invalid page token",
                              detail: "The page_token was not issued for this listing; pass it back with the same filters.",
                              errors: [FieldError(field: "page_token", message: "is not a token of this listing")])
            }
            result.beforeKey = decoded.beforeKey
        }
        guard errors.isEmpty else { throw .invalidRequest(errors) }
        return result
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
        let text = "\(filter.states.map(\.rawValue).joined(separator: ","))|\(filter.stalled.map(String.init) ?? "")|\(filter.parentID ?? "")|\(filter.rootOnly)"
        return text.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
    }
}
