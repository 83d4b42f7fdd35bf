// What a row says about a task, worked out from the task and the clock alone (no DOM, no
// words): its percent, its ages, how long it ran, a parent's child counts, its badge, and
// whether Terminate is offered. The page and the unit tests (Tests/js) call the same
// functions with the time given, so every surface of the page counts the same way.

export const FINISHED_STATES = new Set(["succeeded", "failed", "canceled"]);

/// A running row says "last signal N ago" once the last signal is older than this: a task
/// heard from a moment ago needs no word about it.
export const LAST_SIGNAL_AFTER_S = 5;

/// Terminate is offered once a cancel has gone unanswered this long.
export const TERMINATE_AFTER_MS = 10_000;

export function isFinished(task) { return FINISHED_STATES.has(task.state); }

/// The percent shown for `fraction`: floor(fraction × 100), and 100 only when the fraction
/// is exactly 1 (DESIGN.md, "The task"). 1e-9 of slack absorbs binary rounding (0.29 × 100
/// is 28.999…), so 29 of 100 reads 29% — the same slack as the CLI's Formatting.percent,
/// so both surfaces always agree.
export function percentOf(fraction) {
  if (typeof fraction !== "number" || !(fraction > 0)) return 0;
  if (fraction >= 1) return 100;
  return Math.min(99, Math.floor(fraction * 100 + 1e-9));
}

/// Seconds from the time `iso` to `now` (milliseconds), never negative; null without a time.
export function secondsSince(iso, now) {
  if (!iso) return null;
  const at = Date.parse(iso);
  return Number.isFinite(at) ? Math.max(0, (now - at) / 1000) : null;
}

/// "No signal for": now − `last_signal_at`. A task from a server that does not send
/// `last_signal_at` has no such age, except a silent stall's (it began a stall timeout
/// after the last signal).
export function noSignalSeconds(task, now) {
  if (task.last_signal_at) return secondsSince(task.last_signal_at, now);
  if (task.stalled && task.stall_reason === "silent" && task.stalled_since) {
    return secondsSince(task.stalled_since, now) + (task.stall_timeout_seconds ?? 0);
  }
  return null;
}

/// "No progress for": now − `last_progress_at` (the task's start while it has made none).
export function noProgressSeconds(task, now) {
  return secondsSince(task.last_progress_at ?? task.created_at, now);
}

/// The stall line of an unfinished stalled task: which words (`stalledSilent` or
/// `stalledNoProgress`) and the age in seconds; null otherwise.
export function stallFact(task, now) {
  if (!task.stalled || isFinished(task)) return null;
  if (task.stall_reason === "no_progress") return { key: "stalledNoProgress", seconds: noProgressSeconds(task, now) ?? 0 };
  return { key: "stalledSilent", seconds: noSignalSeconds(task, now) ?? 0 };
}

/// The run-time line of a task (DESIGN.md, "Webhooks": run-time rules): `overdueFor` while
/// it runs past its due moment (seconds since `overdue_since`), `endedLate` once it finished
/// past it (how late), `tooQuick` for a success sooner than its `min_seconds` (those
/// seconds); null otherwise. Each `{key, seconds}`.
export function runTimeFact(task, now) {
  if (task.too_quick) return { key: "tooQuick", seconds: task.min_seconds ?? 0 };
  if (!task.overdue) return null;
  if (!isFinished(task)) return { key: "overdueFor", seconds: secondsSince(task.overdue_since, now) ?? 0 };
  const end = Date.parse(task.finished_at ?? "");
  const since = Date.parse(task.overdue_since ?? "");
  return { key: "endedLate", seconds: Number.isFinite(end) && Number.isFinite(since) ? Math.max(0, (end - since) / 1000) : 0 };
}

/// Seconds since a running task's last signal, once older than LAST_SIGNAL_AFTER_S; null
/// when the row has nothing to say about it (not running, stalled: its stall line says it).
export function lastSignalAge(task, now) {
  if (task.state !== "running" || task.stalled) return null;
  const age = noSignalSeconds(task, now);
  return age !== null && age >= LAST_SIGNAL_AFTER_S ? age : null;
}

/// How long the task has run: from its creation to its finish, or to now while unfinished.
export function elapsedSeconds(task, now) {
  const end = task.finished_at ? Date.parse(task.finished_at) : now;
  return Math.max(0, (end - Date.parse(task.created_at)) / 1000);
}

/// Seconds left at the task's rate, counted down from its last report; null when it cannot
/// be known honestly (finished, stalled, a parent needing attention, no ETA, under 1 s).
export function secondsLeft(task, now) {
  if (typeof task.eta_seconds !== "number" || isFinished(task) || task.stalled || task.attention) return null;
  const since = secondsSince(task.last_progress_at, now) ?? 0;
  const left = task.eta_seconds - since;
  return left >= 1 ? left : null;
}

/// Whether the task's rate is worth showing: a number above 0, in the task's own units (a
/// parent's rate is a fraction per second, which reads as "0/s"), and no parent attention.
export function showsRate(task) {
  return typeof task.rate === "number" && task.rate > 0 && task.total !== null && task.total !== undefined
    && !task.attention && !isFinished(task);
}

/// What the badge says: the outcome of a finished task; "stalled"; "overdue" (a stall, with
/// nothing moving, says more); for an unfinished parent with `attention`,
/// "attention_failed" or "attention_stalled" (never a plain "running" while something
/// below needs a look); else the state.
export function badgeOf(task) {
  if (isFinished(task)) return task.state;
  if (task.stalled) return "stalled";
  if (task.overdue) return "overdue";
  if (task.attention === "failed" || task.attention === "stalled") return `attention_${task.attention}`;
  return task.state;
}

/// A parent's child counts as parts of one line ("1 of 3 failed · 1 stalled"): each
/// `{key, count, total}`. Failed children lead (else those done); canceled and stalled
/// follow; an `attention` from further down than the direct children is said too.
export function childFacts(task) {
  const counts = task.children;
  if (!counts || !counts.total) {
    return task.attention ? [{ key: task.attention === "failed" ? "deepFailed" : "deepStalled", count: 0, total: 0 }] : [];
  }
  const parts = [];
  if (counts.failed) parts.push({ key: "childrenFailed", count: counts.failed, total: counts.total });
  else parts.push({ key: "childrenDone", count: counts.succeeded ?? 0, total: counts.total });
  if (counts.canceled) parts.push({ key: "childrenCanceled", count: counts.canceled, total: counts.total });
  if (counts.stalled) parts.push({ key: "childrenStalled", count: counts.stalled, total: counts.total });
  if (task.attention === "failed" && !counts.failed) parts.push({ key: "deepFailed", count: 0, total: counts.total });
  if (task.attention === "stalled" && !counts.stalled && !counts.failed) {
    parts.push({ key: "deepStalled", count: 0, total: counts.total });
  }
  return parts;
}

/// Whether Terminate is offered: an unfinished task whose cancel was asked for (at
/// `askedAt`, on the same clock as `now`) TERMINATE_AFTER_MS ago or more.
export function terminateOffered(task, askedAt, now) {
  return !isFinished(task) && task.cancel_requested === true && typeof askedAt === "number"
    && now - askedAt >= TERMINATE_AFTER_MS;
}

/// What a row's buttons offer for `task`: `cancellable` (a control token and an unfinished
/// task), `canceling` (asked by this page, `askedHere`, or by anyone), the confirmation
/// open (`asking`: "cancel" or "terminate", while it still applies: `confirming`), and
/// whether Terminate is offered (a cancel asked at `askedAt` unanswered for 10 s at `now`).
export function actionsOf(task, { canCancel, askedHere, asking, askedAt, now }) {
  const finished = isFinished(task);
  const cancellable = canCancel && !finished;
  const canceling = !finished && (askedHere || Boolean(task.cancel_requested));
  const open = cancellable ? asking : undefined;
  return {
    cancellable, canceling, asking: open,
    confirming: open === "terminate" || (open === "cancel" && !canceling),
    terminate: cancellable && terminateOffered(task, askedAt, now),
  };
}

/// The words for a failed request, by what failed: `{key, values}` for i18n's t(). A
/// request that never reached the server (fetch's TypeError, "Failed to fetch") has no
/// status; the server's replies are told apart by their status and code.
export function errorWords(error) {
  const status = typeof error?.status === "number" ? error.status : null;
  if (status === null) return { key: "errorUnreachable", values: {} };
  if (status === 401) return { key: "errorToken", values: {} };
  if (status === 403) return { key: "errorForbidden", values: {} };
  if (status === 404) return { key: "errorMissing", values: {} };
  if (status === 409) return { key: "errorFinished", values: {} };
  if (status === 429 || status === 503) return { key: "errorBusy", values: {} };
  return { key: "errorStatus", values: { status } };
}

/// The tab counts, each counting what its tab lists: `summary` is GET /v1/tasks/summary
/// (every task: the Stalled and Failed tabs list children too) and `roots` the same with
/// `root=true` (the Running, Finished and All tabs list top-level tasks); null without them.
export function tabCounts(summary, roots = summary) {
  const valid = (value) => value && typeof value === "object";
  if (!valid(summary) || !valid(roots)) return null;
  const n = (counts, key) => (typeof counts[key] === "number" ? counts[key] : 0);
  const finished = (counts) => n(counts, "succeeded") + n(counts, "failed") + n(counts, "canceled");
  return {
    running: n(roots, "pending") + n(roots, "running"),
    stalled: n(summary, "stalled"),
    failed: n(summary, "failed"),
    finished: finished(roots),
    all: n(roots, "pending") + n(roots, "running") + finished(roots),
  };
}

/// Whether `task` matches the search `q`: a case-insensitive substring of its name or id
/// (the server's rule for `GET /v1/tasks?q=`, applied to tasks the stream brings).
export function matchesSearch(task, q) {
  if (!q) return true;
  const needle = q.toLowerCase();
  return task.id.toLowerCase().includes(needle) || (task.name ?? "").toLowerCase().includes(needle);
}
