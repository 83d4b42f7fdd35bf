-- A webhook's task.updated deliveries coalesce: while one of a task waits unsent (pending,
-- never attempted), a newer task.updated of the same task replaces its body in place
-- instead of adding a row. The row keeps its place in the queue (its `event_id`); its
-- `revision` counts the replacements and is part of the delivery id, so a receiver that
-- drops repeated ids still takes the newer body. A receiver slower than the updates so
-- falls behind by at most one delivery per task (and one more per task being retried),
-- not by every update. Rows written before this migration have no task id and do not
-- coalesce.
ALTER TABLE webhook_deliveries ADD COLUMN task_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_unsent_updates ON webhook_deliveries (webhook_id, task_id)
    WHERE state = 'pending' AND attempts = 0 AND event_type = 'task.updated';
