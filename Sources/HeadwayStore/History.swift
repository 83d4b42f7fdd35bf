import HeadwayCore

/// The progress curve of each task: at most one sample per second (the latest of that
/// second), thinned to half whenever a task has more than `maximumPoints`.
public enum History {
    /// More samples than this per task are thinned.
    public static let maximumPoints = 2000

    /// One sample.
    public struct Point: Equatable, Sendable {
        public var t: EpochMilliseconds
        public var completed: Int64
        public var total: Int64?
        public var fraction: Double?
    }

    /// Records `task` as it is at `now` when it enters a new second, updating its
    /// bookkeeping (`historyPoints`, `historyBucket`), which the caller stores with the task.
    /// Within a second nothing is written: the task row itself holds the latest state, and
    /// `points(of:)` ends the curve with it.
    public static func record(_ task: inout TaskRecord, at now: EpochMilliseconds, in database: Database) throws(DatabaseError) {
        let bucket = now / 1000
        guard task.historyBucket != bucket else { return }
        try database.run("""
            INSERT INTO history (task_id, bucket, t, completed, total, fraction) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (task_id, bucket) DO UPDATE
            SET t = excluded.t, completed = excluded.completed, total = excluded.total, fraction = excluded.fraction
            """,
                         [.text(task.id), .integer(bucket), .integer(now), .integer(task.completed),
                          task.total.map { .integer($0) } ?? .null, task.fraction.map { .real($0) } ?? .null])
        task.historyBucket = bucket
        task.historyPoints += 1
        if task.historyPoints > maximumPoints {
            task.historyPoints = try thin(task.id, in: database)
        }
    }

    /// Deletes every other sample but the first and the last; returns how many remain.
    static func thin(_ taskID: String, in database: Database) throws(DatabaseError) -> Int {
        try database.run("""
            DELETE FROM history WHERE task_id = ?1 AND bucket IN (
                SELECT bucket FROM (
                    SELECT bucket, row_number() OVER (ORDER BY bucket) AS n, count(*) OVER () AS total
                    FROM history WHERE task_id = ?1
                ) AS numbered WHERE n % 2 = 0 AND n < total
            )
            """, [.text(taskID)])
        return Int(try database.scalar("SELECT count(*) FROM history WHERE task_id = ?", [.text(taskID)]) ?? 0)
    }

    /// The curve of `task`: its stored samples, oldest first, ending with its current state
    /// (when that is newer than the last sample).
    public static func points(of task: TaskRecord, in database: Database) throws(DatabaseError) -> [Point] {
        var points = try database.rows("SELECT t, completed, total, fraction FROM history WHERE task_id = ? ORDER BY bucket",
                                       [.text(task.id)]) { row in
            Point(t: row.int(0), completed: row.int(1), total: row.optionalInt(2),
                  fraction: row.isNull(3) ? nil : row.double(3))
        }
        let current = Point(t: max(task.lastProgressAt ?? task.createdAt, task.finishedAt ?? 0), completed: task.completed,
                            total: task.total, fraction: task.fraction)
        if let last = points.last, current.t > last.t || (current.t == last.t && current != last) {
            points.append(current)
        } else if points.isEmpty {
            points.append(current)
        }
        return points
    }

    /// Forgets a task's samples.
    public static func delete(_ taskID: String, in database: Database) throws(DatabaseError) {
        try database.run("DELETE FROM history WHERE task_id = ?", [.text(taskID)])
    }
}
