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

/// An error reply in the sense of RFC 9457 (problem details), with a stable machine
/// `code`. Every refusal of the API is one of these, and a refused request changes nothing.
public struct Problem: Error, Equatable, Sendable {
    /// The HTTP status code.
    public var status: Int
    /// A stable, machine-readable code such as `progress_regression`.
    public var code: String
    /// A short summary that does not change between occurrences.
    public var title: String
    /// What went wrong this time.
    public var detail: String
    /// Field-level messages, where they apply.
    public var errors: [FieldError]

    public init(status: Int, code: String, title: String, detail: String, errors: [FieldError] = []) {
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.errors = errors
    }

    /// The problem as `application/problem+json` text.
    public var json: String {
        var object = JSONObjectWriter()
        object.string("type", "https://headway.dev/problems/\(code.replacingUnderscores())")
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
}

extension String {
    fileprivate func replacingUnderscores() -> String {
        String(map { $0 == "_" ? "-" : $0 })
    }
}

/// The problems the task API can answer with, in one place so codes stay stable.
extension Problem {
    public static func malformedJSON(_ detail: String = "The request body is not valid JSON.") -> Problem {
        Problem(status: 400, code: "malformed_json", title: "Malformed JSON", detail: detail)
    }

    public static func invalidRequest(_ errors: [FieldError]) -> Problem {
        let summary = errors.map { "\($0.field): \($0.message)" }.joined(separator: "; ")
        return Problem(status: 400, code: "invalid_request", title: "Invalid request",
                       detail: summary, errors: errors)
    }

    public static func invalidID(_ id: String) -> Problem {
        Problem(status: 400, code: "invalid_id", title: "Invalid task id",
                detail: "A task id is 1 to \(Limits.idLength) characters of A-Z a-z 0-9 . _ ~ : -",
                errors: [FieldError(field: "id", message: "must match [A-Za-z0-9._~:-]{1,\(Limits.idLength)}")])
    }

    public static func notFound(_ id: String) -> Problem {
        Problem(status: 404, code: "not_found", title: "Task not found", detail: "No task has the id '\(id)'.")
    }

    public static func registrationConflict(_ id: String) -> Problem {
        Problem(status: 409, code: "task_conflict", title: "Task already registered differently",
                detail: "A task with the id '\(id)' exists with another definition; register it again only with the same body.")
    }

    public static func taskFinished(_ task: TaskRecord) -> Problem {
        Problem(status: 409, code: "task_finished", title: "Task already finished",
                detail: "The task '\(task.id)' finished as \(task.state.rawValue) and accepts no more changes.")
    }

    public static func outcomeConflict(_ task: TaskRecord, requested: TaskState) -> Problem {
        Problem(status: 409, code: "outcome_conflict", title: "Task finished with another outcome",
                detail: "The task '\(task.id)' already finished as \(task.state.rawValue), not \(requested.rawValue).")
    }

    public static func progressRegression(_ task: TaskRecord, requested: Int64) -> Problem {
        Problem(status: 422, code: "progress_regression", title: "Progress may not go backwards",
                detail: "completed would go from \(task.completed) down to \(requested).",
                errors: [FieldError(field: "completed", message: "must be at least \(task.completed)")])
    }

    public static func completedExceedsTotal(completed: Int64, total: Int64) -> Problem {
        Problem(status: 422, code: "completed_exceeds_total", title: "Completed exceeds total",
                detail: "completed would be \(completed) but total is \(total).",
                errors: [FieldError(field: "completed", message: "must not exceed total (\(total))")])
    }

    public static func totalBelowCompleted(total: Int64, completed: Int64) -> Problem {
        Problem(status: 422, code: "total_below_completed", title: "Total below completed",
                detail: "total \(total) is below the \(completed) units already completed.",
                errors: [FieldError(field: "total", message: "must be at least \(completed)")])
    }

    public static func completedAndIncrement() -> Problem {
        Problem(status: 422, code: "completed_and_increment", title: "Give completed or increment, not both",
                detail: "An update sets completed or adds an increment, never both.",
                errors: [FieldError(field: "increment", message: "must not be given together with completed")])
    }

    public static func countOutOfRange(_ completed: Int64) -> Problem {
        Problem(status: 422, code: "count_out_of_range", title: "Count out of range",
                detail: "completed would be \(completed), beyond \(Limits.maxCount).",
                errors: [FieldError(field: "increment", message: "would take completed beyond \(Limits.maxCount)")])
    }

    public static func parentNotFound(_ parentID: String) -> Problem {
        Problem(status: 422, code: "parent_not_found", title: "Parent task not found",
                detail: "No task has the id '\(parentID)' given as parent_id.",
                errors: [FieldError(field: "parent_id", message: "names no task")])
    }

    public static func parentFinished(_ parentID: String) -> Problem {
        Problem(status: 422, code: "parent_finished", title: "Parent task already finished",
                detail: "The parent task '\(parentID)' has finished and takes no new children.",
                errors: [FieldError(field: "parent_id", message: "names a finished task")])
    }
}
