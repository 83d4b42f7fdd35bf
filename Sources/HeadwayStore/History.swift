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

    /// Records `task` as it is at `now`, updating its bookkeeping (`historyPoints`,
    /// `historyBucket`), which the caller then stores with the task.
    public static func record(_ task: inout TaskRecord, at now: EpochMilliseconds, in database: Database) throws(SQLiteError) {
        let bucket = now / 1000
        let values: [SQLValue] = [.text(task.id), .integer(bucket), .integer(now), .integer(task.completed),
                                  task.total.map { .integer($0) } ?? .null, task.fraction.map { .real($0) } ?? .null]
        try database.run("""
            INSERT INTO history (task_id, bucket, t, completed, total, fraction) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (task_id, bucket) DO UPDATE
            SET t = excluded.t, completed = excluded.completed, total = excluded.total, fraction = excluded.fraction
            """, values)
        guard task.historyBucket != bucket else { return }
        task.historyBucket = bucket
        task.historyPoints += 1
        if task.historyPoints > maximumPoints {
            task.historyPoints = try thin(task.id, in: database)
        }
    }

    /// Deletes every other sample but the first and the last; returns how many remain.
    static func thin(_ taskID: String, in database: Database) throws(SQLiteError) -> Int {
        try database.run("""
            DELETE FROM history WHERE task_id = ?1 AND bucket IN (
                SELECT bucket FROM (
                    SELECT bucket, row_number() OVER (ORDER BY bucket) AS n, count(*) OVER () AS total
                    FROM history WHERE task_id = ?1
                ) WHERE n % 2 = 0 AND n < total
            )
            """, [.text(taskID)])
        return Int(try database.scalar("SELECT count(*) FROM history WHERE task_id = ?", [.text(taskID)]) ?? 0)
    }

    /// Every sample of a task, oldest first.
    public static func points(_ taskID: String, in database: Database) throws(SQLiteError) -> [Point] {
        try database.rows("SELECT t, completed, total, fraction FROM history WHERE task_id = ? ORDER BY bucket",
                          [.text(taskID)]) { row in
            Point(t: row.int(0), completed: row.int(1), total: row.optionalInt(2),
                  fraction: row.isNull(3) ? nil : row.double(3))
        }
    }

    /// Forgets a task's samples.
    public static func delete(_ taskID: String, in database: Database) throws(SQLiteError) {
        try database.run("DELETE FROM history WHERE task_id = ?", [.text(taskID)])
    }
}
