// What the page's event stream asks for, worked out without the DOM: the tasks it shows
// (the rows, the detail task), the children of its open parents and, on a first page of a
// tab new tasks join, the creation of every new top-level task, as a query of
// GET /v1/events; where a new stream resumes when that set changes, so nothing changed
// between the two streams is lost; and which events to apply, so that one delivered by
// both, or by a catch-up after a live copy, is applied once and never older after newer.
// connection.js opens and closes the streams; the unit tests (Tests/js) call these.

/// Query parameters a stream may carry: the server takes 100 (`--max-query-params`), and
/// `min_duration`, `last_event_id` and `access_token` take three.
export const STREAM_PARAMETERS = 90;
/// Characters of a stream's query: the server refuses a target over 8 KiB (414).
export const STREAM_QUERY_CHARACTERS = 7000;
/// An id no task may take (the API refuses `.` for a new task): a page with nothing to
/// show names it, so its stream stays open, live and empty, instead of naming nothing —
/// which would be every task.
export const NO_TASK = ".";

/// The change number an event id names: `123` → 123; `123-456`, the last frame of a
/// `min_duration` release, → 123; null for no id.
export function changeOf(id) {
  const match = /^(\d+)(?:-\d+)?$/.exec(id ?? "");
  return match ? Number(match[1]) : null;
}

/// What the page follows: the tasks it shows (`rows`, the `detail` task, `others` such as
/// tasks being canceled), the children of the open parents (`expanded`) and of the detail
/// task, and `newRoots` (new top-level tasks, for a first page they would join); each list
/// sorted and without repeats, so equal sets have equal keys.
export function streamSelection({ rows = [], detail = null, expanded = [], others = [], newRoots = false }) {
  const tasks = new Set([...rows, ...others]);
  const parents = new Set(expanded);
  if (detail) { tasks.add(detail); parents.add(detail); }
  return { tasks: [...tasks].sort(), parents: [...parents].sort(), newRoots };
}

/// Whether `selection` (null: the whole stream) follows every change of `task`: it names
/// the task or its parent. A task it does not follow comes only by its creation
/// (`newRoots`), and the changes after that are heard only once a stream names it.
export function follows(selection, task) {
  return selection === null || selection.tasks.includes(task.id)
    || (Boolean(task.parent_id) && selection.parents.includes(task.parent_id));
}

/// A selection's identity (null, the whole stream, is "*").
export function selectionKey(selection) {
  return selection === null ? "*" : JSON.stringify([selection.tasks, selection.parents, selection.newRoots]);
}

/// The query of a stream of `selection` (null: every task) with `minDuration`, resuming
/// after `resumeFrom` (a change number, or nothing for a fresh snapshot), with `token` if
/// any. A selection that would pass the server's limits (several pages filled, hundreds of
/// open children) falls back to the whole stream, which the page handles as well, at the
/// cost of every task's events: `whole` says so.
export function streamQuery({ selection, minDuration, resumeFrom = null, token = "" }) {
  const query = new URLSearchParams({ min_duration: String(minDuration) });
  if (resumeFrom !== null && resumeFrom !== undefined && resumeFrom !== "") query.set("last_event_id", String(resumeFrom));
  if (token) query.set("access_token", token);
  if (selection === null) return { query, whole: true };
  const named = new URLSearchParams(query);
  const tasks = selection.tasks.length || selection.parents.length ? selection.tasks : [NO_TASK];
  for (const id of tasks) named.append("task", id);
  for (const id of selection.parents) named.append("parent_id", id);
  if (selection.newRoots) named.set("new_roots", "true");
  const parameters = [...named.keys()].length;
  if (parameters > STREAM_PARAMETERS || named.toString().length > STREAM_QUERY_CHARACTERS) return { query, whole: true };
  return { query: named, whole: false };
}

/// Which events the page applies: per task, only an event whose change number is above
/// the last one applied for that task. Two streams overlap while the page switches (the
/// new one's catch-up repeats what the old one sent), and each alone is increasing; so an
/// event delivered twice is applied once, and a task never goes back to an older state.
/// A frame without an id of its own (a `min_duration` release) carries the stream's last
/// id, which is never above the task's own change: it is applied unless a later change of
/// the task already was.
export class EventLedger {
  constructor() {
    /// The change number last applied, by task id.
    this.applied = new Map();
  }

  /// Whether the event about `taskID` numbered `change` (changeOf) is to be applied; if
  /// so, it is recorded as applied. An event without a number is applied.
  take(taskID, change) {
    if (change === null) return true;
    const last = this.applied.get(taskID);
    if (last !== undefined && change <= last) return false;
    this.applied.set(taskID, change);
    return true;
  }

  /// Forgets the tasks `keep(id)` does not want (the page no longer holds them).
  prune(keep) {
    for (const id of this.applied.keys()) if (!keep(id)) this.applied.delete(id);
  }
}

/// Where the next stream resumes. Its position is the last event id the current stream
/// delivered (or the one it resumed from). A read of the API (a listing, children, a task)
/// shows tasks as of some moment after it was sent; the tasks it brings that the current
/// stream does not follow may have changed since then, unheard: so each read records the
/// position when it was sent (`mark`), and once its tasks are on the page (`landed`), the
/// next stream resumes no later than that mark (fresh, a snapshot, when the read was sent
/// before the stream had a position). What the new stream repeats, the EventLedger drops.
export class ResumePoint {
  constructor() {
    /// The last event id (`123`, or `123-456` ending a release), or null.
    this.position = null;
    /// The lowest mark of the reads landed since the last switch (null: none).
    this.floor = null;
    /// Whether a read sent before the stream had a position has landed since.
    this.fresh = false;
  }

  /// A new stream starts from event id `id` (null for a fresh one): the reads landed so
  /// far are covered by it.
  started(id) {
    this.position = id || null;
    this.floor = null;
    this.fresh = false;
  }

  /// The current stream delivered event id `id` (a frame without an id of its own
  /// repeats the last one).
  delivered(id) {
    const change = changeOf(id);
    if (change !== null && (this.position === null || change >= changeOf(this.position))) this.position = id;
  }

  /// The mark of a read about to be sent: the change number the page is at, or null.
  mark() { return changeOf(this.position); }

  /// A read sent at `mark` has put its tasks on the page.
  landed(mark) {
    if (mark === null || mark === undefined) this.fresh = true;
    else if (this.floor === null || mark < this.floor) this.floor = mark;
  }

  /// The id a stream opened now resumes from (null: none, a fresh snapshot).
  resumeFrom() {
    if (this.position === null || this.fresh) return null;
    return this.floor !== null && this.floor < changeOf(this.position) ? String(this.floor) : this.position;
  }
}

/// The counts by state (the tabs) are read again every COUNTS_POLL_MS while they change;
/// unchanged, the wait grows by half up to COUNTS_QUIET_MS; in a hidden tab it is
/// COUNTS_HIDDEN_MS; after a failed read it doubles up to COUNTS_HIDDEN_MS. A change of
/// the counts is how the page hears of tasks it does not follow (a new one for page 1, one
/// finished on another page): it reads its page again.
export const COUNTS_POLL_MS = 2000;
export const COUNTS_QUIET_MS = 3000;
export const COUNTS_HIDDEN_MS = 30_000;

/// Milliseconds until the next read of the counts, after one that waited `previous` and
/// found them `changed` (or `failed`), the page `hidden` or not.
export function nextCountsRead({ previous, changed, failed = false, hidden = false }) {
  if (hidden) return COUNTS_HIDDEN_MS;
  if (failed) return Math.min(COUNTS_HIDDEN_MS, Math.max(COUNTS_POLL_MS, previous * 2));
  if (changed) return COUNTS_POLL_MS;
  return Math.min(COUNTS_QUIET_MS, Math.max(COUNTS_POLL_MS, Math.round(previous * 1.5)));
}

/// New top-level tasks a page hears of by their creation (`newRoots`), at most this many a
/// second over NEW_ROOTS_WINDOW_MS; past that the page stops asking for them for
/// NEW_ROOTS_PAUSE_MS and the counts tell it of new tasks instead (a re-read of its page
/// every 2 s): every creation goes to every page that asks, so at 10,000 pages a flood of
/// new tasks would cost more than all the rows they show.
export const NEW_ROOTS_PER_SECOND = 5;
export const NEW_ROOTS_WINDOW_MS = 10_000;
export const NEW_ROOTS_PAUSE_MS = 60_000;

/// Whether the page asks for new top-level tasks' creations, from how many came lately.
/// Times are the page's monotonic clock (performance.now), given.
export class NewRootsGate {
  constructor() {
    /// When each creation of the window came.
    this.arrivals = [];
    /// Until when the page does not ask (null: it asks).
    this.pausedUntil = null;
  }

  /// A creation of a task the stream does not follow came at `now`.
  note(now) {
    this.arrivals.push(now);
    while (this.arrivals.length && this.arrivals[0] <= now - NEW_ROOTS_WINDOW_MS) this.arrivals.shift();
    if (this.arrivals.length > NEW_ROOTS_PER_SECOND * NEW_ROOTS_WINDOW_MS / 1000) {
      this.pausedUntil = now + NEW_ROOTS_PAUSE_MS;
      this.arrivals = [];
    }
  }

  /// Whether the page asks for them at `now`.
  open(now) {
    if (this.pausedUntil !== null && now >= this.pausedUntil) this.pausedUntil = null;
    return this.pausedUntil === null;
  }
}
