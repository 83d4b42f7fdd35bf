-- Webhooks and their outbox of deliveries: the same tables and meanings as SQLite's
-- migrations/0007_webhooks.sql, in PostgreSQL's dialect. The signing secret is kept in
-- clear: every delivery is signed with it.
CREATE TABLE webhooks (
    id text PRIMARY KEY,
    url text NOT NULL,
    events text NOT NULL,
    task_prefix text,
    outcomes text,
    format text NOT NULL CHECK (format IN ('json', 'slack')),
    secret text NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE webhook_deliveries (
    webhook_id text NOT NULL,
    event_id bigint NOT NULL,
    event_type text NOT NULL,
    body text NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    created_at bigint NOT NULL,
    next_attempt_at bigint NOT NULL,
    last_attempt_at bigint,
    last_status integer,
    last_error text,
    last_latency_ms bigint,
    PRIMARY KEY (webhook_id, event_id)
);

CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, event_id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (webhook_id, event_id) WHERE state <> 'pending';
