-- A webhook's task.updated deliveries coalesce (see migrations/0008_webhook_updates_coalesce.sql):
-- while a task's newest delivery for the webhook is a task.updated waiting unsent, a newer
-- update of the task replaces its body in place; `open_task_id` names the task while the
-- row may still take updates, `revision` counts the replacements (part of the delivery id).
ALTER TABLE webhook_deliveries ADD COLUMN open_task_id text;
ALTER TABLE webhook_deliveries ADD COLUMN revision integer NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_open_updates ON webhook_deliveries (webhook_id, open_task_id)
    WHERE open_task_id IS NOT NULL AND state = 'pending' AND attempts = 0;
