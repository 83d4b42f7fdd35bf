-- Liveness and estimates: stall deadlines, the rate estimator's state, parents' roll-up,
-- and a bounded progress history per task.
ALTER TABLE tasks ADD COLUMN started_at INTEGER;
-- The next time the stall flag may change without a signal; the sweeper reads due tasks
-- from this index in deadline order, never scanning every task.
ALTER TABLE tasks ADD COLUMN stall_deadline INTEGER;
ALTER TABLE tasks ADD COLUMN rate_units REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN rate_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN sample_at INTEGER;
ALTER TABLE tasks ADD COLUMN sample_value REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_weight REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_done REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN history_points INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN history_bucket INTEGER;
CREATE INDEX tasks_by_deadline ON tasks (stall_deadline) WHERE stall_deadline IS NOT NULL;

UPDATE tasks SET started_at = created_at WHERE state <> 'pending';
UPDATE tasks SET stall_deadline = last_signal_at + stall_timeout_ms WHERE state = 'running' AND stalled = 0;

-- At most one sample per task and second (the latest of that second); thinned when a task
-- has too many, so storage per task stays bounded however many updates arrive.
CREATE TABLE history (
    task_id TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    t INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    total INTEGER,
    fraction REAL,
    PRIMARY KEY (task_id, bucket)
) STRICT, WITHOUT ROWID;
