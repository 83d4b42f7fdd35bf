-- A webhook's task.updated deliveries coalesce (see migrations/0008_webhook_updates_coalesce.sql):
-- while one of a task waits unsent, a newer task.updated of the same task replaces its body
-- in place; `revision` counts the replacements and is part of the delivery id.
ALTER TABLE webhook_deliveries ADD COLUMN task_id text;
ALTER TABLE webhook_deliveries ADD COLUMN revision integer NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_unsent_updates ON webhook_deliveries (webhook_id, task_id)
    WHERE state = 'pending' AND attempts = 0 AND event_type = 'task.updated';
