-- Tokens are kept in memory incrementally and counted for `--max-tokens` (see
-- migrations/0009_token_changes.sql): `tokens.changed` is the generation that last changed
-- the row, `token_state.deleted` the generation of the last delete, `token_state.live`
-- the tokens neither revoked nor expired as of `expired_through` (NULL: not known).
ALTER TABLE tokens ADD COLUMN changed bigint NOT NULL DEFAULT 0;
CREATE INDEX tokens_by_change ON tokens (changed);
CREATE INDEX tokens_unrevoked_by_expiry ON tokens (expires_at) WHERE revoked_at IS NULL;

ALTER TABLE token_state ADD COLUMN deleted bigint NOT NULL DEFAULT 0;
ALTER TABLE token_state ADD COLUMN live bigint;
ALTER TABLE token_state ADD COLUMN expired_through bigint NOT NULL DEFAULT 0;
UPDATE token_state SET live = (SELECT count(*) FROM tokens WHERE revoked_at IS NULL);

DROP TRIGGER tokens_changed ON tokens;
DROP FUNCTION token_state_follow();

-- Before the row is written: the state row is upserted (one deleted by hand is made
-- again, with `live` unknown and `deleted` set so that every daemon reloads) and the row
-- is stamped with the new generation.
CREATE FUNCTION token_state_follow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stamp bigint;
    -- Whether the row before and after counts in `live` (NULL expiry: never expires).
    new_unrevoked boolean := false;
    new_expires bigint;
    old_unrevoked boolean := false;
    old_expires bigint;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        new_unrevoked := NEW.revoked_at IS NULL;
        new_expires := NEW.expires_at;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        old_unrevoked := OLD.revoked_at IS NULL;
        old_expires := OLD.expires_at;
    END IF;
    INSERT INTO token_state AS s (id, generation, required, deleted, live) VALUES (1, 1, 1, 1, NULL)
    ON CONFLICT (id) DO UPDATE SET
        generation = s.generation + 1,
        required = CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE s.required END,
        deleted = CASE WHEN TG_OP = 'DELETE' THEN s.generation + 1 ELSE s.deleted END,
        live = s.live
            + CASE WHEN new_unrevoked AND coalesce(new_expires > s.expired_through, true) THEN 1 ELSE 0 END
            - CASE WHEN old_unrevoked AND coalesce(old_expires > s.expired_through, true) THEN 1 ELSE 0 END
    RETURNING s.generation INTO stamp;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.changed := stamp;
    RETURN NEW;
END;
$$;
CREATE TRIGGER tokens_changed BEFORE INSERT OR UPDATE OR DELETE ON tokens
FOR EACH ROW EXECUTE FUNCTION token_state_follow();
