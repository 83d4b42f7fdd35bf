-- Webhooks for the channels teams use: the same formats and fields as SQLite's
-- migrations/0015_webhook_formats.sql (`chat_id`, `routing_key`, `mail_from`, `mail_to`,
-- the last a comma-separated list), in PostgreSQL's dialect, which changes the CHECK in place.
ALTER TABLE webhooks DROP CONSTRAINT webhooks_format_check;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_format_check
    CHECK (format IN ('json', 'slack', 'discord', 'ntfy', 'telegram', 'pagerduty', 'email'));
ALTER TABLE webhooks ADD COLUMN chat_id text;
ALTER TABLE webhooks ADD COLUMN routing_key text;
ALTER TABLE webhooks ADD COLUMN mail_from text;
ALTER TABLE webhooks ADD COLUMN mail_to text;
