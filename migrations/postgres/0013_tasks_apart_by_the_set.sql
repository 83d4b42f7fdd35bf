-- A writer batch's set update of `tasks` keeps `task_changes` and `task_deadlines` itself,
-- in the same statement (`PostgresSetWrites`): it knows each row's old and new change
-- number and stall deadline, and two set statements on the tables apart cost a fraction of
-- what the trigger's four statements over transition tables cost (planned and run through
-- PL/pgSQL for every batch). It says so for the length of that one statement with the
-- transaction-local setting `headway.tasks_apart_written`, and the trigger keeps the tables
-- for every other statement that updates `tasks` (sweeps, retention, a hand, a daemon of an
-- older build).
DROP TRIGGER tasks_apart_update ON tasks;
CREATE TRIGGER tasks_apart_update AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks
FOR EACH STATEMENT WHEN (current_setting('headway.tasks_apart_written', true) IS DISTINCT FROM 'on')
EXECUTE FUNCTION tasks_apart_follow();
