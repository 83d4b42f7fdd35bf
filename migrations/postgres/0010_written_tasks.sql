-- Which tasks each writer batch wrote, by the generation of `stream_state` its commit
-- set (SharedWriting): a daemon that finds the generation moved since its own last batch
-- forgets exactly these tasks from its cache, instead of all of them. Every write of a
-- task is named, the quiet ones too (an ancestor's signal time and stall deadline, its
-- counts of failing or stalling children, retention's count of stored children), which
-- have no change number and never reach the change feed. One row per batch that moved
-- the generation; the oldest are deleted as new ones come (a daemon that finds a row of
-- its range missing forgets its whole cache).
CREATE TABLE written_tasks (
    generation bigint PRIMARY KEY,
    ids text[] NOT NULL
);
