// What a row and the detail view say about a task, in the page's language: the words built
// from facts.js and i18n.js, with the time given. No DOM, so the unit tests (Tests/js) read
// the same sentences the page shows.

import {
  badgeOf, childFacts, elapsedSeconds, errorWords, isFinished, noSignalSeconds, runTimeFact, secondsLeft, showsRate,
  stallFact,
} from "./facts.js";
import {
  formatDateTime, formatDuration, formatInteger, formatNumber, formatPercent, formatPercentText, formatWhen, t,
} from "./i18n.js";

/// The bidirectional controls (embeddings, overrides, isolates, marks), stripped from the
/// text tasks bring before it is shown, as the CLI does: a name cannot turn itself around.
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;

/// Characters that show nothing: a name made only of them is shown as the task's id.
const INVISIBLE = /[\s\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180E\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFEFF\uFFA0]/g;

/// `text` (a task's name, label, unit, message) without bidi controls.
export function plain(text) { return (text ?? "").replace(BIDI_CONTROLS, ""); }

/// The task's name, or its id when the name would show nothing (empty, or only spaces and
/// invisible characters).
export function displayName(task) {
  const name = plain(task.name);
  return name.replace(INVISIBLE, "") ? name : task.id;
}

/// `text` isolated from the text around it (a name with bidi controls stays in its box).
export function isolate(text) { return `\u2068${text}\u2069`; }

/// A task's unit after a number (" files"), or nothing.
function unitText(task) { return task.unit ? ` ${plain(task.unit)}` : ""; }

/// How far a task with a total is ("17 of 40 steps"; Korean "17/40 steps", since the unit is
/// the runner's own word and "40 중 17 steps" does not read as Korean); "" without a total.
export function countText(task) {
  if (task.total === null || task.total === undefined) return "";
  const values = { completed: formatInteger(task.completed), total: formatInteger(task.total) };
  return task.unit ? t("ofTotalUnit", { ...values, unit: plain(task.unit) }) : t("ofTotal", values);
}

/// How much an indeterminate task has done ("17 files"), or "" before it has done any.
export function amountText(task) {
  return task.completed > 0 ? formatInteger(task.completed) + unitText(task) : "";
}

/// The task's rate in its own units ("3.5 files/s"), or "" when it is not worth showing.
export function rateText(task) {
  return showsRate(task) ? t("rate", { rate: formatNumber(task.rate) + unitText(task) }) : "";
}

/// What the badge says: the outcome, "Stalled", a parent's "Part failed", or the state.
export function badgeText(task) {
  const kind = badgeOf(task);
  if (kind === "stalled") return t("stalled");
  if (kind === "overdue") return t("overdue");
  if (kind.startsWith("attention_")) return t(`badge_${kind}`);
  return t(`state_${task.state}`);
}

/// The stall line of `task` at `now` ("No signal for 38 sec"), or "".
export function stallText(task, now) {
  const stall = stallFact(task, now);
  return stall ? t(stall.key, { age: formatDuration(stall.seconds, "short") }) : "";
}

/// The run-time line of `task` at `now` ("Overdue by 4 min", "Ended 2 min late", "Too
/// quick: under 1 min"), or "". Less than a second overdue or late reads "under 1 sec",
/// not "0 sec": the task is late, by less than the smallest unit shown.
export function runTimeText(task, now) {
  const fact = runTimeFact(task, now);
  if (!fact) return "";
  const age = fact.seconds < 1 ? t("underAge", { age: formatDuration(1, "short") }) : formatDuration(fact.seconds, "short");
  return t(fact.key, { age });
}

/// Whether the task has a run-time rule (`expected_seconds`, `deadline` or `min_seconds`).
function hasRunTimeRule(task) {
  return typeof task.expected_seconds === "number" || Boolean(task.deadline) || typeof task.min_seconds === "number";
}

/// A parent's child counts as one line ("1 of 3 failed · 1 stalled"), or "".
export function childrenText(task) {
  return childFacts(task)
    .map((part) => t(part.key, { count: formatInteger(part.count), total: formatInteger(part.total) })).join(" · ");
}

/// The row's time line at `now`: how long it has run (or waited), or when it ended and how
/// long it ran.
export function whenText(task, now) {
  const duration = formatDuration(elapsedSeconds(task, now), "short");
  if (isFinished(task)) {
    return task.finished_at ? t("endedAt", { time: formatWhen(new Date(task.finished_at), new Date(now)), duration }) : "";
  }
  return t(task.state === "pending" ? "pendingFor" : "runningFor", { duration });
}

/// A progress bar's spoken value: its percent, and the time left when known.
export function valueText(fraction, left) {
  return left !== null
    ? t("valueTextEta", { percent: formatPercent(fraction), duration: formatDuration(left) })
    : t("valueText", { percent: formatPercent(fraction) });
}

/// The words of a failed request, in the page's language.
export function errorText(error) {
  const words = errorWords(error);
  return t(words.key, words.values);
}

/// The detail view's fields of `task` at `now`, as [key of the field's name, value]; `away`
/// (offline) leaves out the time left, which would count down from figures of then.
export function detailFields(task, now, away) {
  const none = t("none");
  const date = (value) => value ? formatDateTime(new Date(value)) : none;
  const progress = countText(task)
    || (task.fraction !== null && task.fraction !== undefined ? formatPercentText(task.fraction) : formatInteger(task.completed));
  const left = away ? null : secondsLeft(task, now);
  const signal = noSignalSeconds(task, now);
  const finished = isFinished(task);
  const badge = badgeOf(task);
  // Why first: the state (or what needs attention) and the message lead, times follow.
  return [
    ["field_id", task.id], ["field_name", plain(task.name)],
    ["field_state", badge.startsWith("attention_") ? `${t(`state_${task.state}`)} · ${t(`badge_${badge}`)}` : t(`state_${task.state}`)],
    ["field_message", plain(task.message) || none],
    ["field_label", plain(task.label) || none], ["field_progress", progress],
    ["field_children", childrenText(task) || none],
    // A parent's rate is a fraction per second ("0/s"): not shown.
    ["field_rate", rateText(task) || none],
    ["field_eta", left !== null ? formatDuration(left) : none],
    ["field_stall", task.stalled && !finished ? stallText(task, now) : t("no")],
    ["field_last_signal", signal !== null && !finished ? t("ago", { age: formatDuration(signal, "short") }) : none],
    ["field_ran", formatDuration(elapsedSeconds(task, now), "short")],
    ["field_stall_timeout", formatDuration(task.stall_timeout_seconds)],
    // A task with a run-time rule is on time until a rule says otherwise.
    ["field_run_time", runTimeText(task, now) || (hasRunTimeRule(task) ? t("onTime") : none)],
    ["field_expected", typeof task.expected_seconds === "number" ? formatDuration(task.expected_seconds) : none],
    ["field_deadline", date(task.deadline)],
    ["field_min", typeof task.min_seconds === "number" ? formatDuration(task.min_seconds) : none],
    ["field_cancel", task.cancel_requested ? t("yes") : t("no")],
    ["field_parent", task.parent_id || none], ["field_created", date(task.created_at)],
    ["field_updated", date(task.updated_at)], ["field_finished", date(task.finished_at)],
  ];
}
