-- Webhooks for the channels teams use: besides json and slack, discord, ntfy, telegram,
-- pagerduty and email, each with the fields its receiver needs: `chat_id` (telegram: the
-- chat the bot writes to), `routing_key` (pagerduty: the integration key, a secret kept in
-- clear like `secret`, since every delivery carries it), `mail_from` and `mail_to`
-- (email: the sender, and the recipients as a comma-separated list; addresses never hold
-- a comma). SQLite cannot change a CHECK constraint in place, so the table is made again
-- with the wider list of formats and every webhook copied into it.
CREATE TABLE webhooks_with_formats (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    task_prefix TEXT,
    outcomes TEXT,
    format TEXT NOT NULL CHECK (format IN ('json', 'slack', 'discord', 'ntfy', 'telegram', 'pagerduty', 'email')),
    secret TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    chat_id TEXT,
    routing_key TEXT,
    mail_from TEXT,
    mail_to TEXT
) STRICT;
INSERT INTO webhooks_with_formats (id, url, events, task_prefix, outcomes, format, secret, created_at)
    SELECT id, url, events, task_prefix, outcomes, format, secret, created_at FROM webhooks;
DROP TABLE webhooks;
ALTER TABLE webhooks_with_formats RENAME TO webhooks;
