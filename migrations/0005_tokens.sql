-- Access tokens. Only the SHA-256 of a secret is stored (hex). A token is never deleted:
-- revoking sets revoked_at, so that once any token has existed the daemon keeps asking
-- for one. `token_state.generation` moves with every new or revoked token (triggers, so a
-- `headwayd token create` run against a live database is seen too): the daemon compares
-- it about once a second and reloads the table only when it moved.
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
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO token_state (generation) VALUES (0);

CREATE TRIGGER tokens_inserted AFTER INSERT ON tokens
BEGIN
    UPDATE token_state SET generation = generation + 1;
END;

CREATE TRIGGER tokens_changed AFTER UPDATE OF name, scopes, task_prefix, expires_at, revoked_at ON tokens
BEGIN
    UPDATE token_state SET generation = generation + 1;
END;
