-- The search's text apart from the rows that change. Every visible update of a task moves
-- its indexed `change_seq`, so no update of `tasks` is HOT and each index of `tasks` gets
-- an entry again; a trigram index there was rewritten with every update although a
-- task's id and name never change. Here each task's id and name are written once, when
-- the task is inserted, and removed when it is deleted (whoever deletes it: the API, a
-- subtree delete, retention, or a hand), by triggers: the daemon's updates never name
-- `seq`, `id` or `name`, so they never touch this table (an update by hand that does is
-- followed). `seq` is the task's key; the columns keep the collations of `tasks` (the
-- id's "C", the name's the database's), so `ILIKE` matches exactly as it did on `tasks`.
CREATE TABLE task_search (
    seq bigint PRIMARY KEY,
    id text COLLATE "C" NOT NULL,
    name text NOT NULL
);
INSERT INTO task_search (seq, id, name) SELECT seq, id, name FROM tasks;
CREATE INDEX task_search_text ON task_search USING gin (id gin_trgm_ops, name gin_trgm_ops);
DROP INDEX tasks_search;

CREATE FUNCTION task_search_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM task_search WHERE seq = OLD.seq;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO task_search (seq, id, name) VALUES (NEW.seq, NEW.id, NEW.name);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER task_search_insert AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION task_search_follow();
CREATE TRIGGER task_search_delete AFTER DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION task_search_follow();
CREATE TRIGGER task_search_update AFTER UPDATE OF seq, id, name ON tasks FOR EACH ROW
WHEN (OLD.seq IS DISTINCT FROM NEW.seq OR OLD.id IS DISTINCT FROM NEW.id OR OLD.name IS DISTINCT FROM NEW.name)
EXECUTE FUNCTION task_search_follow();
