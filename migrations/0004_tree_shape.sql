-- The shape of the task tree, kept with each task so that a registration checks the
-- tree's limits (--max-depth, --max-children) without walking or counting: its depth (a
-- root is 1) and how many children it has.
ALTER TABLE tasks ADD COLUMN depth INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN child_count INTEGER NOT NULL DEFAULT 0;

WITH RECURSIVE chain(id, depth) AS (
    SELECT id, 1 FROM tasks WHERE parent_id IS NULL
    UNION ALL
    SELECT tasks.id, chain.depth + 1 FROM tasks JOIN chain ON tasks.parent_id = chain.id
)
UPDATE tasks SET depth = chain.depth FROM chain WHERE tasks.id = chain.id;

UPDATE tasks SET child_count = children.n
FROM (SELECT parent_id, count(*) AS n FROM tasks WHERE parent_id IS NOT NULL GROUP BY parent_id) AS children
WHERE tasks.id = children.parent_id;
