-- Run-time rules (DESIGN.md, "Webhooks": overdue and too quick). Fixed at registration:
-- `expected_ms` (`expected_seconds`, counted from the task's start), `deadline` and `min_ms`
-- (`min_seconds`). `overdue` and `overdue_since` are raised once an unfinished task passes
-- its due moment (the earlier of its start plus `expected_ms` and its `deadline`) and stay
-- after it finishes; `too_quick` is set when it succeeds sooner than `min_ms` after its
-- start. `overdue_at` is the due moment of an unfinished task not flagged yet (null
-- otherwise): the sweeper reads the due ones in order from its index, so a restart flags
-- them from the stored times, never from a timer. Existing tasks have no rule: nothing
-- to backfill.
ALTER TABLE tasks ADD COLUMN expected_ms INTEGER;
ALTER TABLE tasks ADD COLUMN deadline INTEGER;
ALTER TABLE tasks ADD COLUMN min_ms INTEGER;
ALTER TABLE tasks ADD COLUMN overdue INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN overdue_since INTEGER;
ALTER TABLE tasks ADD COLUMN overdue_at INTEGER;
ALTER TABLE tasks ADD COLUMN too_quick INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_by_overdue_at ON tasks (overdue_at) WHERE overdue_at IS NOT NULL;
-- `GET /v1/tasks?overdue=true` and the `headway_tasks_overdue` gauge read the overdue
-- tasks only, by state, newest first.
CREATE INDEX tasks_overdue ON tasks (state, seq) WHERE overdue = 1;
