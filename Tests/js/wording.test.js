// Unit tests of dashboard/wording.js: the sentences a row and the detail view say, in
// English and Korean, with the clock given. Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { setLanguage } from "../../dashboard/i18n.js";
import {
  amountText, badgeText, childrenText, countText, detailFields, displayName, errorText, isolate, plain, rateText,
  runTimeText, stallText, valueText, whenText,
} from "../../dashboard/wording.js";

const T0 = Date.parse("2026-12-05T10:00:00.000Z");
const at = (seconds) => new Date(T0 + seconds * 1000).toISOString();

function task(fields = {}) {
  return {
    id: "t1", name: "Task", state: "running", mode: "quantified", completed: 17, total: 40, fraction: 0.425, unit: null,
    stalled: false, stall_reason: null, stalled_since: null, stall_timeout_seconds: 30, created_at: at(0),
    updated_at: at(0), last_progress_at: at(0), last_signal_at: at(0), finished_at: null, rate: null,
    eta_seconds: null, cancel_requested: false, message: null, label: null, parent_id: null, children: null,
    attention: null, ...fields,
  };
}

test("a count with the runner's unit reads naturally in Korean: 17/40 steps, not 40 중 17 steps", () => {
  setLanguage("ko");
  assert.equal(countText(task({ unit: "steps" })), "17/40 steps");
  assert.doesNotMatch(countText(task({ unit: "steps" })), /중/);
  // Without a unit the Korean order stays: the total first.
  assert.equal(countText(task()), "40 중 17");
  assert.equal(countText(task({ unit: "파일", completed: 1200, total: 3000 })), "1,200/3,000 파일");
  setLanguage("en");
  assert.equal(countText(task({ unit: "steps" })), "17 of 40 steps");
  assert.equal(countText(task()), "17 of 40");
  assert.equal(countText(task({ total: null })), "");
});

test("the detail view's progress field says the count the row says", () => {
  for (const language of ["en", "ko"]) {
    setLanguage(language);
    const quantified = task({ unit: "steps" });
    const progress = detailFields(quantified, T0, false).find(([key]) => key === "field_progress")[1];
    assert.equal(progress, countText(quantified));
  }
  setLanguage("en");
  const parent = task({ total: null, fraction: 0.5 });
  assert.equal(detailFields(parent, T0, false).find(([key]) => key === "field_progress")[1], "50%");
});

test("an indeterminate task's amount, and the rate in its own units", () => {
  setLanguage("en");
  assert.equal(amountText(task({ mode: "indeterminate", total: null, completed: 0 })), "");
  assert.equal(amountText(task({ mode: "indeterminate", total: null, completed: 1200, unit: "rows" })), "1,200 rows");
  assert.equal(rateText(task({ rate: 3.25, unit: "files" })), "3.3 files/s");
  assert.equal(rateText(task({ rate: 0.01, total: null })), ""); // a parent's fraction per second
  setLanguage("ko");
  assert.equal(rateText(task({ rate: 2, unit: "files" })), "초당 2 files");
});

test("names: bidi controls stripped, an invisible name shows the id, isolation marks", () => {
  assert.equal(plain("a\u202Eb\u2066c"), "abc");
  assert.equal(plain(null), "");
  assert.equal(displayName(task({ name: "\u200B \u3164" })), "t1");
  assert.equal(displayName(task({ name: "" })), "t1");
  assert.equal(displayName(task({ name: "Backup\u202E" })), "Backup");
  assert.equal(isolate("x"), "\u2068x\u2069");
});

test("the badge: an outcome, Stalled, a parent's attention, else the state", () => {
  setLanguage("en");
  assert.equal(badgeText(task()), "Running");
  assert.equal(badgeText(task({ stalled: true })), "Stalled");
  assert.equal(badgeText(task({ attention: "failed" })), "Part failed");
  assert.equal(badgeText(task({ state: "failed", attention: "failed" })), "Failed");
  setLanguage("ko");
  assert.equal(badgeText(task({ stalled: true })), "정체");
});

test("the time line: running for, waiting for, ended at · ran", () => {
  setLanguage("en");
  assert.equal(whenText(task(), T0 + 65_000), "Running for 1 min");
  assert.equal(whenText(task({ state: "pending" }), T0 + 42_000), "Waiting for 42 sec");
  const ended = whenText(task({ state: "failed", finished_at: at(180) }), T0 + 600_000);
  assert.match(ended, /^Ended .+ · ran 3 min$/);
  assert.equal(whenText(task({ state: "failed", finished_at: null }), T0), "");
  setLanguage("ko");
  assert.equal(whenText(task(), T0 + 180_000), "3분째 진행 중");
});

test("the stall line and a parent's child counts", () => {
  setLanguage("en");
  const silent = task({ stalled: true, stall_reason: "silent", last_signal_at: at(0) });
  assert.equal(stallText(silent, T0 + 38_000), "No signal for 38 sec");
  assert.equal(stallText(task(), T0 + 38_000), "");
  const counts = { total: 3, pending: 0, running: 2, stalled: 1, succeeded: 0, failed: 1, canceled: 0 };
  assert.equal(childrenText(task({ total: null, children: counts, attention: "failed" })), "1 of 3 failed · 1 stalled");
  setLanguage("ko");
  assert.equal(childrenText(task({ total: null, children: counts, attention: "failed" })), "3개 중 1개 실패 · 1개 정체");
});

test("a progress bar's spoken value, and a failed request's words", () => {
  setLanguage("en");
  assert.equal(valueText(0.425, null), "42 percent");
  assert.equal(valueText(0.425, 90), "42 percent, about 2 minutes left");
  assert.equal(errorText(new TypeError("Failed to fetch")), "the server could not be reached");
  assert.equal(errorText({ status: 409 }), "the task has already finished");
  setLanguage("ko");
  assert.equal(errorText({ status: 500 }), "서버 응답 코드 500");
});

test("detail fields: why first; offline leaves out the time left", () => {
  setLanguage("en");
  const moving = task({ eta_seconds: 60, last_progress_at: at(10), message: "half way" });
  const fields = detailFields(moving, T0 + 30_000, false);
  assert.deepEqual(fields.slice(0, 4).map(([key]) => key), ["field_id", "field_name", "field_state", "field_message"]);
  const value = (list, key) => list.find(([name]) => name === key)[1];
  assert.equal(value(fields, "field_message"), "half way");
  assert.equal(value(fields, "field_eta"), "40 seconds");
  assert.equal(value(detailFields(moving, T0 + 30_000, true), "field_eta"), "—");
  assert.equal(value(detailFields(task({ attention: "stalled" }), T0, false), "field_state"), "Running · Part stalled");
});

test("just past the due moment: late by under 1 sec, never by 0 sec, in both languages", () => {
  const late = task({ overdue: true, overdue_since: at(60), expected_seconds: 60 });
  const ranLate = task({ state: "succeeded", overdue: true, overdue_since: at(60), finished_at: at(60.4) });
  const onTheDot = task({ state: "failed", overdue: true, overdue_since: at(60), finished_at: at(60) });
  setLanguage("en");
  assert.equal(runTimeText(late, T0 + 60_000), "Overdue by under 1 sec");
  assert.equal(runTimeText(late, T0 + 60_999), "Overdue by under 1 sec");
  assert.equal(runTimeText(late, T0 + 61_000), "Overdue by 1 sec", "a whole second: counted");
  assert.equal(runTimeText(ranLate, T0 + 300_000), "Ended under 1 sec late");
  assert.equal(runTimeText(onTheDot, T0 + 300_000), "Ended under 1 sec late");
  assert.equal(detailFields(late, T0 + 60_500, false).find(([key]) => key === "field_run_time")[1], "Overdue by under 1 sec");
  setLanguage("ko");
  assert.equal(runTimeText(late, T0 + 60_500), "1초 미만 초과");
  assert.equal(runTimeText(ranLate, T0 + 300_000), "1초 미만 늦게 종료");
  assert.equal(runTimeText(late, T0 + 61_000), "1초 초과");
  setLanguage("en");
});

test("run-time rules: overdue by, ended late, too quick, in their own words in both languages", () => {
  const late = task({ overdue: true, overdue_since: at(60), expected_seconds: 60 });
  const ranLate = task({ state: "succeeded", overdue: true, overdue_since: at(60), finished_at: at(180) });
  const quick = task({ state: "succeeded", too_quick: true, min_seconds: 60, finished_at: at(3) });
  setLanguage("en");
  assert.equal(badgeText(late), "Overdue");
  assert.equal(badgeText(task({ overdue: true, overdue_since: at(0), stalled: true })), "Stalled", "a stall says more");
  assert.equal(badgeText(ranLate), "Succeeded", "a finished task shows its outcome, and its line says it was late");
  assert.equal(runTimeText(late, T0 + 300_000), "Overdue by 4 min");
  assert.equal(runTimeText(ranLate, T0 + 300_000), "Ended 2 min late");
  assert.equal(runTimeText(quick, T0 + 300_000), "Too quick: under 1 min");
  assert.equal(runTimeText(task(), T0), "");
  const field = (t0, key) => detailFields(t0, T0 + 300_000, false).find(([name]) => name === key)[1];
  assert.equal(field(late, "field_run_time"), "Overdue by 4 min");
  assert.equal(field(task({ expected_seconds: 600 }), "field_run_time"), "On time");
  assert.equal(field(task(), "field_run_time"), "—");
  assert.equal(field(late, "field_expected"), "1 minute");
  setLanguage("ko");
  assert.equal(badgeText(late), "기한 초과");
  assert.equal(runTimeText(late, T0 + 300_000), "4분 초과");
  assert.equal(runTimeText(ranLate, T0 + 300_000), "2분 늦게 종료");
  assert.equal(runTimeText(quick, T0 + 300_000), "너무 빨리 종료: 1분 미만");
  setLanguage("en");
});
