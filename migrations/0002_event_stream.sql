-- The global change sequence of the event stream. Every change of a task takes the next
-- number: the task keeps the number and kind of its latest change, a deleted task leaves
-- a tombstone, so "what changed after N" is one index range of each table.
ALTER TABLE tasks ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN change_kind TEXT NOT NULL DEFAULT 'task.created';
CREATE INDEX tasks_by_change ON tasks (change_seq);
-- The snapshot sends tasks finished in the last minute.
CREATE INDEX tasks_by_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE tombstones (
    change_seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    parent_id TEXT,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER NOT NULL
) STRICT;

-- Each database starts its sequence at a random number below 2^40, so an event id from
-- another database is (almost surely) outside this one's range and is answered with a
-- fresh snapshot instead of a wrong resume. `pruned_through` is the highest number whose
-- tombstone may have been pruned: ids below it cannot be resumed.
CREATE TABLE stream_state (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    first_seq INTEGER NOT NULL,
    pruned_through INTEGER NOT NULL
) STRICT;
INSERT INTO stream_state (singleton, first_seq, pruned_through)
SELECT 1, s, s - 1 FROM (SELECT 1 + abs(random() % 1099511627776) AS s);

-- Tasks stored before this migration get numbers in creation order.
UPDATE tasks SET change_seq = (SELECT first_seq FROM stream_state) + seq;
