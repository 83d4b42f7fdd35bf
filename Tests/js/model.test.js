// Unit tests of dashboard/model.js: which task wins, children by parent, pruning and the
// memory of deleted ids. Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { hasChildren, newestFirst, TaskModel } from "../../dashboard/model.js";

const task = (id, fields = {}) => ({
  id, name: id, state: "running", mode: "quantified", total: 10, parent_id: null, finished_at: null,
  created_at: "2026-12-05T10:00:00.000Z", updated_at: "2026-12-05T10:00:00.000Z", ...fields,
});

test("an older copy of a task does not replace a newer one", () => {
  const model = new TaskModel();
  assert.equal(model.put(task("a", { updated_at: "2026-12-05T10:00:02.000Z", completed: 5 }), true), true);
  assert.equal(model.put(task("a", { updated_at: "2026-12-05T10:00:01.000Z", completed: 3 }), false), false);
  assert.equal(model.get("a").completed, 5);
  assert.ok(model.streamed.has("a"));
  assert.deepEqual([...model.takeDirty()], ["a"]);
  assert.deepEqual([...model.takeDirty()], []);
});

test("children are kept by parent, newest first, and follow a move", () => {
  const model = new TaskModel();
  model.put(task("p", { total: null }), false);
  model.put(task("c1", { parent_id: "p", created_at: "2026-12-05T10:00:01.000Z" }), false);
  model.put(task("c2", { parent_id: "p", created_at: "2026-12-05T10:00:02.000Z" }), false);
  assert.deepEqual(model.childrenOf("p").map((c) => c.id), ["c2", "c1"]);
  assert.equal(hasChildren(model, model.get("p")), true);
  assert.equal(hasChildren(model, model.get("c1")), false);
  model.remove("c2");
  assert.deepEqual(model.childrenOf("p").map((c) => c.id), ["c1"]);
});

test("a quantified task without a total is a parent even before its children are known", () => {
  const model = new TaskModel();
  assert.equal(hasChildren(model, task("roll", { total: null })), true);
  assert.equal(hasChildren(model, task("plain", { mode: "indeterminate", total: null })), false);
  // The server's child counts say so too (an indeterminate parent, children not loaded).
  assert.equal(hasChildren(model, task("counted", { mode: "indeterminate", total: null, children: { total: 2 } })), true);
  assert.equal(hasChildren(model, task("none", { mode: "indeterminate", total: null, children: null })), false);
});

test("prune keeps only what is wanted, and a deleted id is remembered", () => {
  const model = new TaskModel();
  for (const id of ["a", "b", "c"]) model.put(task(id), false);
  model.markDeleted("b");
  assert.equal(model.get("b"), undefined);
  assert.equal(model.wasDeleted("b"), true);
  model.prune((t) => t.id === "a");
  assert.deepEqual([...model.tasks.keys()], ["a"]);
  assert.equal(model.wasDeleted("b"), true);
});

test("newest first: by creation time, then id", () => {
  const older = task("x", { created_at: "2026-12-05T10:00:00.000Z" });
  const newer = task("y", { created_at: "2026-12-05T10:00:01.000Z" });
  assert.deepEqual([older, newer].sort(newestFirst).map((t) => t.id), ["y", "x"]);
  assert.deepEqual([task("a"), task("b")].sort(newestFirst).map((t) => t.id), ["b", "a"]);
});

/// Clocks the test moves: `monotonic` and `wall`, in milliseconds.
function movableClock() {
  const clock = { at: 1000, wallAt: Date.parse("2026-12-05T10:01:00.000Z") };
  return { clock, model: new TaskModel({ monotonic: () => clock.at, wall: () => clock.wallAt }) };
}

test("a deleted id is remembered for a minute, then forgotten (also by prune)", () => {
  const { clock, model } = movableClock();
  model.put(task("a"), false);
  model.markDeleted("a");
  clock.at += 59_999;
  assert.equal(model.wasDeleted("a"), true);
  clock.at += 1;
  assert.equal(model.wasDeleted("a"), false);
  model.markDeleted("b");
  clock.at += 60_000;
  model.prune(() => true);
  assert.equal(model.deleted.has("b"), false);
});

test("a finished task is dated on the monotonic clock by its finished_at", () => {
  const { clock, model } = movableClock();
  // Finished 20 s before the wall clock's now: seen as finished 20 s ago.
  model.put(task("done", { state: "failed", finished_at: "2026-12-05T10:00:40.000Z" }), false);
  assert.equal(model.finishedSeen.get("done"), clock.at - 20_000);
  // A finish stamped ahead of this machine's clock counts from now, not from the future.
  model.put(task("ahead", { state: "failed", finished_at: "2026-12-05T10:02:00.000Z" }), false);
  assert.equal(model.finishedSeen.get("ahead"), clock.at);
});

test("an update with the same time replaces the task (a repeat is not older), and removal forgets it whole", () => {
  const model = new TaskModel();
  model.put(task("a", { completed: 1 }), true);
  assert.equal(model.put(task("a", { completed: 2 }), false), true);
  assert.equal(model.get("a").completed, 2);
  model.put(task("c", { parent_id: "a" }), false);
  model.remove("a");
  assert.equal(model.get("a"), undefined);
  assert.equal(model.streamed.has("a"), false);
  assert.ok(model.takeDirty().has("a"));
});
