-- The values of a task that change often, indexed apart from the task's row. A progress
-- update changes a task's counters, its change number and, about once a second, its
-- stored stall deadline. Were those two indexed on `tasks`, every such update would be a
-- new row version with an entry in each of the table's indexes. With no index on a column
-- an update changes, PostgreSQL writes the new version beside the old one on the same
-- page and no index at all (a heap-only tuple, "HOT"), and room kept free on each page
-- (`fillfactor`) lets it. So the change feed (`ChangeFeed`) and the stall sweeper read
-- tasks through two narrow tables instead, one row per task each (none for a task without
-- a stall deadline): `task_changes` (`number`, the task's latest change) and
-- `task_deadlines` (`due`, its stored stall deadline); `task` is the task's key.
-- Triggers keep them, whoever writes `tasks` (the daemon, retention, a hand), one
-- statement at a time (transition tables): a batch's set update costs a delete and an
-- insert in each, whatever its size.
CREATE TABLE task_changes (
    number bigint NOT NULL,
    task bigint NOT NULL,
    PRIMARY KEY (number, task)
);
CREATE TABLE task_deadlines (
    due bigint NOT NULL,
    task bigint NOT NULL,
    PRIMARY KEY (due, task)
);
INSERT INTO task_changes (number, task) SELECT change_seq, seq FROM tasks;
INSERT INTO task_deadlines (due, task) SELECT stall_deadline, seq FROM tasks WHERE stall_deadline IS NOT NULL;
DROP INDEX tasks_by_change;
DROP INDEX tasks_by_deadline;
-- New pages keep half their room free for the next versions of their rows: a task's first
-- updates make its row longer (a label, a unit), and at 70 % 9 to 42 % of a first wave of
-- updates over 10,000 tasks found their page full before its dead versions were pruned
-- (at 50 %, 0.2 %). A page filled before this migration gets room as its rows move once.
ALTER TABLE tasks SET (fillfactor = 50);

-- A statement's rows whose pair (value, key) is among its old rows and not its new ones
-- leave a table apart; the other way round, they join it. An update that changes neither
-- value (a quiet write: an ancestor's signal time) finds every set empty. Each branch
-- names only the transition tables its trigger has. A statement's rows are few beside the
-- tables apart, so each is found through its key, never by a scan or a hash of a whole
-- table: the plans are made once per session, when the tables may still be empty, and
-- kept as they grow, so the settings below leave the planner no other choice.
CREATE FUNCTION tasks_apart_follow() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_changes (number, task) SELECT change_seq, seq FROM new_tasks;
        INSERT INTO task_deadlines (due, task)
        SELECT stall_deadline, seq FROM new_tasks WHERE stall_deadline IS NOT NULL;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM task_changes AS c USING old_tasks AS o WHERE c.number = o.change_seq AND c.task = o.seq;
        DELETE FROM task_deadlines AS d USING old_tasks AS o WHERE d.due = o.stall_deadline AND d.task = o.seq;
    ELSE
        DELETE FROM task_changes AS c
        USING (SELECT change_seq, seq FROM old_tasks EXCEPT SELECT change_seq, seq FROM new_tasks) AS gone
        WHERE c.number = gone.change_seq AND c.task = gone.seq;
        INSERT INTO task_changes (number, task)
        SELECT change_seq, seq FROM new_tasks EXCEPT SELECT change_seq, seq FROM old_tasks;
        DELETE FROM task_deadlines AS d
        USING (SELECT stall_deadline, seq FROM old_tasks WHERE stall_deadline IS NOT NULL
               EXCEPT SELECT stall_deadline, seq FROM new_tasks) AS gone
        WHERE d.due = gone.stall_deadline AND d.task = gone.seq;
        INSERT INTO task_deadlines (due, task)
        SELECT stall_deadline, seq FROM new_tasks WHERE stall_deadline IS NOT NULL
        EXCEPT SELECT stall_deadline, seq FROM old_tasks;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tasks_apart_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_tasks
FOR EACH STATEMENT EXECUTE FUNCTION tasks_apart_follow();
CREATE TRIGGER tasks_apart_delete AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_tasks
FOR EACH STATEMENT EXECUTE FUNCTION tasks_apart_follow();
CREATE TRIGGER tasks_apart_update AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks
FOR EACH STATEMENT EXECUTE FUNCTION tasks_apart_follow();
