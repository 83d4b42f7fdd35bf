// Unit tests of dashboard/i18n.js: the words chosen, plurals, percents and durations in
// English and Korean (Korean as a native reader reads it). Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  formatDuration, formatInteger, formatWhen, formatPercent, formatPercentText, initialLanguage, setLanguage, t, tn,
} from "../../dashboard/i18n.js";

test("the language: ?lang=, then the stored choice, then the browser's", () => {
  assert.equal(initialLanguage("?lang=ko", "en", "en-US"), "ko");
  assert.equal(initialLanguage("", "ko", "en-US"), "ko");
  assert.equal(initialLanguage("?lang=xx", null, "ko-KR"), "ko");
  assert.equal(initialLanguage("", null, "fr-FR"), "en");
});

test("one point, two points", () => {
  setLanguage("en");
  assert.equal(tn("points", 1), "Detail: up to 1 point");
  assert.equal(tn("points", 2), "Detail: up to 2 points");
  assert.equal(tn("chartCaption", 1, { from: "a", to: "b" }), "Fraction done (0 to 100%) from a to b, 1 point");
  assert.equal(tn("points", 1000), "Detail: up to 1,000 points");
  assert.equal(tn("tabCount", 1, { label: "Stalled" }), "Stalled, 1 task");
  assert.equal(tn("tabCount", 3, { label: "Running" }), "Running, 3 tasks");
  setLanguage("ko");
  assert.equal(tn("points", 1), "세밀도: 점 최대 1개");
});

test("percent: floor, 100 only at exactly 1, in both languages", () => {
  setLanguage("en");
  assert.equal(formatPercentText(119 / 120), "99%");
  assert.equal(formatPercentText(1), "100%");
  assert.equal(formatPercentText(0.29), "29%");
  assert.equal(formatPercent(0.645), "64");
  setLanguage("ko");
  assert.equal(formatPercentText(0.999), "99%");
});

test("Korean names come before the verb in accessible names", () => {
  setLanguage("ko");
  assert.equal(t("cancelNamed", { name: "사진 백업" }), "사진 백업 취소");
  assert.equal(t("cancelingNamed", { name: "사진 백업" }), "사진 백업 취소 중…");
  assert.equal(t("terminateNamed", { name: "사진 백업" }), "사진 백업 강제 종료");
  setLanguage("en");
  assert.equal(t("cancelNamed", { name: "Photo backup" }), "Cancel Photo backup");
});

test("Korean stalled is 정체, never 멈춤 (which reads as paused)", () => {
  setLanguage("ko");
  for (const key of ["stalled", "filterStalled", "field_stall", "badge_attention_stalled", "childrenStalled"]) {
    assert.match(t(key, { count: "1" }), /정체/, key);
    assert.doesNotMatch(t(key, { count: "1" }), /멈춤/, key);
  }
});

test("every English string has a Korean one, with the same placeholders", async () => {
  const source = await import("node:fs").then((fs) => fs.readFileSync(new URL("../../dashboard/i18n.js", import.meta.url), "utf8"));
  const keys = (block) => [...block.matchAll(/^\s+(\w+): "/gm)].map((m) => m[1])
    .concat([...block.matchAll(/, (\w+): "/g)].map((m) => m[1]));
  const [en, ko] = source.split(/^  ko: \{/m);
  const english = new Set(keys(en.split(/^  en: \{/m)[1]));
  const korean = new Set(keys(ko));
  // English plural "_one" forms have no Korean twin: Korean has one form.
  const missing = [...english].filter((key) => !korean.has(key) && !key.endsWith("_one") && key !== "title");
  assert.deepEqual(missing, []);
  for (const key of english) {
    if (!korean.has(key)) continue;
    setLanguage("en");
    const wanted = (t(key).match(/\{\w+\}/g) ?? []).sort();
    setLanguage("ko");
    assert.deepEqual((t(key).match(/\{\w+\}/g) ?? []).sort(), wanted, key);
  }
});

test("durations: the largest readable unit", () => {
  setLanguage("en");
  assert.equal(formatDuration(42), "42 seconds");
  assert.equal(formatDuration(42, "short"), "42 sec");
  assert.equal(formatDuration(180, "short"), "3 min");
  setLanguage("ko");
  assert.equal(formatDuration(180, "short"), "3분");
});

test("a moment on a row: its time of day when it was today, else its date too", () => {
  setLanguage("en");
  const now = new Date(2026, 11, 5, 15, 0);
  assert.doesNotMatch(formatWhen(new Date(2026, 11, 5, 9, 30), now), /2026|26/);
  assert.match(formatWhen(new Date(2026, 11, 4, 9, 30), now), /12\/4\/26/);
});

test("numbers are grouped in the page's language, and the Korean count with a unit is n/total", () => {
  setLanguage("en");
  assert.equal(formatInteger(12345), "12,345");
  assert.equal(t("ofTotalUnit", { completed: "17", total: "40", unit: "steps" }), "17 of 40 steps");
  setLanguage("ko");
  assert.equal(formatInteger(12345), "12,345");
  assert.equal(t("ofTotalUnit", { completed: "17", total: "40", unit: "steps" }), "17/40 steps");
});
