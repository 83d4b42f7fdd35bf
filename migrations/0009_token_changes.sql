-- Tokens are kept in memory incrementally and counted for `--max-tokens`.
--
-- `tokens.changed` is the generation that last changed the row: a daemon that has applied
-- every change up to generation G reads only `changed > G`, never the whole table. A
-- deleted row leaves nothing to read, so `token_state.deleted` records the generation of
-- the last delete: past what a daemon has applied, it reloads the table.
--
-- `token_state.live` counts the tokens neither revoked nor expired as of
-- `expired_through` (a time in milliseconds), kept by the triggers; the daemon subtracts
-- the tokens that expired since (an index range: `tokens_unrevoked_by_expiry`) when it
-- checks the bound, and moves `expired_through` forward. NULL means not known (the state
-- row was made again after a delete by hand): the daemon counts the table once.
ALTER TABLE tokens ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tokens_by_change ON tokens (changed);
CREATE INDEX tokens_unrevoked_by_expiry ON tokens (expires_at) WHERE revoked_at IS NULL;

ALTER TABLE token_state ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE token_state ADD COLUMN live INTEGER;
ALTER TABLE token_state ADD COLUMN expired_through INTEGER NOT NULL DEFAULT 0;
UPDATE token_state SET live = (SELECT count(*) FROM tokens WHERE revoked_at IS NULL);

DROP TRIGGER tokens_inserted;
DROP TRIGGER tokens_changed;
DROP TRIGGER tokens_deleted;

-- Each trigger upserts the state row (one deleted by hand is made again, with `live`
-- unknown and `deleted` set so that every daemon reloads) and then stamps the row with
-- the new generation. The stamp (`UPDATE … SET changed`) names a column the update
-- trigger does not watch, so it fires no trigger itself.
CREATE TRIGGER tokens_inserted AFTER INSERT ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required, deleted, live) VALUES (1, 1, 1, 1, NULL)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1, required = 1,
            live = live + (NEW.revoked_at IS NULL AND coalesce(NEW.expires_at > expired_through, 1));
    UPDATE tokens SET changed = (SELECT generation FROM token_state WHERE id = 1) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER tokens_changed
AFTER UPDATE OF id, name, scopes, task_prefix, secret_hash, created_at, expires_at, last_used_at, revoked_at ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required, deleted, live) VALUES (1, 1, 1, 1, NULL)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1,
            live = live + (NEW.revoked_at IS NULL AND coalesce(NEW.expires_at > expired_through, 1))
                - (OLD.revoked_at IS NULL AND coalesce(OLD.expires_at > expired_through, 1));
    UPDATE tokens SET changed = (SELECT generation FROM token_state WHERE id = 1) WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER tokens_deleted AFTER DELETE ON tokens
BEGIN
    INSERT INTO token_state (id, generation, required, deleted, live) VALUES (1, 1, 1, 1, NULL)
        ON CONFLICT (id) DO UPDATE SET generation = generation + 1, deleted = generation + 1,
            live = live - (OLD.revoked_at IS NULL AND coalesce(OLD.expires_at > expired_through, 1));
END;
