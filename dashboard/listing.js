// Which tasks the list shows and in what order, worked out without the DOM: the query of a
// tab and page, what each tab holds, the rows after a listing or a task arriving from the
// stream, the pager's arithmetic and the count of the pressed tab. list.js keeps the state
// and draws; the unit tests (Tests/js) call these with the state and the time given.

import { isFinished, matchesSearch } from "./facts.js";
import { newestFirst } from "./model.js";

/// Rows per page (the listing's page_size).
export const PAGE_SIZE = 20;

/// How long a finished task stays, dimmed, in the Running tab.
export const LINGER_MS = 60_000;

/// Whether the tab lists top-level tasks only (their children show under them).
export function rootFilter(filter) { return filter === "running" || filter === "finished" || filter === "all"; }

/// The `GET /v1/tasks` query of a tab, a search and a page (`pageToken`, null for the first).
export function listQuery({ filter, search, pageToken }) {
  const query = new URLSearchParams({ page_size: String(PAGE_SIZE) });
  if (rootFilter(filter)) query.set("root", "true");
  const states = { running: ["pending", "running"], failed: ["failed"], finished: ["succeeded", "failed", "canceled"] }[filter];
  for (const s of states ?? []) query.append("state", s);
  if (filter === "stalled") query.set("stalled", "true");
  if (search) query.set("q", search);
  if (pageToken) query.set("page_token", pageToken);
  return query;
}

/// Which listing a tab, search and page name (rows are kept only across re-reads of one).
export function listKey({ filter, search, page, pageToken }) {
  return JSON.stringify([filter, search, page, pageToken ?? null]);
}

/// Whether a finished task still shows in the Running tab: for LINGER_MS after the page
/// first saw it finished (`seenAt`, on the `monotonic` clock), or, not seen finished, after
/// its finished_at (on the `wall` clock, so also after a reload).
export function lingers(task, seenAt, monotonic, wall) {
  if (!isFinished(task) || !task.finished_at) return false;
  const age = seenAt !== undefined ? monotonic - seenAt : wall - Date.parse(task.finished_at);
  return age < LINGER_MS;
}

/// Whether `task` belongs in the tab `filter` with the search `search` (a case-insensitive
/// substring of its name or id); `lingering(task)` says whether a finished task lingers.
export function matchesFilter(task, { filter, search }, lingering) {
  if (rootFilter(filter) && task.parent_id) return false;
  if (!matchesSearch(task, search)) return false;
  switch (filter) {
    case "running": return task.state === "pending" || task.state === "running" || lingering(task);
    case "stalled": return task.stalled && !isFinished(task);
    case "failed": return task.state === "failed";
    case "finished": return isFinished(task);
    default: return true;
  }
}

/// Whether a task has lived at least `minDuration` seconds at `wall` (the stream's rule,
/// applied to what a listing returns); a task the stream has sent (`streamed`) always has.
export function longEnough(task, { streamed, minDuration, wall }) {
  if (streamed) return true;
  const end = task.finished_at ? Date.parse(task.finished_at) : wall;
  return (end - Date.parse(task.created_at)) / 1000 >= minDuration;
}

/// The rows after a listing arrives.
/// - `listed`: the listing's tasks (their latest copies), in its order;
/// - `rows`: the ids shown now; `held`: ids already waiting above the list;
/// - `same`: the listing is a re-read of the one the rows came from (its rows that still
///   match stay: `keeps(id)`); `hold`: new tasks above the rows wait rather than push them;
/// - `shows(task)`: whether the page shows a task (min_duration); `get(id)`: a task by id.
/// Returns the rows, the ids newly held, and how many rows the listing did not give but
/// are finished (lingering in the Running tab).
export function mergeListing({ listed, rows, held, same, hold, shows, keeps, get }) {
  const top = rows.length ? get(rows[0]) : null;
  const ids = [];
  const newlyHeld = [];
  for (const task of listed) {
    if (ids.includes(task.id) || !shows(task) || held.has(task.id) || newlyHeld.includes(task.id)) continue;
    // New above the rows the reader is looking at: offered, not inserted.
    if (hold && top && !rows.includes(task.id) && newestFirst(task, top) < 0) { newlyHeld.push(task.id); continue; }
    ids.push(task.id);
  }
  // Rows shown that still match stay (the stream keeps them up to date; a listing of
  // hidden young tasks or new ones must not push them off).
  const kept = same ? rows.filter((id) => !ids.includes(id) && keeps(id)) : [];
  const shown = new Set(rows);
  const merged = [...ids, ...kept].sort((a, b) => newestFirst(get(a), get(b)));
  // Over a page: the oldest rows the listing did not give go (while holding, only rows
  // not shown go, so the reader's rows stay put).
  const limit = Math.max(PAGE_SIZE, ids.length);
  for (let index = merged.length - 1; index >= 0 && merged.length > limit; index -= 1) {
    if (hold ? !shown.has(merged[index]) : !ids.includes(merged[index])) merged.splice(index, 1);
  }
  const lingering = merged.filter((id) => !ids.includes(id) && isFinished(get(id))).length;
  return { rows: merged, held: newlyHeld, lingering };
}

/// Where a task that now belongs on page 1 goes: `held` (it is newer than the top row while
/// the reader is scrolled or busy in the list: `holding()`), or into `rows` at its place
/// when it is newer than the last row or the page has room (the oldest row then leaves a
/// full page). `listed`: a listing of this page has arrived.
export function placeArrival({ rows, task, listed, holding, get }) {
  const top = rows.length ? get(rows[0]) : null;
  const last = rows.length ? get(rows[rows.length - 1]) : null;
  if (listed && top && newestFirst(task, top) < 0 && holding()) return { held: true, rows };
  if (rows.length < PAGE_SIZE || newestFirst(task, last) < 0) {
    const placed = [...rows, task.id].sort((a, b) => newestFirst(a === task.id ? task : get(a), b === task.id ? task : get(b)));
    if (placed.length > PAGE_SIZE) placed.pop();
    return { held: false, rows: placed };
  }
  return { held: false, rows };
}

/// The pager: "Page N of M" (N never past M), whether Previous and Next work (not while a
/// page is being read: `listed` false), and whether the pager above the rows shows (not
/// for a single page, where it would say nothing the one below does not).
export function pagerView({ page, totalSize, listed, nextToken }) {
  const pages = Math.max(1, Math.ceil(totalSize / PAGE_SIZE));
  return {
    page: Math.min(page, pages), pages,
    previousDisabled: !listed || page <= 1,
    nextDisabled: !listed || !nextToken,
    topHidden: pages <= 1 && page <= 1,
  };
}

/// The count the pressed tab shows, so that it always agrees with the rows below it: while
/// the tab fits on one page, its rows (those lingering finished in the Running tab not
/// counted: `isLingering(id)`) and the new tasks waiting above them (`heldCount`); over
/// several pages, the listing's `total_size` (`listedTotal`); null before a listing arrives.
export function listCount({ listed, page, nextToken, rows, heldCount, listedTotal, isLingering }) {
  if (!listed) return null;
  if (page === 1 && !nextToken) return rows.filter((id) => !isLingering(id)).length + heldCount;
  return listedTotal;
}
