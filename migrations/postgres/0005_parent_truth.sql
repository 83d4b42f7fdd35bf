-- Parents that tell the truth: see migrations/0010_parent_truth.sql (the same columns and
-- backfill, in PostgreSQL's words).
ALTER TABLE tasks ADD COLUMN children_pending bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_running bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_stalled bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_succeeded bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_failed bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_canceled bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN failing_children bigint NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN stalling_children bigint NOT NULL DEFAULT 0;

UPDATE tasks SET
    children_pending = c.pending, children_running = c.running, children_stalled = c.stalled,
    children_succeeded = c.succeeded, children_failed = c.failed, children_canceled = c.canceled
FROM (SELECT parent_id,
             count(*) FILTER (WHERE state = 'pending') AS pending,
             count(*) FILTER (WHERE state = 'running') AS running,
             count(*) FILTER (WHERE state = 'running' AND stalled = 1) AS stalled,
             count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
             count(*) FILTER (WHERE state = 'failed') AS failed,
             count(*) FILTER (WHERE state = 'canceled') AS canceled
      FROM tasks WHERE parent_id IS NOT NULL GROUP BY parent_id) AS c
WHERE tasks.id = c.parent_id;

WITH RECURSIVE above(id) AS (
    SELECT parent_id FROM tasks WHERE state = 'failed' AND parent_id IS NOT NULL
    UNION
    SELECT tasks.parent_id FROM tasks JOIN above ON tasks.id = above.id WHERE tasks.parent_id IS NOT NULL
)
UPDATE tasks SET failing_children = f.n
FROM (SELECT parent_id, count(*) AS n FROM tasks
      WHERE parent_id IS NOT NULL AND (state = 'failed' OR id IN (SELECT id FROM above))
      GROUP BY parent_id) AS f
WHERE tasks.id = f.parent_id;

WITH RECURSIVE above(id) AS (
    SELECT parent_id FROM tasks WHERE state = 'running' AND stalled = 1 AND parent_id IS NOT NULL
    UNION
    SELECT tasks.parent_id FROM tasks JOIN above ON tasks.id = above.id WHERE tasks.parent_id IS NOT NULL
)
UPDATE tasks SET stalling_children = s.n
FROM (SELECT parent_id, count(*) AS n FROM tasks
      WHERE parent_id IS NOT NULL AND ((state = 'running' AND stalled = 1) OR id IN (SELECT id FROM above))
      GROUP BY parent_id) AS s
WHERE tasks.id = s.parent_id;

UPDATE tasks SET children_weight = w.total, state = tasks.state
FROM (SELECT parent_id, sum(weight) AS total FROM tasks WHERE parent_id IS NOT NULL GROUP BY parent_id) AS w
WHERE tasks.id = w.parent_id AND tasks.state IN ('pending', 'running');

WITH RECURSIVE reach(parent_id, node_id, factor) AS (
    SELECT child.parent_id, child.id, child.weight
    FROM tasks AS child JOIN tasks AS parent ON parent.id = child.parent_id
    WHERE parent.state IN ('pending', 'running')
    UNION ALL
    SELECT reach.parent_id, below.id, reach.factor * below.weight / node.children_weight
    FROM reach JOIN tasks AS node ON node.id = reach.node_id JOIN tasks AS below ON below.parent_id = node.id
    WHERE node.state IN ('pending', 'running') AND node.children_weight > 0
)
UPDATE tasks SET children_done = d.done
FROM (SELECT reach.parent_id,
             sum(reach.factor * CASE
                 WHEN node.state = 'succeeded' THEN 1.0
                 WHEN node.children_weight > 0 THEN least(1.0, greatest(0.0, node.children_done / node.children_weight))
                 WHEN node.total > 0 THEN node.completed::double precision / node.total
                 ELSE 0.0 END) AS done
      FROM reach JOIN tasks AS node ON node.id = reach.node_id
      WHERE NOT (node.state IN ('pending', 'running') AND node.children_weight > 0
                 AND EXISTS (SELECT 1 FROM tasks AS below WHERE below.parent_id = node.id))
      GROUP BY reach.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');
