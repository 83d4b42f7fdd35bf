-- A webhook's task.updated deliveries coalesce: while a task's newest delivery for the
-- webhook is a task.updated waiting unsent (pending, never attempted), a newer update of
-- the same task replaces its body in place instead of adding a row. `open_task_id` names
-- the task of such a row while it may still take newer updates; it is cleared when a
-- later delivery of the same task (another kind) is queued for the webhook, so that a
-- task's events keep their order. The row keeps its place in the queue (its `event_id`);
-- its `revision` counts the replacements and is part of the delivery id, so a receiver
-- that drops repeated ids still takes the newer body; its `created_at` becomes the newest
-- update's (the retry window counts from it). A receiver slower than the updates so
-- falls behind by about one delivery per task, not by every update. Rows written before
-- this migration do not coalesce.
ALTER TABLE webhook_deliveries ADD COLUMN open_task_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_open_updates ON webhook_deliveries (webhook_id, open_task_id)
    WHERE open_task_id IS NOT NULL AND state = 'pending' AND attempts = 0;
