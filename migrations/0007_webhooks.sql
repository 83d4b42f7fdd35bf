-- Webhooks: where the daemon posts its important events, and the outbox of deliveries.
-- `events` and `outcomes` are comma-separated lists (`outcomes` NULL: every outcome of
-- task.finished). The signing secret is kept in clear: every delivery is signed with it
-- (HMAC-SHA256), so only its holder should read this table; the API shows it once.
CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    task_prefix TEXT,
    outcomes TEXT,
    format TEXT NOT NULL CHECK (format IN ('json', 'slack')),
    secret TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- One row per event per matching webhook, written in the transaction of the change that
-- caused it (so a committed change never loses its deliveries). `event_id` is the
-- change number; `body` the exact bytes posted at every attempt. A pending row is sent
-- at `next_attempt_at`, the oldest of its webhook first; `last_*` describe the latest
-- attempt (status 0: no HTTP answer, see `last_error`). Times are milliseconds since the
-- Unix epoch.
CREATE TABLE webhook_deliveries (
    webhook_id TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    last_attempt_at INTEGER,
    last_status INTEGER,
    last_error TEXT,
    last_latency_ms INTEGER,
    PRIMARY KEY (webhook_id, event_id)
) STRICT;

-- The oldest pending delivery of each webhook, found without reading the delivered ones.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, event_id) WHERE state = 'pending';
-- The finished ones, which retention thins out, found without reading a backlog of pending ones.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (webhook_id, event_id) WHERE state <> 'pending';
