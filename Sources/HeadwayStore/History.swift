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

    /// A sample to store: the point of `taskID` for the second `bucket`.
    public struct Sample: Equatable, Sendable {
        public var taskID: String
        public var bucket: Int64
        public var point: Point
    }

    /// The sample of `task` as it is at `now` when it enters a new second, with its
    /// bookkeeping (`historyPoints`, `historyBucket`) moved on, which the caller stores with
    /// the task together with the sample (`TaskStore` holds both until the batch's end);
    /// nil within a second: the task row itself holds the latest state, and `points(of:)`
    /// ends the curve with it. `needsThinning` tells that the task then holds more than
    /// `maximumPoints` samples: the sample must be stored at once and the task thinned.
    public static func sample(_ task: inout TaskRecord, at now: EpochMilliseconds) -> (sample: Sample, needsThinning: Bool)? {
        let bucket = now / 1000
        guard task.historyBucket != bucket else { return nil }
        task.historyBucket = bucket
        task.historyPoints += 1
        let sample = Sample(taskID: task.id, bucket: bucket,
                            point: Point(t: now, completed: task.completed, total: task.total, fraction: task.fraction))
        return (sample, task.historyPoints > maximumPoints)
    }

    /// Records `task` as it is at `now` when it enters a new second (`sample`), at once;
    /// thins its samples when they are too many.
    public static func record(_ task: inout TaskRecord, at now: EpochMilliseconds, in database: Database) throws(DatabaseError) {
        guard let (sample, needsThinning) = sample(&task, at: now) else { return }
        try insert([sample], in: database)
        if needsThinning { task.historyPoints = try thin(task.id, in: database) }
    }

    /// The statement storing one sample (the latest of its second replaces an earlier one).
    static let insertSQL = """
        INSERT INTO history (task_id, bucket, t, completed, total, fraction) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT (task_id, bucket) DO UPDATE
        SET t = excluded.t, completed = excluded.completed, total = excluded.total, fraction = excluded.fraction
        """

    /// Stores `samples`, one statement each (`SQLDialect.writeHeldTasks` may store many at once).
    static func insert(_ samples: [Sample], in database: Database) throws(DatabaseError) {
        for sample in samples {
            try database.run(insertSQL, [.text(sample.taskID), .integer(sample.bucket), .integer(sample.point.t),
                                         .integer(sample.point.completed), sample.point.total.map { .integer($0) } ?? .null,
                                         sample.point.fraction.map { .real($0) } ?? .null])
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
