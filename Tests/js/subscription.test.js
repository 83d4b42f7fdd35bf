// Unit tests of dashboard/subscription.js: which tasks the page's stream names, its query
// within the server's limits, where a new stream resumes, and which events are applied —
// with a simulated server whose streams behave as GET /v1/events does (a catch-up of the
// latest state of each selected task changed after the resume id, then the live changes),
// to show that switching streams loses no change and applies none twice or out of order.
// Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  COUNTS_HIDDEN_MS, COUNTS_POLL_MS, COUNTS_QUIET_MS, EventLedger, NEW_ROOTS_PAUSE_MS, NEW_ROOTS_PER_SECOND,
  NEW_ROOTS_WINDOW_MS, NO_TASK, NewRootsGate, ResumePoint, STREAM_PARAMETERS, STREAM_QUERY_CHARACTERS, changeOf, selectionKey, streamQuery,
  streamSelection, nextCountsRead, follows,
} from "../../dashboard/subscription.js";

test("the selection: rows, the detail task, open parents; sorted, no repeats", () => {
  const selection = streamSelection({ rows: ["b", "a", "b"], detail: "d", expanded: ["p", "a"], others: ["c"] });
  assert.deepEqual(selection, { tasks: ["a", "b", "c", "d"], parents: ["a", "d", "p"], newRoots: false });
  assert.notEqual(selectionKey(selection), selectionKey({ ...selection, newRoots: true }));
  assert.equal(selectionKey(selection), selectionKey(streamSelection({ rows: ["a", "b", "c"], detail: "d", expanded: ["p", "a"] })));
  assert.notEqual(selectionKey(selection), selectionKey(streamSelection({ rows: ["a", "b"] })));
  assert.equal(selectionKey(null), "*");
});

test("which tasks a selection follows: named, or a named parent's children", () => {
  const selection = streamSelection({ rows: ["a"], expanded: ["p"], newRoots: true });
  assert.equal(follows(selection, { id: "a", parent_id: null }), true);
  assert.equal(follows(selection, { id: "c", parent_id: "p" }), true);
  assert.equal(follows(selection, { id: "new", parent_id: null }), false, "a new root comes by its creation only");
  assert.equal(follows(null, { id: "new", parent_id: null }), true, "the whole stream follows everything");
});

test("the query names each task and parent, resumes and carries the token", () => {
  const { query, whole } = streamQuery({
    selection: streamSelection({ rows: ["t1", "t2"], expanded: ["t1"], newRoots: true }), minDuration: 2, resumeFrom: "41",
    token: "hw_x",
  });
  assert.equal(whole, false);
  assert.equal(query.toString(), "min_duration=2&last_event_id=41&access_token=hw_x&task=t1&task=t2&parent_id=t1&new_roots=true");
  assert.equal(streamQuery({ selection: null, minDuration: 0 }).query.toString(), "min_duration=0");
  assert.equal(streamQuery({ selection: null, minDuration: 0 }).whole, true);
});

test("a page with nothing to show names no task, not every task", () => {
  const { query, whole } = streamQuery({ selection: streamSelection({}), minDuration: 2 });
  assert.equal(whole, false);
  assert.deepEqual(query.getAll("task"), [NO_TASK]);
});

test("a page of 80 rows fits the server's limits; more falls back to the whole stream", () => {
  const ids = (count, length) => Array.from({ length: count }, (_, index) => `${index}`.padStart(length, "x"));
  const fits = streamQuery({ selection: streamSelection({ rows: ids(80, 60), detail: "d" }), minDuration: 2, resumeFrom: "9", token: "hw_" + "a".repeat(43) });
  assert.equal(fits.whole, false);
  assert.ok([...fits.query.keys()].length <= STREAM_PARAMETERS);
  const tooMany = streamQuery({ selection: streamSelection({ rows: ids(STREAM_PARAMETERS, 4) }), minDuration: 2 });
  assert.equal(tooMany.whole, true);
  assert.equal(tooMany.query.has("task"), false);
  const tooLong = streamQuery({ selection: streamSelection({ rows: ids(60, 128) }), minDuration: 2 });
  assert.ok(ids(60, 128).join("&task=").length > STREAM_QUERY_CHARACTERS);
  assert.equal(tooLong.whole, true);
});

test("event ids: a change number, or the change that ends a release", () => {
  assert.equal(changeOf("15393501201"), 15393501201);
  assert.equal(changeOf("120-1733400000000"), 120);
  assert.equal(changeOf(""), null);
  assert.equal(changeOf(undefined), null);
  assert.equal(changeOf("abc"), null);
});

test("the ledger applies each task's changes once and never an older one", () => {
  const ledger = new EventLedger();
  assert.equal(ledger.take("a", 10), true);
  assert.equal(ledger.take("a", 10), false, "delivered twice");
  assert.equal(ledger.take("a", 9), false, "older than what was applied");
  assert.equal(ledger.take("b", 9), true, "another task's older number is its own");
  assert.equal(ledger.take("a", 12), true);
  assert.equal(ledger.take("a", null), true, "no number: applied");
  ledger.prune((id) => id === "b");
  assert.equal(ledger.take("a", 5), true, "forgotten: taken again");
  assert.equal(ledger.take("b", 9), false);
});

test("a new stream resumes from the last id, or from the mark of a read that brought new tasks", () => {
  const resume = new ResumePoint();
  assert.equal(resume.resumeFrom(), null, "nothing yet: fresh");
  resume.started("100");
  resume.delivered("105");
  resume.delivered("103");
  assert.equal(resume.resumeFrom(), "105", "the highest id delivered");
  const mark = resume.mark();
  resume.delivered("110");
  resume.landed(mark);
  assert.equal(resume.resumeFrom(), "105", "a listing sent at 105 that brought tasks: no later than 105");
  resume.started(resume.resumeFrom());
  assert.equal(resume.resumeFrom(), "105");
  resume.delivered("112-1733400000000");
  assert.equal(resume.resumeFrom(), "112-1733400000000", "the end of a release resumes as itself");
  resume.landed(null);
  assert.equal(resume.resumeFrom(), null, "a read sent before the stream had a position: a fresh snapshot");
});

/// A server: every change is a task's new version, numbered in one increasing sequence.
class Server {
  constructor() { this.log = []; this.tasks = new Map(); }
  change(id) {
    const number = this.log.length + 1;
    const version = (this.tasks.get(id)?.version ?? 0) + 1;
    this.tasks.set(id, { id, version, number });
    this.log.push({ number, id });
  }
  get position() { return this.log.length; }
  /// A stream of `tasks`: from `after`, the latest state of each task changed since (in
  /// order of its latest change), then each change as it comes.
  open(tasks, after) {
    const stream = { tasks: new Set(tasks), queue: [], read: this.position };
    const latest = new Map();
    for (const entry of this.log.slice(after)) if (stream.tasks.has(entry.id)) latest.set(entry.id, entry.number);
    for (const [id, number] of [...latest].sort((a, b) => a[1] - b[1])) {
      stream.queue.push({ id: String(number), task: { ...this.tasks.get(id) } });
    }
    return stream;
  }
  /// Delivers the changes after `stream.read` to it (a live stream; `upTo` of them).
  feed(stream, upTo = Infinity) {
    while (stream.read < this.position && upTo-- > 0) {
      const entry = this.log[stream.read];
      stream.read += 1;
      if (stream.tasks.has(entry.id)) stream.queue.push({ id: String(entry.number), task: { ...this.tasks.get(entry.id), version: this.versionAt(entry) } });
    }
  }
  /// The version of a task that change `entry` made.
  versionAt(entry) { return this.log.filter((other) => other.id === entry.id && other.number <= entry.number).length; }
}

/// A seeded generator (the same run each time).
function random(seed) {
  let state = seed;
  return () => { state = (state * 1103515245 + 12345) % 2147483648; return state / 2147483648; };
}

test("switching streams while tasks change: nothing lost, nothing applied twice or out of order", () => {
  for (let seed = 1; seed <= 200; seed += 1) {
    const next = random(seed);
    const server = new Server();
    const ids = Array.from({ length: 30 }, (_, index) => `t${index}`);
    for (const id of ids) server.change(id);
    /// The version of each task the page shows.
    const page = new Map();
    const applied = new Set();
    /// The version of each task the events applied gave (never going back).
    const streamed = new Map();
    const ledger = new EventLedger();
    const resume = new ResumePoint();
    const apply = (stream, current) => {
      const event = stream.queue.shift();
      if (current) resume.delivered(event.id);
      if (!ledger.take(event.task.id, changeOf(event.id))) return;
      const key = `${event.task.id}@${event.id}`;
      assert.ok(!applied.has(key), `seed ${seed}: ${key} applied twice`);
      applied.add(key);
      const before = streamed.get(event.task.id) ?? 0;
      assert.ok(event.task.version > before, `seed ${seed}: ${event.task.id} v${event.task.version} after v${before}`);
      streamed.set(event.task.id, event.task.version);
      list(event.task);
    };
    /// A copy is kept unless the page has a newer one (TaskModel.put, by updated_at: a
    /// listing and a stream are not ordered between them).
    const list = (task) => page.set(task.id, Math.max(page.get(task.id) ?? 0, task.version));
    // Page 1 (t0–t9) listed, then its stream opened fresh (at the listing's position).
    let shown = ids.slice(0, 10);
    for (const id of shown) list(server.tasks.get(id));
    let current = server.open(shown, server.position);
    resume.started(String(server.position));
    for (let step = 0; step < 40; step += 1) {
      // Changes anywhere, some delivered.
      for (let count = Math.floor(next() * 5); count > 0; count -= 1) server.change(ids[Math.floor(next() * ids.length)]);
      server.feed(current, Math.floor(next() * 4));
      while (current.queue.length && next() < 0.7) apply(current, true);
      if (next() < 0.3) {
        // Another page: its listing is sent at the page's mark, read now, and lands later.
        const mark = resume.mark();
        const start = Math.floor(next() * 20);
        const listed = ids.slice(start, start + 10).map((id) => ({ ...server.tasks.get(id) }));
        for (let count = Math.floor(next() * 4); count > 0; count -= 1) server.change(ids[Math.floor(next() * ids.length)]);
        server.feed(current, Math.floor(next() * 3));
        while (current.queue.length && next() < 0.5) apply(current, true);
        for (const task of listed) list(task);
        shown = listed.map((task) => task.id);
        resume.landed(mark);
        // The switch: the new stream from the resume point; the old one delivers on until
        // the new one opens, then is closed.
        const replacement = server.open(shown, Number(resume.resumeFrom()));
        resume.started(resume.resumeFrom());
        for (let count = Math.floor(next() * 3); count > 0; count -= 1) server.change(ids[Math.floor(next() * ids.length)]);
        server.feed(current);
        server.feed(replacement, Math.floor(next() * 3));
        while ((current.queue.length || replacement.queue.length)) {
          if (current.queue.length && (next() < 0.5 || !replacement.queue.length)) apply(current, false);
          else apply(replacement, true);
        }
        current = replacement;
      }
      if (next() < 0.3) {
        // Quiet for a moment: once the stream has delivered everything, the page is exact.
        server.feed(current);
        while (current.queue.length) apply(current, true);
        for (const id of shown) assert.equal(page.get(id), server.tasks.get(id).version, `seed ${seed}, step ${step}: ${id}`);
      }
    }
    server.feed(current);
    while (current.queue.length) apply(current, true);
    for (const id of shown) assert.equal(page.get(id), server.tasks.get(id).version, `seed ${seed}: ${id}`);
  }
});

test("the counts are read every 2 s while they change, less often when quiet, hidden or failing", () => {
  assert.equal(nextCountsRead({ previous: COUNTS_POLL_MS, changed: true }), COUNTS_POLL_MS);
  const quiet = [];
  let wait = COUNTS_POLL_MS;
  for (let index = 0; index < 5; index += 1) { wait = nextCountsRead({ previous: wait, changed: false }); quiet.push(wait); }
  assert.deepEqual(quiet, [COUNTS_QUIET_MS, COUNTS_QUIET_MS, COUNTS_QUIET_MS, COUNTS_QUIET_MS, COUNTS_QUIET_MS]);
  assert.ok(COUNTS_QUIET_MS > COUNTS_POLL_MS);
  assert.equal(nextCountsRead({ previous: COUNTS_QUIET_MS, changed: true }), COUNTS_POLL_MS, "a change: quick again");
  assert.equal(nextCountsRead({ previous: COUNTS_POLL_MS, changed: true, hidden: true }), COUNTS_HIDDEN_MS);
  assert.equal(nextCountsRead({ previous: 2000, changed: false, failed: true }), 4000);
  assert.equal(nextCountsRead({ previous: 20_000, changed: false, failed: true }), COUNTS_HIDDEN_MS);
});

test("a flood of new tasks stops the page asking for their creations for a while", () => {
  const gate = new NewRootsGate();
  const limit = NEW_ROOTS_PER_SECOND * NEW_ROOTS_WINDOW_MS / 1000;
  // As many as the window allows, spread over it: still open.
  for (let index = 0; index < limit; index += 1) gate.note(index * (NEW_ROOTS_WINDOW_MS / limit));
  assert.equal(gate.open(NEW_ROOTS_WINDOW_MS), true);
  // Slow and steady for long: the window slides, still open.
  for (let second = 10; second < 100; second += 1) gate.note(second * 1000);
  assert.equal(gate.open(100_000), true);
  // A burst: closed for the pause, then open again.
  for (let index = 0; index <= limit; index += 1) gate.note(200_000 + index);
  assert.equal(gate.open(200_000 + limit), false);
  assert.equal(gate.open(200_000 + limit + NEW_ROOTS_PAUSE_MS - 1), false);
  assert.equal(gate.open(200_000 + limit + NEW_ROOTS_PAUSE_MS), true);
});
