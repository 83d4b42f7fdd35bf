-- The counts the triggers keep also tell tasks apart by mode (quantified: a known total
-- or children) and by stall reason ('' while not stalled), for GET /metrics. Listing
-- totals read the same table by state, stalled and is_root, as before.
DROP TRIGGER task_counts_insert;
DROP TRIGGER task_counts_delete;
DROP TRIGGER task_counts_update;
DROP TABLE task_counts;

CREATE TABLE task_counts (
    state TEXT NOT NULL,
    stalled INTEGER NOT NULL,
    is_root INTEGER NOT NULL,
    quantified INTEGER NOT NULL,
    stall_reason TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (state, stalled, is_root, quantified, stall_reason)
) STRICT, WITHOUT ROWID;

INSERT INTO task_counts (state, stalled, is_root, quantified, stall_reason, n)
SELECT state, stalled, is_root, total IS NOT NULL OR children_weight > 0, coalesce(stall_reason, ''), count(*)
FROM tasks GROUP BY 1, 2, 3, 4, 5;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (state, stalled, is_root, quantified, stall_reason, n)
    VALUES (new.state, new.stalled, new.is_root, new.total IS NOT NULL OR new.children_weight > 0,
            coalesce(new.stall_reason, ''), 1)
    ON CONFLICT (state, stalled, is_root, quantified, stall_reason) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE state = old.state AND stalled = old.stalled AND is_root = old.is_root
      AND quantified = (old.total IS NOT NULL OR old.children_weight > 0)
      AND stall_reason = coalesce(old.stall_reason, '');
END;

-- The writer names state and stalled in its UPDATE whenever a counted value changes (and
-- only then), so the trigger costs nothing on the common update that changes none.
CREATE TRIGGER task_counts_update AFTER UPDATE OF state, stalled ON tasks
WHEN old.state IS NOT new.state OR old.stalled IS NOT new.stalled OR old.stall_reason IS NOT new.stall_reason
  OR (old.total IS NOT NULL OR old.children_weight > 0) IS NOT (new.total IS NOT NULL OR new.children_weight > 0)
BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE state = old.state AND stalled = old.stalled AND is_root = old.is_root
      AND quantified = (old.total IS NOT NULL OR old.children_weight > 0)
      AND stall_reason = coalesce(old.stall_reason, '');
    INSERT INTO task_counts (state, stalled, is_root, quantified, stall_reason, n)
    VALUES (new.state, new.stalled, new.is_root, new.total IS NOT NULL OR new.children_weight > 0,
            coalesce(new.stall_reason, ''), 1)
    ON CONFLICT (state, stalled, is_root, quantified, stall_reason) DO UPDATE SET n = n + 1;
END;
