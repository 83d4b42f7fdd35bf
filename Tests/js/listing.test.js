// Unit tests of dashboard/listing.js: each tab's query and members, min_duration, the rows
// after a listing or an arrival, the pager's arithmetic and the pressed tab's count, with
// the clocks given. Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  LINGER_MS, PAGE_SIZE, lingers, listCount, listKey, listQuery, longEnough, matchesFilter, mergeListing, pagerView,
  placeArrival, rootFilter,
} from "../../dashboard/listing.js";

const T0 = Date.parse("2026-12-05T10:00:00.000Z");
const at = (seconds) => new Date(T0 + seconds * 1000).toISOString();
const task = (id, seconds, fields = {}) => ({
  id, name: id, state: "running", stalled: false, parent_id: null, created_at: at(seconds), finished_at: null, ...fields,
});
const never = () => false;

test("each tab's query: roots, states, stalled, the search and the page", () => {
  assert.equal(listQuery({ filter: "running", search: "", pageToken: null }).toString(),
    `page_size=${PAGE_SIZE}&root=true&state=pending&state=running`);
  assert.equal(listQuery({ filter: "stalled", search: "csv", pageToken: "p2" }).toString(),
    "page_size=20&stalled=true&q=csv&page_token=p2");
  assert.equal(listQuery({ filter: "failed", search: "", pageToken: null }).toString(), "page_size=20&state=failed");
  assert.equal(listQuery({ filter: "finished", search: "", pageToken: null }).toString(),
    "page_size=20&root=true&state=succeeded&state=failed&state=canceled");
  assert.equal(listQuery({ filter: "all", search: "", pageToken: null }).toString(), "page_size=20&root=true");
  assert.deepEqual(["running", "stalled", "failed", "finished", "all"].map(rootFilter), [true, false, false, true, true]);
  assert.notEqual(listKey({ filter: "all", search: "", page: 1, pageToken: null }),
    listKey({ filter: "all", search: "", page: 2, pageToken: "x" }));
});

test("what each tab holds: children only in Stalled and Failed; a finished task lingers in Running", () => {
  const child = task("c", 0, { parent_id: "p", state: "failed", finished_at: at(5) });
  assert.equal(matchesFilter(child, { filter: "running", search: "" }, never), false);
  assert.equal(matchesFilter(child, { filter: "failed", search: "" }, never), true);
  assert.equal(matchesFilter(child, { filter: "finished", search: "" }, never), false);
  const done = task("d", 0, { state: "succeeded", finished_at: at(5) });
  assert.equal(matchesFilter(done, { filter: "running", search: "" }, never), false);
  assert.equal(matchesFilter(done, { filter: "running", search: "" }, () => true), true);
  const stuck = task("s", 0, { stalled: true });
  assert.equal(matchesFilter(stuck, { filter: "stalled", search: "" }, never), true);
  assert.equal(matchesFilter({ ...stuck, state: "failed" }, { filter: "stalled", search: "" }, never), false);
  assert.equal(matchesFilter(task("Photo-Backup", 0), { filter: "all", search: "backup" }, never), true);
  assert.equal(matchesFilter(task("x", 0), { filter: "all", search: "backup" }, never), false);
});

test("lingering: a minute from when the page saw it finish, else from finished_at", () => {
  const done = task("d", 0, { state: "failed", finished_at: at(10) });
  assert.equal(lingers(done, 1000, 1000 + LINGER_MS - 1, 0), true);
  assert.equal(lingers(done, 1000, 1000 + LINGER_MS, 0), false);
  assert.equal(lingers(done, undefined, 0, T0 + 10_000 + 30_000), true);
  assert.equal(lingers(done, undefined, 0, T0 + 10_000 + LINGER_MS), false);
  assert.equal(lingers(task("r", 0), undefined, 0, T0), false);
});

test("min_duration: a task shows once it has lived that long, or ran that long; the stream's are past it", () => {
  const young = task("y", 0);
  assert.equal(longEnough(young, { streamed: false, minDuration: 2, wall: T0 + 1999 }), false);
  assert.equal(longEnough(young, { streamed: false, minDuration: 2, wall: T0 + 2000 }), true);
  assert.equal(longEnough(young, { streamed: true, minDuration: 2, wall: T0 }), true);
  const short = task("s", 0, { state: "succeeded", finished_at: at(1) });
  assert.equal(longEnough(short, { streamed: false, minDuration: 2, wall: T0 + 99_000 }), false);
});

test("a re-read keeps the rows shown that still match, newest first, one page", () => {
  const tasks = new Map();
  for (let n = 0; n < 25; n += 1) tasks.set(`t${n}`, task(`t${n}`, n));
  const get = (id) => tasks.get(id);
  const rows = ["t24", "t23", "t22"];
  // The listing no longer has t23 (say, a hidden young task pushed it off): it stays.
  const listed = [get("t24"), get("t22"), get("t21")];
  const merged = mergeListing({ listed, rows, held: new Set(), same: true, hold: false, shows: () => true,
    keeps: (id) => id === "t23", get });
  assert.deepEqual(merged.rows, ["t24", "t23", "t22", "t21"]);
  assert.deepEqual(merged.held, []);
  // Navigated (not the same listing): the server's rows as they are.
  const fresh = mergeListing({ listed, rows, held: new Set(), same: false, hold: false, shows: () => true, keeps: () => true, get });
  assert.deepEqual(fresh.rows, ["t24", "t22", "t21"]);
  // Over a page, the rows the listing did not give go first.
  const full = [...tasks.values()].slice(0, 20).reverse();
  const over = mergeListing({ listed: full, rows: ["t24", "t23"], held: new Set(), same: true, hold: false,
    shows: () => true, keeps: () => true, get });
  assert.deepEqual(over.rows, full.map((t) => t.id));
});

test("a re-read while the reader is busy in the list holds newer tasks above it", () => {
  const tasks = new Map([["new", task("new", 9)], ["a", task("a", 5)], ["b", task("b", 4)]]);
  const get = (id) => tasks.get(id);
  const merged = mergeListing({ listed: [get("new"), get("a"), get("b")], rows: ["a", "b"], held: new Set(), same: true,
    hold: true, shows: () => true, keeps: () => true, get });
  assert.deepEqual(merged.rows, ["a", "b"]);
  assert.deepEqual(merged.held, ["new"]);
  // Already held: not held twice, not shown.
  const again = mergeListing({ listed: [get("new"), get("a")], rows: ["a", "b"], held: new Set(["new"]), same: true,
    hold: true, shows: () => true, keeps: () => true, get });
  assert.deepEqual(again.held, []);
  assert.deepEqual(again.rows, ["a", "b"]);
});

test("a finished row the listing no longer gives counts as lingering; hidden tasks are not rows", () => {
  const tasks = new Map([["done", task("done", 5, { state: "failed", finished_at: at(6) })], ["run", task("run", 3)],
    ["young", task("young", 9)]]);
  const get = (id) => tasks.get(id);
  const merged = mergeListing({ listed: [get("young"), get("run")], rows: ["done", "run"], held: new Set(), same: true,
    hold: false, shows: (t) => t.id !== "young", keeps: () => true, get });
  assert.deepEqual(merged.rows, ["done", "run"]);
  assert.equal(merged.lingering, 1);
});

test("an arrival on page 1: at its place, held above a busy reader, or not on a full page when older", () => {
  const tasks = new Map();
  for (let n = 0; n < 20; n += 1) tasks.set(`t${n}`, task(`t${n}`, n + 10));
  const get = (id) => tasks.get(id);
  const rows = [...tasks.keys()].reverse();
  const newest = task("new", 99);
  assert.deepEqual(placeArrival({ rows, task: newest, listed: true, holding: () => true, get }), { held: true, rows });
  const placed = placeArrival({ rows, task: newest, listed: true, holding: () => false, get });
  assert.equal(placed.rows[0], "new");
  assert.equal(placed.rows.length, PAGE_SIZE);
  assert.equal(placed.rows.at(-1), "t1"); // the oldest row left the full page
  const oldest = task("old", 0);
  assert.deepEqual(placeArrival({ rows, task: oldest, listed: true, holding: () => false, get }).rows, rows);
  const some = placeArrival({ rows: ["t5", "t3"], task: task("t4x", 14), listed: true, holding: () => false, get });
  assert.deepEqual(some.rows, ["t5", "t4x", "t3"]);
});

test("the pager: Page N of M, buttons wait for the listing, the top pager only over one page", () => {
  assert.deepEqual(pagerView({ page: 1, totalSize: 0, listed: true, nextToken: null }),
    { page: 1, pages: 1, previousDisabled: true, nextDisabled: true, topHidden: true });
  assert.deepEqual(pagerView({ page: 2, totalSize: 41, listed: true, nextToken: "n" }),
    { page: 2, pages: 3, previousDisabled: false, nextDisabled: false, topHidden: false });
  assert.equal(pagerView({ page: 3, totalSize: 41, listed: false, nextToken: null }).nextDisabled, true);
  assert.equal(pagerView({ page: 3, totalSize: 41, listed: false, nextToken: null }).previousDisabled, true);
  // A page past the end (the list shrank) says the last page.
  assert.equal(pagerView({ page: 4, totalSize: 20, listed: true, nextToken: null }).page, 1);
  assert.equal(pagerView({ page: 1, totalSize: 20, listed: true, nextToken: null }).pages, 1);
  assert.equal(pagerView({ page: 1, totalSize: 21, listed: true, nextToken: "n" }).pages, 2);
});

test("the pressed tab counts the rows it lists: one page by its rows, several by the listing's total", () => {
  const base = { listed: true, page: 1, nextToken: null, heldCount: 0, listedTotal: 7, isLingering: never };
  assert.equal(listCount({ ...base, rows: ["a", "b", "c"] }), 3);
  // Finished rows lingering in Running are not running; new tasks held above the list are.
  assert.equal(listCount({ ...base, rows: ["a", "b", "c"], heldCount: 2, isLingering: (id) => id === "b" }), 4);
  assert.equal(listCount({ ...base, rows: ["a"], nextToken: "n", listedTotal: 41 }), 41);
  assert.equal(listCount({ ...base, rows: ["a"], page: 2, listedTotal: 41 }), 41);
  assert.equal(listCount({ ...base, rows: [], listed: false }), null);
});
