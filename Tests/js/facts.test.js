// Unit tests of dashboard/facts.js: the one clock, the one percent rule, and what a row says
// about a task, with the clock given (no waiting). Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  actionsOf, badgeOf, childFacts, elapsedSeconds, errorWords, lastSignalAge, matchesSearch, noProgressSeconds, noSignalSeconds,
  percentOf, secondsLeft, showsRate, stallFact, tabCounts, terminateOffered,
} from "../../dashboard/facts.js";

const T0 = Date.parse("2026-12-05T10:00:00.000Z");
const at = (seconds) => new Date(T0 + seconds * 1000).toISOString();

function task(fields = {}) {
  return {
    id: "t", name: "Task", state: "running", mode: "quantified", completed: 0, total: 100, fraction: 0,
    stalled: false, stall_reason: null, stalled_since: null, stall_timeout_seconds: 30, progress_timeout_seconds: null,
    created_at: at(0), updated_at: at(0), last_progress_at: null, last_signal_at: at(0), finished_at: null,
    rate: null, eta_seconds: null, cancel_requested: false, message: null, children: null, attention: null,
    ...fields,
  };
}

test("percent: floor, and 100 only when the fraction is exactly 1", () => {
  assert.equal(percentOf(0), 0);
  assert.equal(percentOf(null), 0);
  assert.equal(percentOf(0.29), 29); // 0.29 × 100 is 28.999… in binary
  assert.equal(percentOf(0.57), 57);
  assert.equal(percentOf(0.999), 99);
  assert.equal(percentOf(119 / 120), 99);
  assert.equal(percentOf(0.9999999999), 99);
  assert.equal(percentOf(1), 100);
  assert.equal(percentOf(0.004), 0);
  // The CLI's slack exactly (1e-9 of a percent): a fraction truly under 29% stays 28.
  assert.equal(percentOf(0.2899999), 28);
});

test("no signal for: now − last_signal_at, the same for a silent and a no-progress stall", () => {
  // The case: stall 20 s, progress timeout 5 s, nothing sent; at 24 s both ages are 24 s.
  const quiet = task({ stall_timeout_seconds: 20, progress_timeout_seconds: 5, last_signal_at: at(0) });
  assert.equal(noSignalSeconds(quiet, T0 + 24_000), 24);
  assert.equal(noProgressSeconds(quiet, T0 + 24_000), 24); // no progress yet: from the start
  // stalled_since keeps the first stall's start (5 s, no progress); the silent age does not use it.
  const silent = { ...quiet, stalled: true, stall_reason: "silent", stalled_since: at(5) };
  assert.deepEqual(stallFact(silent, T0 + 24_000), { key: "stalledSilent", seconds: 24 });
  const noProgress = { ...quiet, stalled: true, stall_reason: "no_progress", stalled_since: at(5),
    last_signal_at: at(20), last_progress_at: at(2) };
  assert.deepEqual(stallFact(noProgress, T0 + 24_000), { key: "stalledNoProgress", seconds: 22 });
  assert.equal(stallFact({ ...silent, state: "failed" }, T0), null);
  assert.equal(stallFact(quiet, T0), null);
});

test("a server without last_signal_at: a silent stall's age from its start plus the timeout, else none", () => {
  const old = task({ last_signal_at: undefined, stalled: true, stall_reason: "silent", stalled_since: at(30) });
  assert.equal(noSignalSeconds(old, T0 + 40_000), 40);
  assert.equal(noSignalSeconds(task({ last_signal_at: undefined }), T0 + 40_000), null);
});

test("last signal N ago: on a running row once older than 5 s, not while stalled or finished", () => {
  const running = task({ last_signal_at: at(10) });
  assert.equal(lastSignalAge(running, T0 + 14_000), null);
  assert.equal(lastSignalAge(running, T0 + 22_000), 12);
  assert.equal(lastSignalAge({ ...running, stalled: true, stall_reason: "silent" }, T0 + 60_000), null);
  assert.equal(lastSignalAge({ ...running, state: "succeeded" }, T0 + 60_000), null);
  assert.equal(lastSignalAge({ ...running, state: "pending" }, T0 + 60_000), null);
});

test("elapsed: to now while running, to finished_at once finished", () => {
  assert.equal(elapsedSeconds(task(), T0 + 95_000), 95);
  assert.equal(elapsedSeconds(task({ state: "failed", finished_at: at(180) }), T0 + 999_000), 180);
});

test("seconds left: counted down from the last report; none when stalled, finished or a parent needs attention", () => {
  const moving = task({ eta_seconds: 60, last_progress_at: at(10) });
  assert.equal(secondsLeft(moving, T0 + 30_000), 40);
  assert.equal(secondsLeft({ ...moving, stalled: true }, T0 + 30_000), null);
  assert.equal(secondsLeft({ ...moving, attention: "stalled" }, T0 + 30_000), null);
  assert.equal(secondsLeft({ ...moving, state: "succeeded" }, T0 + 30_000), null);
  assert.equal(secondsLeft(moving, T0 + 69_500), null); // under a second
});

test("rate: shown in the task's own units only, never a parent's fraction per second (\"0/s\")", () => {
  assert.equal(showsRate(task({ rate: 3.5 })), true);
  assert.equal(showsRate(task({ rate: 0.004, total: null })), false);
  assert.equal(showsRate(task({ rate: 0 })), false);
  assert.equal(showsRate(task({ rate: null })), false);
  assert.equal(showsRate(task({ rate: 2, attention: "failed" })), false);
});

test("badge: a parent with attention is never plain running", () => {
  assert.equal(badgeOf(task()), "running");
  assert.equal(badgeOf(task({ attention: "failed" })), "attention_failed");
  assert.equal(badgeOf(task({ attention: "stalled" })), "attention_stalled");
  assert.equal(badgeOf(task({ stalled: true })), "stalled");
  assert.equal(badgeOf(task({ state: "failed", attention: "failed" })), "failed");
  assert.equal(badgeOf(task({ state: "pending" })), "pending");
});

test("child counts: \"1 of 3 failed · 1 stalled\"", () => {
  const counts = { total: 3, pending: 0, running: 2, stalled: 1, succeeded: 0, failed: 1, canceled: 0 };
  assert.deepEqual(childFacts(task({ total: null, children: counts, attention: "failed" })), [
    { key: "childrenFailed", count: 1, total: 3 }, { key: "childrenStalled", count: 1, total: 3 }]);
  const calm = { total: 4, pending: 1, running: 1, stalled: 0, succeeded: 1, failed: 0, canceled: 1 };
  assert.deepEqual(childFacts(task({ children: calm })), [
    { key: "childrenDone", count: 1, total: 4 }, { key: "childrenCanceled", count: 1, total: 4 }]);
  // A grandchild failed: the direct counts do not show it; the line says so.
  const deep = { total: 2, pending: 0, running: 2, stalled: 0, succeeded: 0, failed: 0, canceled: 0 };
  assert.deepEqual(childFacts(task({ children: deep, attention: "failed" }))[1], { key: "deepFailed", count: 0, total: 2 });
  assert.deepEqual(childFacts(task()), []);
  assert.deepEqual(childFacts(task({ children: undefined })), []);
});

test("terminate: offered once a cancel has gone unanswered for 10 s", () => {
  const asked = task({ cancel_requested: true });
  assert.equal(terminateOffered(asked, 1000, 10_999), false);
  assert.equal(terminateOffered(asked, 1000, 11_000), true);
  assert.equal(terminateOffered(asked, undefined, 99_000), false);
  assert.equal(terminateOffered(task(), 1000, 99_000), false);
  assert.equal(terminateOffered({ ...asked, state: "canceled" }, 1000, 99_000), false);
});

test("errors: a request that never reached the server is not \"Failed to fetch\"", () => {
  assert.equal(errorWords(new TypeError("Failed to fetch")).key, "errorUnreachable");
  assert.equal(errorWords({ status: 409 }).key, "errorFinished");
  assert.equal(errorWords({ status: 404 }).key, "errorMissing");
  assert.equal(errorWords({ status: 503 }).key, "errorBusy");
  assert.deepEqual(errorWords({ status: 500 }), { key: "errorStatus", values: { status: 500 } });
});

test("tab counts from the summary; none without one", () => {
  assert.deepEqual(tabCounts({ pending: 1, running: 5, stalled: 2, succeeded: 7, failed: 3, canceled: 1 }),
    { running: 6, stalled: 2, failed: 3, finished: 11, all: 17 });
  // Running, Finished and All list top-level tasks; Stalled and Failed list children too.
  assert.deepEqual(tabCounts({ pending: 1, running: 5, stalled: 2, succeeded: 7, failed: 3, canceled: 1 },
                             { pending: 0, running: 2, stalled: 0, succeeded: 1, failed: 1, canceled: 0 }),
    { running: 2, stalled: 2, failed: 3, finished: 2, all: 4 });
  assert.equal(tabCounts(null), null);
});

test("search: case-insensitive substring of name or id", () => {
  const photos = task({ id: "job-42", name: "Copy Photos" });
  assert.equal(matchesSearch(photos, "photo"), true);
  assert.equal(matchesSearch(photos, "B-4"), true);
  assert.equal(matchesSearch(photos, "video"), false);
  assert.equal(matchesSearch(photos, ""), true);
});

test("a row's buttons: Cancel for a control token, the confirmation while it applies, Terminate after 10 s", () => {
  const running = task();
  const base = { canCancel: true, askedHere: false, asking: undefined, askedAt: undefined, now: 50_000 };
  assert.deepEqual(actionsOf(running, base),
    { cancellable: true, canceling: false, asking: undefined, confirming: false, terminate: false });
  assert.equal(actionsOf(running, { ...base, canCancel: false }).cancellable, false);
  assert.equal(actionsOf(running, { ...base, canCancel: false, asking: "cancel" }).confirming, false);
  assert.equal(actionsOf(running, { ...base, asking: "cancel" }).confirming, true);
  // Asked by someone else meanwhile: the cancel confirmation no longer applies.
  const asked = task({ cancel_requested: true });
  assert.equal(actionsOf(asked, { ...base, asking: "cancel" }).confirming, false);
  assert.equal(actionsOf(asked, base).canceling, true);
  assert.equal(actionsOf(asked, { ...base, askedAt: 40_001 }).terminate, false);
  assert.equal(actionsOf(asked, { ...base, askedAt: 40_000 }).terminate, true);
  assert.equal(actionsOf(asked, { ...base, askedAt: 40_000, asking: "terminate" }).confirming, true);
  const done = task({ state: "canceled", cancel_requested: true });
  assert.deepEqual(actionsOf(done, { ...base, askedHere: true, askedAt: 0, asking: "terminate" }),
    { cancellable: false, canceling: false, asking: undefined, confirming: false, terminate: false });
});
