-- A parent with its own total: see migrations/0013_parent_totals.sql (the same column and
-- backfill, in PostgreSQL's words).
ALTER TABLE tasks ADD COLUMN unfinished_children_done double precision NOT NULL DEFAULT 0;
CREATE TEMP TABLE former_shares AS
SELECT id, least(CASE WHEN failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, children_done / children_weight)) AS share
FROM tasks WHERE children_weight > 0 AND total > 0 AND state <> 'succeeded' AND parent_id IS NOT NULL;

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 32 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 32 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 31 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 31 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 30 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 30 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 29 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 29 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 28 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 28 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 27 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 27 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 26 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 26 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 25 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 25 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 24 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 24 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 23 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 23 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 22 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 22 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 21 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 21 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 20 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 20 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 19 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 19 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 18 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 18 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 17 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 17 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 16 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 16 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 15 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 15 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 14 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 14 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 13 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 13 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 12 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 12 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 11 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 11 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 10 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 10 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 9 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 9 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 8 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 8 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 7 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 7 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 6 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 6 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 5 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 5 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 4 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 4 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 3 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 3 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

UPDATE tasks SET unfinished_children_done = u.done
FROM (SELECT c.parent_id, sum(c.weight * (CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END)) AS done
      FROM tasks AS c WHERE c.depth = 2 AND c.state IN ('pending', 'running') GROUP BY c.parent_id) AS u
WHERE tasks.id = u.parent_id AND tasks.state IN ('pending', 'running');
UPDATE tasks SET children_done = tasks.children_done + d.moved
FROM (SELECT c.parent_id, sum(c.weight * ((CASE WHEN c.state = 'succeeded' THEN 1.0 WHEN c.children_weight > 0 THEN least(CASE WHEN c.failing_children > 0 THEN 0.999999 ELSE 1.0 END, greatest(0.0, CASE WHEN c.total > 0 THEN (c.completed + c.unfinished_children_done) / c.total ELSE c.children_done / c.children_weight END)) WHEN c.total > 0 THEN c.completed::double precision / c.total ELSE 0.0 END) - f.share)) AS moved
      FROM former_shares AS f JOIN tasks AS c ON c.id = f.id WHERE c.depth = 2 GROUP BY c.parent_id) AS d
WHERE tasks.id = d.parent_id AND tasks.state IN ('pending', 'running');

DROP TABLE former_shares;
