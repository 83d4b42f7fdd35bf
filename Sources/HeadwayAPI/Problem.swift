import Dispatch
import HeadwayCore
import HeadwayStore
import HTTPServer
import Lifecycle
import Telemetry

/// An error reply in the sense of RFC 9457 (problem details), with a stable machine `code`:
/// the one shape every refusal of the daemon takes over HTTP. `ErrorReplies` turns any
/// error into one, in one place.
struct Problem: Error, Equatable, Sendable {
    /// The HTTP status code.
    var status: Int
    /// A stable, machine-readable code such as `progress_regression`.
    var code: String
    /// A short summary that does not change between occurrences.
    var title: String
    /// What went wrong this time.
    var detail: String
    /// Field-level messages, where they apply.
    var errors: [FieldError] = []
    /// Headers the reply carries besides its content type (`Retry-After`, `Allow`, …).
    var headers: [HTTPField] = []

    /// The seconds of its `Retry-After`, if it has one: when a later try may succeed.
    var retryAfterSeconds: Int? { headers.first { $0.name == "Retry-After" }.flatMap { Int($0.value) } }

    /// The problem as `application/problem+json` text.
    var json: String {
        var object = JSONObjectWriter()
        object.string("type", "https://headway.dev/problems/\(String(code.map { $0 == "_" ? "-" : $0 }))")
        object.string("title", title)
        object.integer("status", Int64(status))
        object.string("detail", detail)
        object.string("code", code)
        if !errors.isEmpty {
            var list = JSONText()
            list.appendRaw("[")
            for (index, error) in errors.enumerated() {
                if index > 0 { list.appendRaw(",") }
                var item = JSONObjectWriter()
                item.string("field", error.field)
                item.string("message", error.message)
                list.appendRaw(item.finish())
            }
            list.appendRaw("]")
            object.raw("errors", list.text)
        }
        return object.finish()
    }

    /// The reply.
    var response: HTTPResponse {
        .json(status, json, contentType: "application/problem+json", headers: headers)
    }
}

// MARK: - The domain's refusals

extension Problem {
    /// How a refusal of the domain looks over HTTP: 400 for a request that cannot be read,
    /// 404 for a task that does not exist, 409 for a conflict with the task's state, 422 for
    /// a rule of accurate progress or a limit of the tree that the change would break, 413
    /// for a batch of more items than a request may carry, 503 when the server stores all
    /// the tasks it may.
    init(_ error: TaskError) {
        let code = error.code
        switch error {
        case .invalidRequest(let errors):
            let summary = errors.map { "\($0.field): \($0.message)" }.joined(separator: "; ")
            self.init(status: 400, code: code, title: "Invalid request", detail: summary, errors: errors)
        case .malformedJSON(let detail):
            self.init(status: 400, code: code, title: "Malformed JSON", detail: detail)
        case .invalidID:
            self.init(status: 400, code: code, title: "Invalid task id",
                      detail: "A task id is 1 to \(Limits.idLength) characters of A-Z a-z 0-9 . _ ~ : -",
                      errors: [FieldError(field: "id", message: "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}")])
        case .notFound(let id):
            self.init(status: 404, code: code, title: "Task not found", detail: "No task has the id '\(id)'.")
        case .registrationConflict(let id):
            self.init(status: 409, code: code, title: "Task already registered differently",
                      detail: "A task with the id '\(id)' exists with another definition; register it again only with the same body.")
        case .taskFinished(let id, let state):
            self.init(status: 409, code: code, title: "Task already finished",
                      detail: "The task '\(id)' finished as \(state.rawValue) and accepts no more changes.")
        case .outcomeConflict(let id, let state, let requested):
            self.init(status: 409, code: code, title: "Task finished with another outcome",
                      detail: "The task '\(id)' already finished as \(state.rawValue), not \(requested.rawValue).")
        case .progressRegression(_, let completed, let requested):
            self.init(status: 422, code: code, title: "Progress may not go backwards",
                      detail: "completed would go from \(completed) down to \(requested).",
                      errors: [FieldError(field: "completed", message: "must be at least \(completed)")])
        case .completedExceedsTotal(let completed, let total):
            self.init(status: 422, code: code, title: "Completed exceeds total",
                      detail: "completed would be \(completed) but total is \(total).",
                      errors: [FieldError(field: "completed", message: "must not exceed total (\(total))")])
        case .totalBelowCompleted(let total, let completed):
            self.init(status: 422, code: code, title: "Total below completed",
                      detail: "total \(total) is below the \(completed) units already completed.",
                      errors: [FieldError(field: "total", message: "must be at least \(completed)")])
        case .completedAndIncrement:
            self.init(status: 422, code: code, title: "Give completed or increment, not both",
                      detail: "An update sets completed or adds an increment, never both.",
                      errors: [FieldError(field: "increment", message: "must not be given together with completed")])
        case .countOutOfRange(let completed):
            self.init(status: 422, code: code, title: "Count out of range",
                      detail: "completed would be \(completed), beyond \(Limits.maxCount).",
                      errors: [FieldError(field: "increment", message: "would take completed beyond \(Limits.maxCount)")])
        case .parentNotFound(let parentID):
            self.init(status: 422, code: code, title: "Parent task not found",
                      detail: "No task has the id '\(parentID)' given as parent_id.",
                      errors: [FieldError(field: "parent_id", message: "names no task")])
        case .parentFinished(let parentID):
            self.init(status: 422, code: code, title: "Parent task already finished",
                      detail: "The parent task '\(parentID)' has finished and takes no new children.",
                      errors: [FieldError(field: "parent_id", message: "names a finished task")])
        case .ownParent(let id):
            self.init(status: 422, code: code, title: "A task cannot be its own parent",
                      detail: "parent_id equals the task's own id '\(id)'.",
                      errors: [FieldError(field: "parent_id", message: "must differ from id")])
        case .treeTooDeep(let parentID, let maximumDepth):
            self.init(status: 422, code: code, title: "Task tree too deep",
                      detail: "A child of '\(parentID)' would be deeper than \(maximumDepth) levels (a root is level 1).",
                      errors: [FieldError(field: "parent_id", message: "is at the deepest level a task may have")])
        case .tooManyChildren(let parentID, let maximumChildren):
            self.init(status: 422, code: code, title: "Too many children",
                      detail: "The task '\(parentID)' already has \(maximumChildren) unfinished children, the most a task may have (finished ones do not count).",
                      errors: [FieldError(field: "parent_id", message: "has the most unfinished children a task may have")])
        case .storageFull(let maximumTasks):
            self.init(status: 503, code: code, title: "Storage full",
                      detail: "The server already stores \(maximumTasks) tasks; retry once finished ones are deleted or forgotten.",
                      headers: [HTTPField("Retry-After", "60")])
        case .tooManyItems(let count, let maximum):
            self.init(status: 413, code: code, title: "Too many items",
                      detail: "A batch may hold at most \(maximum) updates (got \(count)); send the rest in another request.",
                      errors: [FieldError(field: "updates", message: "must hold at most \(maximum) items")])
        case .deadlineOutOfRange(let deadline, let now):
            let passed = deadline <= now
            self.init(status: 422, code: code, title: passed ? "Deadline already passed" : "Deadline too far ahead",
                      detail: "deadline \(Timestamp.rfc3339(deadline)) is " + (passed ? "not after" : "more than a year after")
                        + " the server's time of registration, \(Timestamp.rfc3339(now)).",
                      errors: [FieldError(field: "deadline", message: "must be after now and at most 366 days ahead")])
        }
    }
}

// MARK: - Access refusals

extension Problem {
    /// The realm named in every `WWW-Authenticate` challenge.
    static let realm = "headway"

    /// How a refusal of access looks (RFC 6750): 401 with a `WWW-Authenticate: Bearer`
    /// challenge for a token missing, malformed, unknown, expired or revoked; 403 for a
    /// token whose scope (with a challenge naming the scope) or task prefix does not allow
    /// the request; 400 for `access_token=` outside the event stream.
    init(_ refusal: AccessRefusal) {
        let code = refusal.code
        func challenge(_ error: String?, _ description: String? = nil, scope: String? = nil) -> HTTPField {
            var value = "Bearer realm=\"\(Self.realm)\""
            if let error { value += ", error=\"\(error)\"" }
            if let description { value += ", error_description=\"\(description)\"" }
            if let scope { value += ", scope=\"\(scope)\"" }
            return HTTPField("WWW-Authenticate", value)
        }
        switch refusal {
        case .tokenMissing:
            self.init(status: 401, code: code, title: "Token required",
                      detail: "This route needs an access token: send Authorization: Bearer <token>.",
                      headers: [challenge(nil)])
        case .tokenInvalid:
            self.init(status: 401, code: code, title: "Invalid token",
                      detail: "The access token is malformed or unknown.",
                      headers: [challenge("invalid_token", "The access token is malformed or unknown")])
        case .tokenExpired:
            self.init(status: 401, code: code, title: "Token expired", detail: "The access token has expired.",
                      headers: [challenge("invalid_token", "The access token expired")])
        case .tokenRevoked:
            self.init(status: 401, code: code, title: "Token revoked", detail: "The access token was revoked.",
                      headers: [challenge("invalid_token", "The access token was revoked")])
        case .insufficientScope(let needed):
            self.init(status: 403, code: code, title: "Insufficient scope",
                      detail: "This route needs a token with the scope '\(needed.rawValue)' (or 'admin').",
                      headers: [challenge("insufficient_scope", scope: needed.rawValue)])
        case .prefixNotAllowed(let prefix, let field):
            self.init(status: 403, code: code, title: "Task prefix not allowed",
                      detail: "This token may only touch tasks whose id starts with '\(prefix)'.",
                      errors: [FieldError(field: field, message: "must start with '\(prefix)'")])
        case .subtreeOutsidePrefix(let prefix, let taskID):
            self.init(status: 403, code: code, title: "Task prefix not allowed",
                      detail: "The subtree of '\(taskID)' holds tasks of another prefix: this token may only delete "
                          + "subtrees whose every task starts with '\(prefix)'. Nothing was deleted.")
        case .accessTokenNotAllowed:
            self.init(status: 400, code: code, title: "access_token not allowed here",
                      detail: "access_token= is accepted on GET /v1/events only; send Authorization: Bearer <token>.",
                      errors: [FieldError(field: "access_token", message: "is accepted on GET /v1/events only")])
        }
    }
}

// MARK: - The service's and the HTTP layer's refusals

extension Problem {
    /// How a refusal of the HTTP layer looks.
    init(_ refusal: HTTPRefusal, method: String) {
        switch refusal {
        case .bodyTooLarge(let limit): self = .bodyTooLarge(limit: limit)
        case .shuttingDown: self = .shuttingDown
        case .routeNotFound:
            self.init(status: 404, code: "route_not_found", title: "No such route", detail: "Nothing is served at this path.")
        case .methodNotAllowed(let allowed):
            self.init(status: 405, code: "method_not_allowed", title: "Method not allowed",
                      detail: "This path accepts \(allowed.joined(separator: ", ")), not \(method).",
                      headers: [HTTPField("Allow", allowed.joined(separator: ", "))])
        case .nulInTarget:
            self.init(status: 400, code: "invalid_request", title: "Invalid request target",
                      detail: "The request target holds a NUL byte (raw or as %00).")
        case .encodedSlashInPath:
            self.init(status: 400, code: "invalid_request", title: "Invalid request target",
                      detail: "The path may not contain an encoded slash (%2F).")
        case .tooManyQueryParameters(let limit):
            self.init(status: 431, code: "request_header_too_large", title: "Too many query parameters",
                      detail: "A request may carry at most \(limit) query parameters (--max-query-params).")
        case .targetTooLong(let limit):
            self.init(status: 414, code: "uri_too_long", title: "Request target too long",
                      detail: "A request target may be at most \(limit) bytes long.")
        case .badFraming(let reason):
            self.init(status: 400, code: "bad_framing", title: "Ambiguous message length",
                      detail: "The request has \(reason): its body's length could be read more than one way (a proxy "
                          + "in front reading it otherwise would see other requests). Send one Content-Length, or "
                          + "Transfer-Encoding: chunked alone. The connection is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .malformedHeader(let reason):
            self.init(status: 400, code: "malformed_header", title: "Malformed header line",
                      detail: "The request has \(reason); send each header as one line, name: value. The connection "
                          + "is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .hostMissing:
            self.init(status: 400, code: "host_missing", title: "Host required",
                      detail: "An HTTP/1.1 request must say Host. The connection is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .malformedRequestLine:
            self.init(status: 400, code: "malformed_request_line", title: "Malformed request line",
                      detail: "The first line of a request must be METHOD SP target SP HTTP/1.1 (or HTTP/1.0). The "
                          + "connection is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .versionNotSupported:
            self.init(status: 505, code: "http_version_not_supported", title: "HTTP version not supported",
                      detail: "This server speaks HTTP/1.1 and HTTP/1.0. The connection is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .headTooLarge(let limit):
            self.init(status: 431, code: "request_header_too_large", title: "Request head too large",
                      detail: "A request head may weigh at most \(limit) bytes: its bytes, and 64 more for each header "
                          + "line and each query parameter. The connection is closed.",
                      headers: [HTTPField("Connection", "close")])
        case .repliesUnread(let clientBytes, let totalBytes):
            self = .repliesUnread(clientBytes: clientBytes, totalBytes: totalBytes)
        }
    }

    /// The daemon is stopping; nothing was changed.
    static let shuttingDown = Problem(
        status: 503, code: "shutting_down", title: "Shutting down", detail: "The server is stopping; retry shortly.",
        headers: [HTTPField("Connection", "close"), HTTPField("Retry-After", "1")])

    static func bodyTooLarge(limit: Int) -> Problem {
        Problem(status: 413, code: "body_too_large", title: "Request body too large",
                detail: "A request body may be at most \(limit) bytes.")
    }

    static func unsupportedMediaType(_ mediaType: String) -> Problem {
        Problem(status: 415, code: "unsupported_media_type", title: "Unsupported media type",
                detail: "Send the body as application/json (got '\(mediaType.isEmpty ? "no Content-Type" : mediaType)').")
    }

    static let invalidPageToken = Problem(
        status: 400, code: "invalid_page_token", title: "Invalid page token",
        detail: "The page_token was not issued for this listing; pass it back with the same filters.",
        errors: [FieldError(field: "page_token", message: "is not a token of this listing")])

    static func tooManySubscribers(limit: Int) -> Problem {
        Problem(status: 503, code: "too_many_subscribers", title: "Too many subscribers",
                detail: "This server already serves \(limit) event streams; retry later.",
                headers: [HTTPField("Retry-After", "5")])
    }

    /// Too many reads already wait for a database connection (`--max-queued-reads`).
    static func serverBusy(waitingReads: Int) -> Problem {
        Problem(status: 503, code: "server_busy", title: "Server busy",
                detail: "\(waitingReads) reads already wait for the database; retry shortly.",
                headers: [HTTPField("Retry-After", "1")])
    }

    /// Replies already wait for their clients to take them: this client's, or everyone's,
    /// leave no room for another (`--max-unsent-reply-bytes`, `UnreadReplyBudget`).
    static func repliesUnread(clientBytes: Int, totalBytes: Int) -> Problem {
        Problem(status: 503, code: "server_busy", title: "Server busy",
                detail: "\(mebibytes(totalBytes)) of replies wait for their clients to read them (\(mebibytes(clientBytes)) "
                    + "of them yours); read your replies or retry shortly.",
                headers: [HTTPField("Retry-After", "1")])
    }

    /// `bytes` in MiB with one decimal, for details.
    private static func mebibytes(_ bytes: Int) -> String {
        let tenths = (bytes * 10 + 524_288) / 1_048_576
        return "\(tenths / 10).\(tenths % 10) MiB"
    }

    /// `GET /readyz` while the daemon should not get traffic: `detail` says why.
    static func notReady(_ detail: String) -> Problem {
        Problem(status: 503, code: "not_ready", title: "Not ready", detail: detail,
                headers: [HTTPField("Retry-After", "1"), HTTPField("Cache-Control", "no-store")])
    }

    /// Another process held the database's write lock (a `sqlite3` shell in `BEGIN
    /// IMMEDIATE`, say) for longer than the writer waits for it.
    static let databaseBusy = Problem(
        status: 503, code: "database_busy", title: "Database busy",
        detail: "Another process holds the database's write lock; nothing was changed. Retry shortly.",
        headers: [HTTPField("Retry-After", "1")])

    /// `GET /readyz` while another process holds the database's write lock: the writer
    /// waits for it, and nothing can be written meanwhile.
    static let writeLockHeld = Problem(
        status: 503, code: "database_busy", title: "Database busy",
        detail: "Another process holds the database's write lock: nothing can be written until it lets go.",
        headers: [HTTPField("Retry-After", "1"), HTTPField("Cache-Control", "no-store")])

    /// The PostgreSQL server could not be reached, or the connection broke during the
    /// batch: nothing is known to be stored (a commit cut short may have been; the `seq`
    /// of a resend makes that harmless). The daemon connects again at its next statement.
    static let databaseUnavailable = Problem(
        status: 503, code: "database_unavailable", title: "Database unavailable",
        detail: "The database server cannot be reached now; nothing is known to be stored. Retry shortly.",
        headers: [HTTPField("Retry-After", "2")])

    /// The storage under the database refused the write (`StorageFailure`): 503 with
    /// `Retry-After`; nothing of the request was stored, and the same request may succeed
    /// once space is freed or the filesystem is writable again, without a restart.
    static func storageUnavailable(_ failure: StorageFailure) -> Problem {
        switch failure {
        case .full:
            Problem(status: 503, code: "storage_full", title: "Storage full",
                    detail: "The disk holding the database is full: nothing of this request was stored. "
                        + "Retry once space is freed.",
                    headers: [HTTPField("Retry-After", "\(storageRetrySeconds)")])
        case .readOnly:
            Problem(status: 503, code: "storage_read_only", title: "Storage read-only",
                    detail: "The database cannot be written (its filesystem or file is read-only). Retry once it "
                        + "is writable again, with the same seq: a change whose commit the storage cut short may be "
                        + "found stored once the storage is repaired.",
                    headers: [HTTPField("Retry-After", "\(storageRetrySeconds)")])
        }
    }

    /// The `Retry-After` of a refusal by the storage: long enough not to hammer a daemon
    /// whose operator is freeing space, short enough to resume soon after.
    static let storageRetrySeconds = 10

    static func internalError(requestID: String) -> Problem {
        Problem(status: 500, code: "internal_error", title: "Internal error",
                detail: "The server could not complete the request (request id \(requestID)); nothing was changed.")
    }
}

/// The one place where errors become replies: a refusal of the domain, of the service or of
/// the HTTP layer becomes its problem; a stopped writer is `shutting_down`; a write the
/// storage refused is `storage_full` or `storage_read_only` (not logged per request:
/// `StorageAlarm` logs each episode once); a database whose write lock another process held
/// too long is `database_busy`; anything else is logged and answered 500
/// `internal_error` (a change that failed was rolled back).
package struct ErrorReplies: Sendable {
    let logger: Logger
    /// `database_busy` comes to every request queued while the lock was held: one line a
    /// second says so, with how many were not logged since.
    let busyLines = LogThrottle(nanoseconds: 1_000_000_000)

    /// The reply to a request that failed with `error`.
    func response(for error: any Error, _ request: HTTPRequest) -> HTTPResponse {
        problem(for: error, request).response
    }

    /// The problem `error` is shown as.
    func problem(for error: any Error, _ request: HTTPRequest) -> Problem {
        switch error {
        case let error as TaskError: return Problem(error)
        case let problem as Problem: return problem
        case let refusal as AccessRefusal: return Problem(refusal)
        case WriterError.stopped: return .shuttingDown
        case let error as DatabaseError where error.isBusy:
            if let unlogged = busyLines.admit(now: DispatchTime.now().uptimeNanoseconds) {
                logger.log(.warn, "request.database_busy", ["request_id": request.requestID, "error": "\(error)",
                                                            "not_logged_since": "\(unlogged)"])
            }
            return .databaseBusy
        case let error as DatabaseError where error.isUnavailable:
            if let unlogged = busyLines.admit(now: DispatchTime.now().uptimeNanoseconds) {
                logger.log(.warn, "request.database_unavailable", ["request_id": request.requestID, "error": "\(error)",
                                                                   "not_logged_since": "\(unlogged)"])
            }
            return .databaseUnavailable
        default:
            if let failure = (error as? DatabaseError)?.storageFailure { return .storageUnavailable(failure) }
            logger.log(.error, "request.failed", ["request_id": request.requestID, "error": "\(error)"])
            return .internalError(requestID: request.requestID)
        }
    }

    /// Shows the HTTP layer's refusals (the pipeline's renderer).
    package func response(for refusal: HTTPRefusal, _ request: HTTPRequest) -> HTTPResponse {
        Problem(refusal, method: request.method).response
    }

    package init(logger: Logger) {
        self.logger = logger
    }
}
