-- Each task's output tail, and search by name or id.
--
-- `last_output` is the last line of the task's tail, shown with the task. The tail itself
-- is one row per task in `task_output`: a JSON array of `{"t", "line"}`, oldest first, at
-- most 50 lines and 8 KiB of their text (the writer trims it as it appends), so however
-- fast a runner sends lines a task holds one bounded row. Deleting or forgetting a task
-- deletes its row.
ALTER TABLE tasks ADD COLUMN last_output TEXT;

CREATE TABLE task_output (
    task_id TEXT PRIMARY KEY,
    lines TEXT NOT NULL
) STRICT;

-- `GET /v1/tasks?q=`: a case-insensitive substring of the id or the name, from a trigram
-- index (FTS5, contentless: it holds the index only, keyed by the task's `seq`). Each text
-- is indexed with two U+001F appended, so that every occurrence of a query of one or two
-- characters begins some indexed trigram: such a query is answered by the trigrams that
-- begin with it (`task_search_terms`, the index's vocabulary), a longer one as a phrase of
-- its own trigrams. A query holds no control character, so the padding never matches.
-- A task's id and name never change: the index follows inserts and deletes only.
CREATE VIRTUAL TABLE task_search USING fts5(id, name, content = '', tokenize = 'trigram');
CREATE VIRTUAL TABLE task_search_terms USING fts5vocab(task_search, 'row');

INSERT INTO task_search (rowid, id, name)
SELECT seq, id || char(31, 31), name || char(31, 31) FROM tasks;

CREATE TRIGGER task_search_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_search (rowid, id, name) VALUES (new.seq, new.id || char(31, 31), new.name || char(31, 31));
END;

CREATE TRIGGER task_search_delete AFTER DELETE ON tasks BEGIN
    INSERT INTO task_search (task_search, rowid, id, name)
    VALUES ('delete', old.seq, old.id || char(31, 31), old.name || char(31, 31));
END;
