-- Each task's output tail, and search by name or id.
--
-- `last_output` is the last line of the task's tail, shown with the task; `output_lines`
-- counts the lines the task ever sent. The tail itself is a ring of at most 50 rows per
-- task in `task_output`: line number `n` (0, 1, …) goes to slot `n % 50`, arrived at `t`
-- (milliseconds), so an append of any number of lines is one upsert of the new lines only,
-- and a task holds at most 50 rows however fast its runner sends. The API shows the newest
-- of them that fit in 8 KiB. Deleting or forgetting a task deletes its rows.
ALTER TABLE tasks ADD COLUMN last_output TEXT;
ALTER TABLE tasks ADD COLUMN output_lines INTEGER NOT NULL DEFAULT 0;

CREATE TABLE task_output (
    task_id TEXT NOT NULL,
    slot INTEGER NOT NULL,
    n INTEGER NOT NULL,
    t INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (task_id, slot)
) STRICT, WITHOUT ROWID;

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
