-- Access tokens. Only the SHA-256 of a secret is stored (hex). The daemon never deletes a
-- token: revoking sets revoked_at. Once any token has existed the daemon keeps asking for
-- one: `token_state.required` is set by the first token (a trigger) and never cleared by
-- the daemon, so deleting rows by hand does not reopen it; nor does deleting the
-- `token_state` row (a missing row reads as required). `token_state.generation` moves
-- with every token inserted, updated or deleted (triggers, so a `headwayd token create`
-- run against a live database is seen too): the daemon compares it about once a second
-- and reloads the table only when it moved.
CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    task_prefix TEXT,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    last_used_at INTEGER,
    revoked_at INTEGER
) STRICT;

CREATE TABLE token_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL,
    required INTEGER NOT NULL DEFAULT 0 CHECK (required IN (0, 1))
) STRICT;
INSERT INTO token_state (id, generation, required) VALUES (1, 0, 0);

-- Upserts: a `token_state` row deleted by hand is made again by the next change, and the
-- daemon reads a missing row as "required".
CREATE TRIGGER tokens_inserted AFTER INSERT ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required) VALUES (1, 1, 1)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1, required = 1;
END;

CREATE TRIGGER tokens_changed AFTER UPDATE ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required) VALUES (1, 1, 1)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1;
END;

CREATE TRIGGER tokens_deleted AFTER DELETE ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required) VALUES (1, 1, 1)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1;
END;
