// The list view: the tab and search, the page of rows (read from GET /v1/tasks, kept live by
// the stream), new tasks held above a list the reader is busy in, and the pager. Owns the
// list's state; the rules (which tasks, what order, the pager's arithmetic, the pressed
// tab's count) are listing.js's.

import { APIError, request } from "./api.js";
import { isExpanded, reconcileChildren } from "./children.js";
import { asksNewRoots, readLanded, readMark } from "./connection.js";
import { $, setText } from "./dom.js";
import { isFinished } from "./facts.js";
import { scheduleRender } from "./frame.js";
import { formatInteger, t } from "./i18n.js";
import {
  PAGE_SIZE, listCount, listKey, listQuery, lingers, longEnough, matchesFilter, mergeListing, pagerView, placeArrival,
} from "./listing.js";
import { drawPager, focusFirstRow, initPager } from "./pager.js";
import { createRow } from "./rows.js";
import { drawTabs, fetchCounts, pressTab, takeCounts } from "./tabs.js";
import { errorText, isolate } from "./wording.js";

/// At most one listing per REFRESH_MS while changes come (the count, the page tokens and
/// the page's rows are the server's, read again rather than worked out here).
const REFRESH_MS = 2000;
/// At most this many more pages are read to fill a page whose rows are mostly hidden.
const FILL_PAGES = 3;

const state = {
  filter: "running",
  /// The search (`q`: a name or id containing it, across every page).
  search: "",
  /// The search the listing was asked for.
  listedSearch: "",
  /// Seconds a task must have lived to show in the Running tab (the stream's too).
  minDuration: 2,
  page: 1,
  pageTokens: [null],
  nextToken: null,
  /// The rows of every page (the pager's), lingering finished rows included.
  totalSize: 0,
  /// The listing's own total_size.
  listedTotal: 0,
  /// Whether a listing has arrived for the current filter and page.
  listed: false,
  rows: [],
  /// Which listing (filter, id search, page) the rows belong to: only a re-read of the
  /// same one keeps them or holds new tasks above them (null while another page loads).
  rowsKey: null,
  listSerial: 0,
  /// New tasks held above the list while the reader is scrolled down or busy in it
  /// (offered as "N new tasks" instead of pushing the rows down).
  held: new Set(),
  refreshTimer: null,
  refreshAt: 0,
  /// Reads the page again when the first task a listing hid (min_duration) comes of age.
  ofAgeTimer: null,
};
/// The list's rows by id, reused when the page's order changes.
const listRows = new Map();
let dirty = false;
let model = null;
let tokenRefused = () => {};
let prune = () => {};

/// `model`: the TaskModel; `onTokenRefused(error)`: the server refused the token;
/// `prune()`: keeps the model to what the page shows (after each listing); `minDuration`:
/// the setting the page starts with. Wires the tabs, search, pager and new-tasks button.
export function initList({ model: taskModel, onTokenRefused, prune: pruneModel, minDuration: seconds }) {
  model = taskModel;
  tokenRefused = onTokenRefused;
  prune = pruneModel;
  state.minDuration = seconds;
  state.rowsKey = currentKey();
  for (const button of document.querySelectorAll("[data-filter]")) {
    button.addEventListener("click", () => {
      state.filter = button.dataset.filter;
      pressTab(state.filter);
      restartList();
    });
  }
  let searchTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    state.search = $("search").value.trim();
    if (state.search !== state.listedSearch) searchTimer = setTimeout(restartList, 250);
  });
  $("new-tasks").addEventListener("click", showHeld);
  initPager({
    onPrevious() {
      if (state.page <= 1 || !state.listed) return;
      state.page -= 1;
      navigate();
    },
    onNext() {
      if (!state.nextToken || !state.listed) return;
      state.pageTokens[state.page] = state.nextToken;
      state.page += 1;
      navigate();
    },
  });
}

/// The list must be drawn again at the next frame.
export function markDirty() { dirty = true; }

function currentKey() {
  return listKey({ filter: state.filter, search: state.search, page: state.page, pageToken: state.pageTokens[state.page - 1] });
}

/// Whether a finished task still shows, dimmed, in the Running tab.
function lingering(task) {
  return lingers(task, model.finishedSeen.get(task.id), performance.now(), Date.now());
}

/// Whether `task` belongs in the current tab and search.
export function matches(task) { return matchesFilter(task, state, lingering); }

/// Whether the page shows `task`: min_duration is the live view's rule (don't flash short
/// tasks), so it applies to the Running tab only; the other tabs list history whole.
function displayable(task) {
  return state.filter !== "running"
    || longEnough(task, { streamed: model.streamed.has(task.id), minDuration: state.minDuration, wall: Date.now() });
}

/// Whether new tasks should wait above the list rather than push its rows down: the
/// reader has scrolled or is working in the list.
function holding() {
  return window.scrollY > 0 || $("tasks").contains(document.activeElement);
}

export function minDuration() { return state.minDuration; }

/// A new min_duration: what the stream sent under the old one is judged again by it.
export function setMinDuration(seconds) {
  state.minDuration = seconds;
  model.streamed.clear();
  state.rows = state.rows.filter((id) => model.get(id) && displayable(model.get(id)));
  dirty = true;
  scheduleRender();
}

/// Reads the current page again soon (at most once per REFRESH_MS).
export function scheduleRefresh() {
  if (state.refreshTimer) return;
  const wait = Math.max(150, state.refreshAt + REFRESH_MS - performance.now());
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refreshList(); }, wait);
}

/// Stops a refresh that is waiting (the page needs a token).
export function cancelRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = null;
  clearTimeout(state.ofAgeTimer);
  state.ofAgeTimer = null;
}

/// Reads the current page, and the tabs' counts beside it (drawn in the same frame as its
/// rows; `counts`: those just read, by the poll that found them changed). A re-read of the
/// listing the rows came from keeps the rows shown that still match, and (page 1, the
/// reader scrolled or busy in the list) holds new tasks above them; after navigating
/// (`fresh`, or another page or query) it shows the server's rows as they are. The stream
/// then follows the rows, resuming from before this read (connection.js readMark).
export async function refreshList({ fresh = false, counts: read = null } = {}) {
  cancelRefresh();
  state.refreshAt = performance.now();
  const serial = ++state.listSerial;
  const key = currentKey();
  const query = listQuery({ filter: state.filter, search: state.search, pageToken: state.pageTokens[state.page - 1] });
  const mark = readMark();
  const counts = read ? Promise.resolve(read) : fetchCounts();
  try {
    const tasks = [];
    let page = await request("GET", `/v1/tasks?${query}`);
    if (serial !== state.listSerial) return;
    const take = (listed) => {
      for (const task of listed.tasks) {
        if (model.wasDeleted(task.id)) continue;
        model.put(task, false);
        tasks.push(task);
      }
    };
    take(page);
    // A page mostly of tasks the page hides (younger than min_duration): read on to fill it.
    for (let more = 0; more < FILL_PAGES && page.next_page_token
      && tasks.filter((task) => displayable(model.get(task.id) ?? task)).length < PAGE_SIZE; more += 1) {
      query.set("page_token", page.next_page_token);
      page = await request("GET", `/v1/tasks?${query}`);
      if (serial !== state.listSerial) return;
      take(page);
    }
    const read = await counts;
    if (serial !== state.listSerial) return;
    takeCounts(read);
    $("list-error").hidden = true;
    // The rows belong to this listing (read before, or come from the stream since the
    // filter or search changed): kept. Holding needs rows the reader has seen listed.
    const same = !fresh && state.rowsKey === key;
    const top = state.rows.length ? model.get(state.rows[0]) : null;
    const hold = Boolean(same && state.listed && state.page === 1 && top && holding());
    const merged = mergeListing({
      listed: tasks.map((listed) => model.get(listed.id) ?? listed), rows: state.rows, held: state.held, same, hold,
      // The newest copy decides: a listing read before a change the stream brought (a
      // recovery under Stalled) does not bring a task back where it no longer belongs.
      shows: (task) => displayable(task) && matches(task), get: (id) => model.get(id),
      keeps: (id) => Boolean(model.get(id) && !model.wasDeleted(id) && matches(model.get(id)) && displayable(model.get(id))),
    });
    for (const id of merged.held) state.held.add(id);
    state.rows = merged.rows;
    state.rowsKey = key;
    readLanded(mark);
    state.nextToken = page.next_page_token;
    state.listedTotal = page.total_size;
    state.totalSize = page.total_size + (state.filter === "running" ? merged.lingering : 0);
    state.listed = true;
    dirty = true;
    readWhenOfAge(tasks);
    // Not hearing of new tasks (a flood of them), the page reads those finished lately
    // too: they linger in the Running tab, and no listing of it holds them.
    if (!asksNewRoots()) readLingering();
    prune();
    scheduleRender();
  } catch (error) {
    if (serial !== state.listSerial) return;
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    takeCounts(await counts);
    $("list-error").textContent = t("loadFailed", { detail: errorText(error) });
    $("list-error").hidden = false;
    // A navigation that failed: the pager works again (the rows are those shown before).
    if (!state.listed && state.rows.length) state.listed = true;
    dirty = true;
    scheduleRender();
  }
}

/// Reads the top-level tasks finished lately (the first page of them, newest first) and
/// shows, on the first page of the Running tab, those still lingering there: a fresh
/// stream's snapshot names only the tasks the page follows, so after a reload it no longer
/// brings those finished in the last minute.
export async function readLingering() {
  if (state.filter !== "running" || state.page !== 1) return;
  const query = listQuery({ filter: "finished", search: state.search, pageToken: null });
  const mark = readMark();
  try {
    const page = await request("GET", `/v1/tasks?${query}`);
    for (const task of page.tasks) {
      if (model.wasDeleted(task.id) || !lingers(task, undefined, performance.now(), Date.now())) continue;
      model.put(task, false);
      arrived(model.get(task.id));
    }
    readLanded(mark);
    scheduleRender();
  } catch (error) {
    if (error instanceof APIError && error.status === 401) tokenRefused(error);
    // Else the lingering rows are missed; the listing says the rest.
  }
}

/// Reads the page again once the first of the `listed` tasks the page hid for being too
/// young is old enough to show: the stream does not follow a task the page does not show,
/// so it would not bring it (a new one's creation excepted).
function readWhenOfAge(listed) {
  clearTimeout(state.ofAgeTimer);
  state.ofAgeTimer = null;
  // A task that finished too soon never shows: nothing to wait for.
  const due = listed.map((task) => model.get(task.id) ?? task).filter((task) => !isFinished(task) && !displayable(task))
    .map((task) => Date.parse(task.created_at) + state.minDuration * 1000);
  if (due.length === 0) return;
  const wait = Math.max(100, Math.min(...due) - Date.now() + 50);
  state.ofAgeTimer = setTimeout(() => { state.ofAgeTimer = null; scheduleRefresh(); }, wait);
}

/// Reads another page: the pager waits (its buttons disabled) until it has arrived; then
/// the page is shown from its top, the focus on its first task.
function navigate() {
  state.listed = false;
  state.rowsKey = null;
  state.held.clear();
  dirty = true;
  scheduleRender();
  const serial = state.listSerial + 1;
  refreshList({ fresh: true }).then(() => {
    if (state.listSerial === serial) focusFirstRow();
  });
}

/// Starts the listing over at page 1 (a new filter or search). The rows shown that belong
/// to the new tab and search stay, the same elements, until the listing places them: a row
/// is never drawn again for a task it already shows (a reader's focus, or a test's
/// reference, stays on it), and the new tab does not blink empty first.
function restartList() {
  state.listedSearch = state.search;
  state.page = 1;
  state.pageTokens = [null];
  state.nextToken = null;
  state.listed = false;
  state.held.clear();
  state.rows = state.rows.filter((id) => {
    const task = model.get(id);
    return task && !model.wasDeleted(id) && matches(task) && displayable(task);
  });
  // Rows the stream adds from now on are this listing's.
  state.rowsKey = currentKey();
  dirty = true;
  scheduleRender();
  refreshList();
}

/// Shows the new tasks held above the list, from the top.
function showHeld() {
  state.held.clear();
  window.scrollTo(0, 0);
  refreshList({ fresh: true }).then(() => requestAnimationFrame(() => $("tasks").querySelector(".name")?.focus()));
}

/// Draws the list when it is dirty; returns whether it did.
export function drawList() {
  if (!dirty) return false;
  dirty = false;
  reconcileList();
  return true;
}

function reconcileList() {
  const list = $("tasks");
  const wanted = state.rows.map((id) => model.get(id)).filter(Boolean);
  const keep = new Set(wanted.map((task) => task.id));
  for (const [id, row] of listRows) if (!keep.has(id)) { row.remove(); listRows.delete(id); }
  let cursor = list.firstElementChild;
  for (const task of wanted) {
    let row = listRows.get(task.id);
    if (!row) { row = createRow(task); listRows.set(task.id, row); }
    if (row !== cursor) list.insertBefore(row, cursor); else cursor = cursor.nextElementSibling;
    if (isExpanded(task.id)) reconcileChildren(task.id);
  }
  $("empty").hidden = wanted.length > 0 || !state.listed;
  // A search without a match is not "no tasks".
  setText($("empty"), state.search ? t("noSearchMatch", { q: isolate(state.search) }) : t("empty"));
  const held = state.held.size;
  $("new-tasks").hidden = held === 0;
  setText($("new-tasks"), t(held === 1 ? "newTask" : "newTasks", { count: formatInteger(held) }));
  drawPager(pagerView(state));
}

/// Draws the tabs' counts, the pressed one from the rows as they are now: run every frame,
/// since a row that finishes (lingering in Running) changes it without a new listing.
export function drawCounts() {
  drawTabs(state.filter, listCount({
    listed: state.listed, page: state.page, nextToken: state.nextToken, rows: state.rows, heldCount: state.held.size,
    listedTotal: state.listedTotal, isLingering: (id) => state.filter === "running" && isFinished(model.get(id)),
  }));
}

/// Whether `id` is a row of the page.
export function isShown(id) { return state.rows.includes(id); }

/// Whether `id` waits above the list.
export function isHeld(id) { return state.held.has(id); }

/// `id` no longer waits above the list.
export function unhold(id) {
  if (state.held.delete(id)) dirty = true;
}

/// A task that now matches the filter and is not on the page: on page 1 it joins at its
/// place (or, above the rows while the reader is scrolled or busy, waits as "N new
/// tasks"); the listing is read again to get the count and the page right.
export function arrived(task) {
  if (state.rows.includes(task.id) || state.held.has(task.id) || !matches(task) || !displayable(task)) return;
  if (state.page !== 1) { scheduleRefresh(); return; }
  const placed = placeArrival({ rows: state.rows, task, listed: state.listed, holding, get: (id) => model.get(id) });
  if (placed.held) state.held.add(task.id); else state.rows = placed.rows;
  dirty = true;
  scheduleRefresh();
}

/// A task that left the page (deleted, lingered out, no longer matching): the page is
/// filled up again from the server.
export function leave(id) {
  const index = state.rows.indexOf(id);
  if (index < 0) return;
  state.rows.splice(index, 1);
  dirty = true;
  scheduleRefresh();
}

/// Once a second: finished rows that have lingered their minute leave the Running tab.
export function tick() {
  if (state.filter !== "running") return;
  for (const id of [...state.rows]) {
    const task = model.get(id);
    if (task && isFinished(task) && !lingering(task)) leave(id);
  }
}

/// Whether a new top-level task would join the page at once: the first page of the
/// Running or All tab (new tasks are neither stalled, failed nor finished; on a later
/// page the counts tell of them).
export function joinsNewTasks() {
  return state.page === 1 && (state.filter === "running" || state.filter === "all");
}

/// The ids the list shows (the model keeps them).
export function rowIDs() { return state.rows; }

/// Bounds the held ids (a flood of new tasks while the reader is scrolled down).
export function trimHeld() {
  if (state.held.size > 10_000) state.held = new Set([...state.held].slice(-10_000));
}

/// The list's row of `id`, if any (the focus goes back to it from the detail view).
export function listRowOf(id) { return listRows.get(id); }

