/// A message about one field of a request body or query.
public struct FieldError: Equatable, Sendable {
    /// The field's name as the client wrote it (`total`, `metadata`, `page_size`).
    public var field: String
    /// What is wrong with it, in plain words.
    public var message: String

    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }
}

/// Why the domain refuses a request or a change: every refusal of request parsing and of
/// the task rules is one of these, and a refused request changes nothing. Each has a
/// stable machine `code`; how it is shown to a client (an HTTP status and an RFC 9457
/// problem) is decided by the service, in one place.
public enum TaskError: Error, Equatable, Sendable {
    /// Fields of a body or query that are missing, unknown or out of range, one message each.
    case invalidRequest([FieldError])
    /// A body that is not JSON, with the parser's reason.
    case malformedJSON(String)
    /// A task id that is not 1…128 characters of `[A-Za-z0-9._~:-]`.
    case invalidID(String)
    /// No task has this id.
    case notFound(String)
    /// A task with this id exists with another definition.
    case registrationConflict(String)
    /// The task has finished (as `state`) and accepts no more changes.
    case taskFinished(id: String, state: TaskState)
    /// The task finished as `state`; finishing as `requested` conflicts.
    case outcomeConflict(id: String, state: TaskState, requested: TaskState)
    /// `completed` would go down from `completed` to `requested`.
    case progressRegression(id: String, completed: Int64, requested: Int64)
    /// `completed` would exceed `total`.
    case completedExceedsTotal(completed: Int64, total: Int64)
    /// `total` would fall below the units already completed.
    case totalBelowCompleted(total: Int64, completed: Int64)
    /// An update gave both `completed` and `increment`.
    case completedAndIncrement
    /// An increment would take `completed` to this, beyond `Limits.maxCount`.
    case countOutOfRange(Int64)
    /// The `parent_id` of a registration names no task.
    case parentNotFound(String)
    /// The `parent_id` of a registration names a finished task.
    case parentFinished(String)
    /// A registration names the task itself as its parent.
    case ownParent(String)
    /// The child would be deeper than the deepest a task may be (`--max-depth`; a root is 1).
    case treeTooDeep(parentID: String, maximumDepth: Int)
    /// The parent already has the most children a task may have (`--max-children`).
    case tooManyChildren(parentID: String, maximumChildren: Int)
    /// The database already holds the most tasks it may (`--max-tasks`).
    case storageFull(maximumTasks: Int64)
    /// A batch holds `count` items, more than the `maximum` one request may carry.
    case tooManyItems(count: Int, maximum: Int)
    /// A new task's `deadline` has passed already at `now`, or lies more than a year ahead.
    case deadlineOutOfRange(deadline: EpochMilliseconds, now: EpochMilliseconds)

    /// The stable machine-readable code of the refusal (`progress_regression`, …).
    public var code: String {
        switch self {
        case .invalidRequest: "invalid_request"
        case .malformedJSON: "malformed_json"
        case .invalidID: "invalid_id"
        case .notFound: "not_found"
        case .registrationConflict: "task_conflict"
        case .taskFinished: "task_finished"
        case .outcomeConflict: "outcome_conflict"
        case .progressRegression: "progress_regression"
        case .completedExceedsTotal: "completed_exceeds_total"
        case .totalBelowCompleted: "total_below_completed"
        case .completedAndIncrement: "completed_and_increment"
        case .countOutOfRange: "count_out_of_range"
        case .parentNotFound: "parent_not_found"
        case .parentFinished: "parent_finished"
        case .ownParent: "invalid_parent"
        case .treeTooDeep: "tree_too_deep"
        case .tooManyChildren: "too_many_children"
        case .storageFull: "storage_full"
        case .tooManyItems: "too_many_items"
        case .deadlineOutOfRange: "deadline_out_of_range"
        }
    }
}
