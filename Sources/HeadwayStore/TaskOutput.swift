import HeadwayCore

/// SQL for `task_output`: each task's output tail (`OutputTail`), one row per task holding
/// the tail as the API shows it (a JSON array, oldest line first). A row is at most 50
/// lines and 8 KiB of their text, however fast a runner sends lines; an append of any
/// number of lines is one primary-key read (none for a task that had no output yet) and
/// one upsert, and the task's `last_output` rides in its row's update, which the writer
/// makes anyway.
public enum TaskOutput {
    /// Appends `lines`, arrived at `now`, to the tail of `task` (as stored before the change:
    /// without `lastOutput` it has no tail yet, and nothing is read).
    static func append(_ lines: [String], to task: TaskRecord, at now: EpochMilliseconds,
                       in database: Database) throws(DatabaseError) {
        var tail = OutputTail()
        if task.lastOutput != nil, let stored = try self.json(of: task.id, in: database) {
            tail = OutputTail(json: stored) ?? OutputTail()
        }
        try database.run("""
            INSERT INTO task_output (task_id, lines) VALUES (?, ?)
            ON CONFLICT (task_id) DO UPDATE SET lines = excluded.lines
            """, [.text(task.id), .text(tail.appending(lines, at: now).json)])
    }

    /// The tail of the task `id` as stored: a JSON array of `{"t", "line"}`, oldest first;
    /// nil when it has none.
    public static func json(of id: String, in database: Database) throws(DatabaseError) -> String? {
        try database.rows("SELECT lines FROM task_output WHERE task_id = ?", [.text(id)]) { $0.text(0) }.first
    }

    /// Forgets a task's tail.
    static func delete(_ taskID: String, in database: Database) throws(DatabaseError) {
        try database.run("DELETE FROM task_output WHERE task_id = ?", [.text(taskID)])
    }
}
