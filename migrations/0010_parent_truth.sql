-- Parents that tell the truth (DESIGN.md, "The task"). Each task keeps the counts of its
-- direct children by state (`children_stalled`: running and flagged stalled), and how many
-- direct children failed or have a failed descendant (`failing_children`) or are stalled
-- or have a running stalled descendant (`stalling_children`), from which `attention`
-- follows. The writer keeps them in the transaction of each change; retention forgets a
-- finished child without taking back what it counted.
ALTER TABLE tasks ADD COLUMN children_pending INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_running INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_stalled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_succeeded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN children_canceled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN failing_children INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN stalling_children INTEGER NOT NULL DEFAULT 0;

UPDATE tasks SET
    children_pending = c.pending, children_running = c.running, children_stalled = c.stalled,
    children_succeeded = c.succeeded, children_failed = c.failed, children_canceled = c.canceled
FROM (SELECT parent_id,
             sum(state = 'pending') AS pending, sum(state = 'running') AS running,
             sum(state = 'running' AND stalled = 1) AS stalled, sum(state = 'succeeded') AS succeeded,
             sum(state = 'failed') AS failed, sum(state = 'canceled') AS canceled
      FROM tasks WHERE parent_id IS NOT NULL GROUP BY parent_id) AS c
WHERE tasks.id = c.parent_id;

-- The tasks with a failed descendant, then those with a running stalled one.
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

-- The roll-up of every unfinished parent, from its stored children, under the new rule: a
-- succeeded child counts 1, a failed or canceled one the fraction it had when it finished
-- (0 if indeterminate), an unfinished one its own fraction. (A finished parent keeps the
-- fraction it finished with.) First the weights (naming `state`, so that the trigger
-- keeping `task_counts` sees a parent become quantified)...
UPDATE tasks SET children_weight = w.total, state = state
FROM (SELECT parent_id, sum(weight) AS total FROM tasks WHERE parent_id IS NOT NULL GROUP BY parent_id) AS w
WHERE tasks.id = w.parent_id AND tasks.state IN ('pending', 'running');

-- ...then the shares: each parent reaches down through its unfinished descendants that
-- have children, each step weighted by the child's share of its parent's weight, to the
-- tasks whose fraction is their own (leaves and finished tasks).
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
                 WHEN node.children_weight > 0 THEN min(1.0, max(0.0, node.children_done / node.children_weight))
                 WHEN node.total > 0 THEN node.completed * 1.0 / node.total
                 ELSE 0.0 END) AS done
      FROM reach JOIN tasks AS node ON node.id = reach.node_id
      WHERE NOT (node.state IN ('pending', 'running') AND node.children_weight > 0
                 AND EXISTS (SELECT 1 FROM tasks AS below WHERE below.parent_id = node.id))
      GROUP BY reach.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');
