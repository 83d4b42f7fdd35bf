import Foundation
import HeadwayCore

/// Why a call to headwayd did not succeed.
public enum HeadwayError: Error, Sendable, Equatable {
    /// The server refused with a problem document (RFC 9457), its `code` telling why.
    case problem(HeadwayProblem)
    /// The server answered an error status without a problem document (a proxy's 502, say:
    /// the server behind it may have done what was asked).
    case status(Int)
    /// The server could not be reached, or the exchange broke off: the reason, as libcurl
    /// gives it.
    case unreachable(String)
    /// The reply could not be used: larger than the client takes, or not the JSON the call
    /// expects.
    case invalidReply(String)
    /// The Swift task that made the call was canceled before the reply came.
    case canceled

    /// The problem's machine code; nil for errors that are not problem documents.
    public var code: ProblemCode? {
        if case .problem(let problem) = self { return problem.code }
        return nil
    }

    /// The HTTP status the server answered with; nil when no reply came.
    public var status: Int? {
        switch self {
        case .problem(let problem): problem.status
        case .status(let status): status
        case .unreachable, .invalidReply, .canceled: nil
        }
    }

    /// Whether the same call may succeed later: the server was away, busy (429) or failing (5xx).
    public var isTransient: Bool {
        switch self {
        case .unreachable: true
        case .problem, .status: status.map { $0 == 429 || $0 >= 500 } ?? false
        case .invalidReply, .canceled: false
        }
    }

    /// The error a reply that is not 2xx stands for: its problem document when it has one
    /// (`application/problem+json`, an object with a string `title` and `code`), else the
    /// bare status.
    package static func refusal(status: Int, contentType: String?, body: [UInt8]) -> HeadwayError {
        guard contentType == "application/problem+json", case .object(let fields)? = JSONValue.parse(body),
              case .string(let title)? = fields["title"], case .string(let code)? = fields["code"] else {
            return .status(status)
        }
        var detail = ""
        if case .string(let text)? = fields["detail"] { detail = text }
        var fieldErrors: [HeadwayProblem.FieldError] = []
        if case .array(let entries)? = fields["errors"] {
            for case .object(let entry) in entries {
                guard case .string(let field)? = entry["field"] else { continue }
                var message = ""
                if case .string(let text)? = entry["message"] { message = text }
                fieldErrors.append(HeadwayProblem.FieldError(field: field, message: message))
            }
        }
        return .problem(HeadwayProblem(code: ProblemCode(rawValue: code), status: status, title: title,
                                       detail: detail, errors: fieldErrors))
    }
}

extension HeadwayError: CustomStringConvertible {
    /// The error in one line: a problem's status, title, detail and code.
    public var description: String {
        switch self {
        case .problem(let problem): "\(problem.status) \(problem.title): \(problem.detail) (\(problem.code))"
        case .status(let status): "HTTP \(status) without a problem document"
        case .unreachable(let reason): "cannot reach the server: \(reason)"
        case .invalidReply(let reason): reason
        case .canceled: "canceled"
        }
    }
}

/// A refusal from headwayd: an `application/problem+json` document.
public struct HeadwayProblem: Sendable, Equatable {
    /// One field a request got wrong (`output[3]`), and why.
    public struct FieldError: Sendable, Equatable {
        /// The field, as the request named it (`output[3]`).
        public var field: String
        /// What is wrong with it.
        public var message: String

        /// A field error.
        public init(field: String, message: String) {
            self.field = field
            self.message = message
        }
    }

    /// The stable machine code (`not_found`, `task_finished`…), the one to branch on.
    public var code: ProblemCode
    /// The HTTP status of the reply.
    public var status: Int
    /// A short, fixed summary of the kind of problem.
    public var title: String
    /// What went wrong with this request, for a person.
    public var detail: String
    /// The fields at fault, for `invalid_request` and `malformed_json`.
    public var errors: [FieldError]

    /// A problem, as a test or a wrapper may make one.
    public init(code: ProblemCode, status: Int, title: String, detail: String, errors: [FieldError] = []) {
        self.code = code
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
    }
}

/// A problem's machine code. The codes a runner meets are named here; any other code the
/// server sends (see `openapi.yaml`) is kept as it came.
public struct ProblemCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The code as the server spells it (`not_found`).
    public let rawValue: String

    /// The code spelled `rawValue`.
    public init(rawValue: String) { self.rawValue = rawValue }
    /// The code spelled `value`.
    public init(stringLiteral value: String) { rawValue = value }
    /// The code as the server spells it.
    public var description: String { rawValue }

    /// No task (or webhook, or token) has that id.
    public static let notFound: ProblemCode = "not_found"
    /// The task has finished: it takes no more progress or heartbeats.
    public static let taskFinished: ProblemCode = "task_finished"
    /// The id is registered with another body.
    public static let taskConflict: ProblemCode = "task_conflict"
    /// The task finished with another outcome.
    public static let outcomeConflict: ProblemCode = "outcome_conflict"
    /// `completed` lower than the task's.
    public static let progressRegression: ProblemCode = "progress_regression"
    /// `completed` above `total`.
    public static let completedExceedsTotal: ProblemCode = "completed_exceeds_total"
    /// `total` below `completed`.
    public static let totalBelowCompleted: ProblemCode = "total_below_completed"
    /// A field of the request is wrong (`HeadwayProblem.errors` names it).
    public static let invalidRequest: ProblemCode = "invalid_request"
    /// The body is not JSON.
    public static let malformedJSON: ProblemCode = "malformed_json"
    /// The id is not a valid task id.
    public static let invalidID: ProblemCode = "invalid_id"
    /// The parent named does not exist.
    public static let parentNotFound: ProblemCode = "parent_not_found"
    /// The parent named has finished.
    public static let parentFinished: ProblemCode = "parent_finished"
    /// The parent has as many unfinished children as the server allows.
    public static let tooManyChildren: ProblemCode = "too_many_children"
    /// No token was given and the server needs one.
    public static let tokenMissing: ProblemCode = "token_missing"
    /// The token is unknown.
    public static let tokenInvalid: ProblemCode = "token_invalid"
    /// The token may not do this.
    public static let insufficientScope: ProblemCode = "insufficient_scope"
}
