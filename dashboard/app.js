// The dashboard: a page of tasks kept live by the event stream. Events change the model
// only; the DOM is brought up to date at most once per animation frame, and only the rows
// on the page whose task changed are touched.

import { APIError, eventsURL, looksLikeToken, request, storeToken, storedToken } from "./api.js";
import { clampPoints, drawHistory, MAX_POINTS, MIN_POINTS } from "./chart.js";
import {
  badgeOf, childFacts, elapsedSeconds, errorWords, lastSignalAge, matchesSearch, noSignalSeconds, percentOf,
  secondsLeft as secondsLeftAt, showsRate, stallFact, tabCounts, terminateOffered,
} from "./facts.js";
import {
  currentLanguage, formatClock, formatDateTime, formatDuration, formatInteger, formatNumber, formatPercent,
  formatPercentText, formatWhen, initialLanguage, setLanguage, t, tn,
} from "./i18n.js";
import { hasChildren, newestFirst, TaskModel } from "./model.js";

const PAGE_SIZE = 20;
const LINGER_MS = 60_000;
const OFFLINE_AFTER_MS = 10_000;
const FINISHED = new Set(["succeeded", "failed", "canceled"]);
const TASK_EVENTS = ["task.created", "task.updated", "task.stalled", "task.recovered", "task.cancel_requested",
  "task.finished"];

const $ = (id) => document.getElementById(id);
const model = new TaskModel();
const state = {
  filter: "running",
  /// The search (`q`: a name or id containing it, across every page).
  search: "",
  /// The search the listing was asked for.
  listedSearch: "",
  /// The tab counts (facts.js tabCounts of GET /v1/tasks/summary), null until read.
  counts: null,
  summaryTimer: null,
  summaryAt: 0,
  minDuration: 2,
  page: 1,
  pageTokens: [null],
  nextToken: null,
  totalSize: 0,
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
  /// The task whose row gets the focus back when the detail view closes.
  returnFocusID: null,
  expanded: new Set(),
  canCancel: true,
  canceling: new Set(),
  /// What each open confirmation asks: "cancel" or "terminate", by task id.
  confirming: new Map(),
  /// When (performance.now) this page asked to cancel each task, or first saw it asked:
  /// Terminate is offered once the cancel has gone unanswered for 10 s.
  cancelAskedAt: new Map(),
  /// A failed action's words, shown in the task's rows, by task id.
  actionErrors: new Map(),
  detailID: null,
  detailPoints: 200,
  outputAt: 0,
  outputTimer: null,
  /// The zoom: points asked for relative to one per 3 pixels of the chart.
  zoom: 1,
  historyAt: 0,
  historyTimer: null,
  lastEventID: "",
  connection: "connecting",
  lostAt: null,
  source: null,
  retryTimer: null,
};
/// Row elements drawn for each task id (its list row, a child row, the detail row).
const rendered = new Map();
/// The list's rows by id, reused when the page's order changes.
const listRows = new Map();
const childrenDirty = new Set();
let listDirty = false;
let frameRequested = false;
/// Counters for measurements (bench/dashboard.py reads them): events applied, frames drawn,
/// rows updated.
const stats = {
  events: 0, frames: 0, rowUpdates: 0,
  get modelTasks() { return model.tasks.size; },
  get modelFinished() { return model.finishedSeen.size; },
  get renderedIDs() { return rendered.size; },
  get renderedRows() { let n = 0; for (const views of rendered.values()) n += views.size; return n; },
  get domRows() { return document.querySelectorAll("li.task").length; },
};
window.headwayStats = stats;

// MARK: - Drawing, once per frame

function scheduleRender() {
  if (frameRequested) return;
  frameRequested = true;
  requestAnimationFrame(render);
}

function render() {
  frameRequested = false;
  stats.frames += 1;
  for (const id of model.takeDirty()) {
    const task = model.get(id);
    const views = rendered.get(id);
    if (!views) continue;
    for (const row of [...views]) {
      if (!row.isConnected) { views.delete(row); continue; }
      if (task) { updateRow(row, task); stats.rowUpdates += 1; }
    }
    if (views.size === 0) rendered.delete(id);
    if (id === state.detailID && task) renderDetailFields(task);
  }
  const reconciling = listDirty || childrenDirty.size > 0;
  if (listDirty) { listDirty = false; reconcileList(); }
  for (const parentID of childrenDirty) {
    if (state.expanded.has(parentID) || parentID === state.detailID) reconcileChildren(parentID);
  }
  childrenDirty.clear();
  // Rows the reconciliation took out of the document are forgotten now, not at the next
  // event or page: a list left alone keeps no row it no longer shows.
  if (reconciling) forgetDetachedRows();
}

/// Forgets the rendered rows no longer in the document.
function forgetDetachedRows() {
  for (const [id, views] of rendered) {
    for (const row of views) if (!row.isConnected) views.delete(row);
    if (views.size === 0) rendered.delete(id);
  }
}

function register(row, id) {
  if (!rendered.has(id)) rendered.set(id, new Set());
  rendered.get(id).add(row);
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/// A new row for `task` (drawn at once).
function createRow(task) {
  const row = element("li", "task");
  row.dataset.taskId = task.id;
  const line = element("div", "row");
  const expander = element("button", "expander");
  expander.type = "button";
  expander.setAttribute("aria-expanded", "false");
  expander.addEventListener("click", () => toggleExpanded(task.id));
  const info = element("div", "info");
  const head = element("div", "head");
  const name = element("a", "name");
  name.href = `#task=${encodeURIComponent(task.id)}`;
  const badge = element("span", "badge");
  head.append(name, badge);
  const id = element("div", "tid");
  const label = element("div", "label");
  // Why, on the row: a parent's child counts, a finished task's message.
  const kids = element("div", "kids");
  const message = element("div", "message");
  info.append(head, id, label, kids, message);
  const meter = element("div", "meter");
  const bar = element("div", "bar");
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.append(element("div", "fill"));
  const activity = element("div", "activity");
  activity.setAttribute("role", "progressbar");
  activity.append(element("div", "sweep"));
  const facts = element("div", "facts");
  for (const name of ["percent", "count", "rate", "eta", "stall", "when", "signal"]) facts.append(element("span", name));
  meter.append(bar, activity, facts);
  const actions = element("div", "actions");
  const cancel = element("button", "cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => askToConfirm(task.id, "cancel"));
  const terminate = element("button", "terminate");
  terminate.type = "button";
  terminate.hidden = true;
  terminate.addEventListener("click", () => askToConfirm(task.id, "terminate"));
  const confirm = element("span", "confirm");
  confirm.setAttribute("role", "group");
  const question = element("span", "question");
  const yes = element("button", "yes");
  yes.type = "button";
  yes.addEventListener("click", () => {
    if (state.confirming.get(task.id) === "terminate") terminateTask(task.id); else cancelTask(task.id);
  });
  const no = element("button", "no");
  no.type = "button";
  confirm.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.preventDefault();
    event.stopPropagation();
    no.click();
  });
  no.addEventListener("click", () => {
    const kind = state.confirming.get(task.id);
    state.confirming.delete(task.id);
    model.dirty.add(task.id);
    scheduleRender();
    requestAnimationFrame(() => row.querySelector(kind === "terminate" ? ".terminate" : ".cancel")?.focus());
  });
  confirm.append(question, yes, no);
  // A failed action says so here, visibly and in the page's language.
  const failure = element("p", "action-error");
  failure.setAttribute("role", "alert");
  failure.hidden = true;
  actions.append(cancel, terminate, confirm, failure);
  line.append(expander, info, meter, actions);
  const children = element("ul", "children tasks");
  children.hidden = true;
  row.append(line, children);
  register(row, task.id);
  updateRow(row, task);
  return row;
}

/// Opens the confirmation of `kind` ("cancel" or "terminate") on the task's rows.
function askToConfirm(id, kind) {
  state.confirming.set(id, kind);
  state.actionErrors.delete(id);
  model.dirty.add(id);
  scheduleRender();
}

/// The task's name, or its id when the name would show nothing (empty, or only spaces and
/// invisible characters).
function displayName(task) {
  const name = plain(task.name);
  return name.replace(/[\s\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180E\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFEFF\uFFA0]/g, "")
    ? name : task.id;
}

/// The bidirectional controls (embeddings, overrides, isolates, marks), stripped from the
/// text tasks bring before it is shown, as the CLI does: a name cannot turn itself around.
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;

/// `text` (a task's name, label, unit, message) without bidi controls.
function plain(text) { return (text ?? "").replace(BIDI_CONTROLS, ""); }

/// A task's unit after a number (" files"), or nothing.
function unitText(task) { return task.unit ? ` ${plain(task.unit)}` : ""; }

/// `text` isolated from the text around it (a name with bidi controls stays in its box).
function isolate(text) { return `\u2068${text}\u2069`; }

/// Sets `node` to the string `key` with its {name} in a <bdi> of its own.
function setNamed(node, key, name) {
  const [before, after = ""] = t(key, { name: "\u0000" }).split("\u0000");
  const bdi = node.querySelector("bdi");
  if (bdi && node.firstChild?.nodeValue === before && node.lastChild?.nodeValue === after && bdi.textContent === name) return;
  const inner = document.createElement("bdi");
  inner.textContent = name;
  node.replaceChildren(before, inner, after);
}

function setText(node, text) { if (node.textContent !== text) node.textContent = text; }
function setAttr(node, name, value) {
  if (value === null) { if (node.hasAttribute(name)) node.removeAttribute(name); }
  else if (node.getAttribute(name) !== value) node.setAttribute(name, value);
}

/// Whether the event stream is away (closed and not yet back): the page's figures are as
/// of then, its indicators stand still and its actions wait.
function offline() { return state.connection === "reconnecting" || state.connection === "offline"; }

/// The stall line of `task` ("No signal for 38 sec"), or "".
function stallText(task) {
  const stall = stallFact(task, Date.now());
  return stall ? t(stall.key, { age: formatDuration(stall.seconds, "short") }) : "";
}

/// Seconds left at the task's rate, counted down from its last report (null when unknown).
function secondsLeft(task) { return secondsLeftAt(task, Date.now()); }

/// A parent's child counts as one line ("1 of 3 failed · 1 stalled"), or "".
function childrenText(task) {
  return childFacts(task)
    .map((part) => t(part.key, { count: formatInteger(part.count), total: formatInteger(part.total) })).join(" · ");
}

/// The row's time line: how long it has run (and waited), or when it ended and how long it ran.
function whenText(task) {
  const duration = formatDuration(elapsedSeconds(task, Date.now()), "short");
  if (FINISHED.has(task.state)) {
    return task.finished_at ? t("endedAt", { time: formatWhen(new Date(task.finished_at)), duration }) : "";
  }
  return t(task.state === "pending" ? "pendingFor" : "runningFor", { duration });
}

/// The words of a failed request, in the page's language.
function errorText(error) {
  const words = errorWords(error);
  return t(words.key, words.values);
}

/// Brings `row` up to `task`, touching only what differs.
function updateRow(row, task) {
  const now = Date.now();
  const finished = FINISHED.has(task.state);
  const away = offline();
  row.classList.toggle("finished", finished);
  row.classList.toggle("stalled", task.stalled && !finished);
  row.dataset.state = task.state;
  setAttr(row, "data-attention", !finished && task.attention ? task.attention : null);
  const name = row.querySelector(".name");
  setText(name, displayName(task));
  setText(row.querySelector(".tid"), task.id);
  setText(row.querySelector(".label"), plain(task.label));
  const badge = row.querySelector(".badge");
  const badgeKind = badgeOf(task);
  setText(badge, badgeKind === "stalled" ? t("stalled") : badgeKind.startsWith("attention_") ? t(`badge_${badgeKind}`)
    : t(`state_${task.state}`));
  badge.dataset.state = badgeKind;
  setText(row.querySelector(".kids"), childrenText(task));
  setText(row.querySelector(".message"), finished ? plain(task.message) : "");

  const expander = row.querySelector(".expander");
  // The detail page's own row lists its children below it: no expander there.
  const inDetail = row.closest("#detail-row") !== null;
  const parent = hasChildren(model, task) && !inDetail;
  expander.classList.toggle("absent", !parent);
  expander.disabled = !parent;
  setAttr(expander, "aria-hidden", parent ? null : "true");
  const open = state.expanded.has(task.id) && parent;
  setAttr(expander, "aria-expanded", parent ? (open ? "true" : "false") : null);
  setAttr(expander, "aria-label", parent ? t(open ? "collapse" : "expand", { name: displayName(task) }) : null);
  setText(expander, parent ? (open ? "▾" : "▸") : "");
  row.querySelector(".children").hidden = !open;

  const quantified = task.mode === "quantified";
  const bar = row.querySelector(".bar");
  const activity = row.querySelector(".activity");
  bar.hidden = !quantified;
  // A finished indeterminate task has no track (an empty one reads as 0%): its outcome shows.
  activity.hidden = quantified || finished;
  const left = away ? null : secondsLeft(task);
  const percentText = row.querySelector(".percent");
  if (quantified) {
    const fraction = Math.min(1, Math.max(0, task.fraction ?? 0));
    bar.querySelector(".fill").style.transform = `scaleX(${fraction})`;
    setAttr(bar, "aria-valuenow", String(percentOf(fraction)));
    setAttr(bar, "aria-valuetext", left !== null
      ? t("valueTextEta", { percent: formatPercent(fraction), duration: formatDuration(left) })
      : t("valueText", { percent: formatPercent(fraction) }));
    setAttr(bar, "aria-label", displayName(task));
    setText(percentText, formatPercentText(fraction));
    const count = task.total !== null && task.total !== undefined
      ? t("ofTotal", { completed: formatInteger(task.completed), total: formatInteger(task.total) }) + unitText(task)
      : "";
    setText(row.querySelector(".count"), count);
  } else {
    setText(percentText, finished ? t(`state_${task.state}`) : "");
    setText(row.querySelector(".count"), task.completed > 0 ? formatInteger(task.completed) + unitText(task) : "");
    setAttr(activity, "aria-label", displayName(task));
    setAttr(activity, "aria-valuetext", task.stalled ? stallText(task) : t("working"));
  }
  setText(row.querySelector(".rate"), showsRate(task) ? t("rate", { rate: formatNumber(task.rate) + unitText(task) }) : "");
  activity.classList.toggle("stopped", task.stalled || finished);
  bar.classList.toggle("stopped", task.stalled && !finished);
  setText(row.querySelector(".eta"), left !== null ? t("etaLeft", { duration: formatDuration(left) }) : "");
  setText(row.querySelector(".stall"), stallText(task));
  setText(row.querySelector(".when"), whenText(task));
  const signal = lastSignalAge(task, now);
  setText(row.querySelector(".signal"), signal !== null ? t("lastSignal", { age: formatDuration(signal, "short") }) : "");

  const cancel = row.querySelector(".cancel");
  const terminate = row.querySelector(".terminate");
  const confirm = row.querySelector(".confirm");
  if (finished) {
    state.canceling.delete(task.id);
    state.confirming.delete(task.id);
    state.cancelAskedAt.delete(task.id);
  } else if (task.cancel_requested && !state.cancelAskedAt.has(task.id)) {
    state.cancelAskedAt.set(task.id, performance.now());
  }
  const cancellable = state.canCancel && !finished;
  const canceling = !finished && (state.canceling.has(task.id) || task.cancel_requested);
  const asking = cancellable ? state.confirming.get(task.id) : undefined;
  const confirming = asking === "terminate" || (asking === "cancel" && !canceling);
  const offerTerminate = cancellable && terminateOffered(task, state.cancelAskedAt.get(task.id), performance.now());
  cancel.hidden = !cancellable || confirming;
  // Offline, nothing can be sent: the buttons wait, and say why.
  cancel.disabled = canceling || away;
  setAttr(cancel, "title", away ? t("unavailableOffline") : null);
  setAttr(cancel, "aria-describedby", away ? "offline-note" : null);
  setText(cancel, canceling ? t("canceling") : t("cancel"));
  setAttr(cancel, "aria-label", t(canceling ? "cancelingNamed" : "cancelNamed", { name: displayName(task) }));
  terminate.hidden = !offerTerminate || confirming;
  terminate.disabled = away;
  setAttr(terminate, "title", away ? t("unavailableOffline") : null);
  setAttr(terminate, "aria-describedby", away ? "offline-note" : null);
  setText(terminate, t("terminate"));
  setAttr(terminate, "aria-label", t("terminateNamed", { name: displayName(task) }));
  const wasHidden = confirm.hidden;
  confirm.hidden = !confirming;
  setNamed(confirm.querySelector(".question"), asking === "terminate" ? "terminateConfirm" : "cancelConfirm", displayName(task));
  const yes = confirm.querySelector(".yes");
  setText(yes, t(asking === "terminate" ? "terminateYes" : "cancelYes"));
  yes.disabled = away;
  setText(confirm.querySelector(".no"), t("cancelNo"));
  const failure = row.querySelector(".action-error");
  const failed = state.actionErrors.get(task.id) ?? "";
  failure.hidden = failed === "";
  setText(failure, failed);
  // "Keep running" takes the focus: Enter, Enter must not cancel by accident.
  if (confirming && wasHidden) requestAnimationFrame(() => confirm.querySelector(".no").focus());
}

// MARK: - The list and its pages

/// At most one listing per REFRESH_MS while changes come (the count, the page tokens and
/// the page's rows are the server's, read again rather than worked out here).
const REFRESH_MS = 2000;
/// Events that can change which tasks a listing holds.
const MEMBERSHIP = new Set(["task.created", "task.finished", "task.stalled", "task.recovered", "task.deleted"]);

function rootFilter() { return state.filter === "running" || state.filter === "finished" || state.filter === "all"; }

function listQuery() {
  const query = new URLSearchParams({ page_size: String(PAGE_SIZE) });
  if (rootFilter()) query.set("root", "true");
  const states = { running: ["pending", "running"], failed: ["failed"], finished: ["succeeded", "failed", "canceled"] }[state.filter];
  for (const s of states ?? []) query.append("state", s);
  if (state.filter === "stalled") query.set("stalled", "true");
  if (state.search) query.set("q", state.search);
  const token = state.pageTokens[state.page - 1];
  if (token) query.set("page_token", token);
  return query;
}

/// Whether a finished task still shows, dimmed, in the Running view: for a minute after
/// it finished (by its finished_at, so also after a reload).
function lingers(task) {
  if (!FINISHED.has(task.state) || !task.finished_at) return false;
  const seen = model.finishedSeen.get(task.id);
  const age = seen !== undefined ? performance.now() - seen : Date.now() - Date.parse(task.finished_at);
  return age < LINGER_MS;
}

function matchesFilter(task) {
  if (rootFilter() && task.parent_id) return false;
  if (!matchesSearch(task, state.search)) return false;
  switch (state.filter) {
    case "running": return task.state === "pending" || task.state === "running" || lingers(task);
    case "stalled": return task.stalled && !FINISHED.has(task.state);
    case "failed": return task.state === "failed";
    case "finished": return FINISHED.has(task.state);
    default: return true;
  }
}

/// Whether a task has lived at least `min_duration` (the stream's rule, applied to what
/// a listing returns: a task the stream has sent always has).
function longEnough(task) {
  if (model.streamed.has(task.id)) return true;
  const end = task.finished_at ? Date.parse(task.finished_at) : Date.now();
  return (end - Date.parse(task.created_at)) / 1000 >= state.minDuration;
}

/// Whether the page shows `task`: min_duration is the live view's rule (don't flash short
/// tasks), so it applies to the Running view only; the other views list history whole.
function displayable(task) {
  return state.filter !== "running" || longEnough(task);
}

/// Whether new tasks should wait above the list rather than push its rows down: the
/// reader has scrolled or is working in the list.
function holding() {
  return window.scrollY > 0 || $("tasks").contains(document.activeElement);
}

/// Reads the current page again soon (at most once per REFRESH_MS).
function scheduleRefresh() {
  scheduleSummary();
  if (state.refreshTimer) return;
  const wait = Math.max(150, state.refreshAt + REFRESH_MS - performance.now());
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refreshList(); }, wait);
}

/// Which listing the current query names.
function listKey() {
  return JSON.stringify([state.filter, state.search, state.page, state.pageTokens[state.page - 1] ?? null]);
}

/// At most this many more pages are read to fill a page whose rows are mostly hidden.
const FILL_PAGES = 3;

/// Reads the current page. A re-read of the listing the rows came from keeps the rows
/// shown that still match, and (page 1, the reader scrolled or busy in the list) holds new
/// tasks above them; after navigating (`fresh`, or another page or query) it shows the
/// server's rows as they are.
async function refreshList({ fresh = false } = {}) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = null;
  state.refreshAt = performance.now();
  const serial = ++state.listSerial;
  const key = listKey();
  const query = listQuery();
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
    $("list-error").hidden = true;
    // The rows belong to this listing (read before, or come from the stream since the
    // filter or search changed): kept. Holding needs rows the reader has seen listed.
    const same = !fresh && state.rowsKey === key;
    const top = state.rows.length ? model.get(state.rows[0]) : null;
    const hold = same && state.listed && state.page === 1 && top && holding();
    const ids = [];
    for (const listed of tasks) {
      const task = model.get(listed.id) ?? listed;
      if (ids.includes(task.id) || !displayable(task) || state.held.has(task.id)) continue;
      // New above the rows the reader is looking at: offered, not inserted.
      if (hold && !state.rows.includes(task.id) && newestFirst(task, top) < 0) { state.held.add(task.id); continue; }
      ids.push(task.id);
    }
    // Rows shown that still match stay (the stream keeps them up to date; a listing of
    // hidden young tasks or new ones must not push them off).
    const kept = same
      ? state.rows.filter((id) => !ids.includes(id) && model.get(id) && !model.wasDeleted(id)
        && matchesFilter(model.get(id)) && displayable(model.get(id)))
      : [];
    const shown = new Set(state.rows);
    const rows = [...ids, ...kept].sort((a, b) => newestFirst(model.get(a), model.get(b)));
    // Over a page: the oldest rows the listing did not give go (while holding, only rows
    // not shown go, so the reader's rows stay put).
    const limit = Math.max(PAGE_SIZE, ids.length);
    for (let index = rows.length - 1; index >= 0 && rows.length > limit; index -= 1) {
      if (hold ? !shown.has(rows[index]) : !ids.includes(rows[index])) rows.splice(index, 1);
    }
    const lingering = rows.filter((id) => !ids.includes(id) && FINISHED.has(model.get(id).state)).length;
    state.rows = rows;
    state.rowsKey = key;
    state.nextToken = page.next_page_token;
    state.totalSize = page.total_size + (state.filter === "running" ? lingering : 0);
    state.listed = true;
    listDirty = true;
    prune();
    scheduleRender();
  } catch (error) {
    if (serial !== state.listSerial) return;
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    $("list-error").textContent = t("loadFailed", { detail: errorText(error) });
    $("list-error").hidden = false;
    // A navigation that failed: the pager works again (the rows are those shown before).
    if (!state.listed && state.rows.length) state.listed = true;
    listDirty = true;
    scheduleRender();
  }
}

/// Reads another page: the pager waits (its buttons disabled) until it has arrived; then
/// the page is shown from its top, the focus on its first task (not left on a pager
/// button at the bottom of rows that changed under it).
function navigate() {
  state.listed = false;
  state.rowsKey = null;
  state.held.clear();
  listDirty = true;
  scheduleRender();
  const serial = state.listSerial + 1;
  refreshList({ fresh: true }).then(() => {
    if (state.listSerial !== serial) return;
    requestAnimationFrame(() => {
      window.scrollTo(0, 0);
      ($("tasks").querySelector(".name") ?? $("next-page-top")).focus({ preventScroll: true });
    });
  });
}

/// Starts the listing over at page 1 (a new filter or search).
function restartList() {
  state.listedSearch = state.search;
  state.page = 1;
  state.pageTokens = [null];
  state.nextToken = null;
  state.listed = false;
  state.held.clear();
  state.rows = [];
  // Rows the stream adds from now on are this listing's.
  state.rowsKey = listKey();
  listDirty = true;
  scheduleRender();
  refreshList();
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
    if (state.expanded.has(task.id)) reconcileChildren(task.id);
  }
  $("empty").hidden = wanted.length > 0 || !state.listed;
  // A search without a match is not "no tasks".
  setText($("empty"), state.search ? t("noSearchMatch", { q: isolate(state.search) }) : t("empty"));
  const held = state.held.size;
  $("new-tasks").hidden = held === 0;
  setText($("new-tasks"), t(held === 1 ? "newTask" : "newTasks", { count: formatInteger(held) }));
  const pages = Math.max(1, Math.ceil(state.totalSize / PAGE_SIZE));
  const pageText = t("pageOf", { page: formatInteger(Math.min(state.page, pages)), pages: formatInteger(pages) });
  // The same pager above and below the rows.
  for (const suffix of ["", "-top"]) {
    setText($(`page-text${suffix}`), pageText);
    $(`prev-page${suffix}`).disabled = !state.listed || state.page <= 1;
    $(`next-page${suffix}`).disabled = !state.listed || !state.nextToken;
  }
  // One page only: the top pager would say nothing the bottom one does not.
  $("pager-top").hidden = pages <= 1 && state.page <= 1;
  renderCounts();
}

/// The tabs' counts (GET /v1/tasks/summary), each with its accessible wording.
function renderCounts() {
  for (const button of document.querySelectorAll("[data-filter]")) {
    const count = state.counts?.[button.dataset.filter];
    const node = button.querySelector(".count");
    setText(node, typeof count === "number" ? formatInteger(count) : "");
    const label = t(button.querySelector("[data-i18n]").dataset.i18n);
    setAttr(button, "aria-label", typeof count === "number" ? tn("tabCount", count, { label }) : null);
  }
}

/// Reads the tab counts again soon (at most once per REFRESH_MS).
function scheduleSummary() {
  if (state.summaryTimer) return;
  const wait = Math.max(150, state.summaryAt + REFRESH_MS - performance.now());
  state.summaryTimer = setTimeout(() => { state.summaryTimer = null; loadSummary(); }, wait);
}

/// Reads the tab counts; a server without the summary route leaves the tabs without counts.
async function loadSummary() {
  clearTimeout(state.summaryTimer);
  state.summaryTimer = null;
  state.summaryAt = performance.now();
  try {
    const [summary, roots] = await Promise.all([request("GET", "/v1/tasks/summary"),
                                                request("GET", "/v1/tasks/summary?root=true")]);
    state.counts = tabCounts(summary, roots);
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    if (error instanceof APIError) state.counts = null;
  }
  listDirty = true;
  scheduleRender();
}

/// Shows the new tasks held above the list, from the top.
function showHeld() {
  state.held.clear();
  window.scrollTo(0, 0);
  refreshList({ fresh: true }).then(() => requestAnimationFrame(() => $("tasks").querySelector(".name")?.focus()));
}

/// Draws the children of `parentID` under each of its rows that is open.
function reconcileChildren(parentID) {
  const children = model.childrenOf(parentID);
  const containers = parentID === state.detailID ? [$("detail-children")] : [];
  for (const row of rendered.get(parentID) ?? []) {
    if (row.isConnected && !row.closest("#detail-row")) containers.push(row.querySelector(":scope > .children"));
  }
  for (const container of containers) {
    const existing = new Map([...container.children].map((row) => [row.dataset.taskId, row]));
    let cursor = container.firstElementChild;
    for (const child of children) {
      let row = existing.get(child.id);
      existing.delete(child.id);
      if (!row) row = createRow(child);
      if (row !== cursor) container.insertBefore(row, cursor); else cursor = cursor.nextElementSibling;
    }
    for (const row of existing.values()) row.remove();
  }
  if (parentID === state.detailID) $("no-children").hidden = children.length > 0;
}

async function loadChildren(parentID) {
  try {
    const page = await request("GET", `/v1/tasks?parent_id=${encodeURIComponent(parentID)}&page_size=100`);
    for (const task of page.tasks) model.put(task, false);
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    if (parentID !== state.detailID) announce(t("loadFailed", { detail: errorText(error) }));
  }
  childrenDirty.add(parentID);
  model.dirty.add(parentID);
  scheduleRender();
}

function toggleExpanded(id) {
  if (state.expanded.has(id)) state.expanded.delete(id);
  else { state.expanded.add(id); loadChildren(id); }
  model.dirty.add(id);
  childrenDirty.add(id);
  scheduleRender();
}

/// A task that now matches the filter and is not on the page: on page 1 it joins at its
/// place (or, above the rows while the reader is scrolled or busy, waits as "N new
/// tasks"); the listing is read again to get the count and the page right.
function arrived(task) {
  if (state.rows.includes(task.id) || state.held.has(task.id) || !matchesFilter(task) || !displayable(task)) return;
  if (state.page !== 1) { scheduleRefresh(); return; }
  const top = state.rows.length ? model.get(state.rows[0]) : null;
  const last = state.rows.length ? model.get(state.rows[state.rows.length - 1]) : null;
  if (state.listed && top && newestFirst(task, top) < 0 && holding()) {
    state.held.add(task.id);
  } else if (state.rows.length < PAGE_SIZE || newestFirst(task, last) < 0) {
    state.rows.push(task.id);
    state.rows.sort((a, b) => newestFirst(model.get(a), model.get(b)));
    if (state.rows.length > PAGE_SIZE) state.rows.pop();
  }
  listDirty = true;
  scheduleRefresh();
}

/// A task that left the page (deleted, lingered out, no longer matching): the page is
/// filled up again from the server.
function leave(id) {
  const index = state.rows.indexOf(id);
  if (index < 0) return;
  state.rows.splice(index, 1);
  listDirty = true;
  scheduleRefresh();
}

/// Keeps the model to what the page shows: its rows, the children of open parents, the
/// detail task and its children, and the tasks being canceled. Rows no longer in the
/// document are forgotten.
function prune() {
  const keep = new Set(state.rows);
  if (state.detailID) keep.add(state.detailID);
  for (const id of state.canceling) keep.add(id);
  const parents = new Set(state.expanded);
  if (state.detailID) parents.add(state.detailID);
  model.prune((task) => keep.has(task.id) || (task.parent_id !== null && parents.has(task.parent_id)));
  for (const id of state.expanded) if (!model.get(id)) state.expanded.delete(id);
  for (const id of state.confirming.keys()) if (!model.get(id)) state.confirming.delete(id);
  for (const id of state.cancelAskedAt.keys()) if (!model.get(id)) state.cancelAskedAt.delete(id);
  for (const id of state.actionErrors.keys()) if (!model.get(id)) state.actionErrors.delete(id);
  forgetDetachedRows();
  if (state.held.size > 10_000) state.held = new Set([...state.held].slice(-10_000));
}

// MARK: - The event stream

function announce(text) {
  const region = $("announce");
  region.textContent = "";
  requestAnimationFrame(() => { region.textContent = text; });
}

function setConnection(kind) {
  const wasOffline = offline();
  state.connection = kind;
  const node = $("connection");
  node.dataset.state = kind;
  const since = state.lostAt ? formatClock(new Date(state.lostAt)) : "";
  const text = kind === "offline" ? t("offlineSince", { time: since }) : t(kind);
  if ($("connection-text").textContent !== text) {
    $("connection-text").textContent = text;
    if (kind !== "connecting") announce(text);
  }
  // Offline, the whole page says so: the indicators stand still (style.css, by the body's
  // data-connection) and the note says why the actions wait.
  document.body.dataset.connection = kind;
  const note = $("offline-note");
  note.hidden = !offline();
  setText(note, kind === "offline" ? t("offlineNote", { time: since }) : offline() ? t("reconnectingNote") : "");
  if (wasOffline !== offline()) for (const id of rendered.keys()) model.dirty.add(id);
  scheduleRender();
}

function connectionLost() {
  if (state.connection === "live" || state.connection === "connecting") {
    state.lostAt ??= Date.now();
    setConnection("reconnecting");
  }
}

function onTaskEvent(event) {
  stats.events += 1;
  let data;
  try { data = JSON.parse(event.data); } catch { return; }
  if (event.lastEventId) state.lastEventID = event.lastEventId;
  // The tab counts follow every change of state, shown on this page or not.
  if (MEMBERSHIP.has(event.type)) scheduleSummary();
  if (event.type === "task.deleted") {
    model.markDeleted(data.id);
    leave(data.id);
    state.expanded.delete(data.id);
    state.held.delete(data.id);
    if (data.id === state.detailID) showDetailProblem(t("taskMissing", { id: isolate(data.id) }));
    scheduleRefresh();
    scheduleRender();
    return;
  }
  // The id is used again: what was deleted before no longer stands in its way.
  if (event.type === "task.created") model.deleted.delete(data.id);
  if (model.wasDeleted(data.id)) return;
  if (data.parent_id && model.get(data.parent_id)) {
    model.parents.add(data.parent_id);
    childrenDirty.add(data.parent_id);
    model.dirty.add(data.parent_id);
  }
  const before = model.get(data.id);
  const parentOpen = data.parent_id && (state.expanded.has(data.parent_id) || data.parent_id === state.detailID);
  // A task the page neither shows nor would show is not kept.
  if (!before && !parentOpen && data.id !== state.detailID && !matchesFilter(data)) {
    if (state.held.has(data.id)) { state.held.delete(data.id); listDirty = true; scheduleRender(); }
    return;
  }
  const changed = model.put(data, true);
  // New progress (or the end) adds to the history; a signal, a stall or the clock do not.
  if (data.id === state.detailID && changed
    && (!before || before.last_progress_at !== data.last_progress_at || before.state !== data.state)) historyChanged();
  // A new last line: the output tail is read again.
  if (data.id === state.detailID && changed && before && ((before.last_output ?? null) !== (data.last_output ?? null) || before.state !== data.state)) {
    outputChanged();
  }
  if (rendered.has(data.id) && before) {
    if (event.type === "task.finished") announce(t("announceFinished", { name: isolate(displayName(data)), state: t(`state_${data.state}`) }));
    else if (event.type === "task.stalled") announce(t("announceStalled", { name: isolate(displayName(data)) }));
    else if (event.type === "task.recovered") announce(t("announceRecovered", { name: isolate(displayName(data)) }));
  }
  if (state.rows.includes(data.id)) {
    if (!matchesFilter(data)) leave(data.id);
    else if (MEMBERSHIP.has(event.type)) scheduleRefresh();
  } else if (state.held.has(data.id)) {
    if (!matchesFilter(data)) { state.held.delete(data.id); listDirty = true; }
  } else if (matchesFilter(data)) {
    arrived(data);
  }
  scheduleRender();
}

function connect({ fresh = false } = {}) {
  clearTimeout(state.retryTimer);
  if (state.source) state.source.close();
  if (fresh) state.lastEventID = "";
  const source = new EventSource(eventsURL(state.minDuration, state.lastEventID));
  state.source = source;
  source.onopen = () => {
    state.lostAt = null;
    setConnection("live");
  };
  source.onerror = () => {
    if (source !== state.source) return;
    connectionLost();
    if (source.readyState === EventSource.CLOSED) {
      // Refused (not a stream): in a while, see whether the token is the reason, and try again.
      clearTimeout(state.retryTimer);
      state.retryTimer = setTimeout(() => start({ quiet: true }), 3000);
    }
  };
  source.addEventListener("snapshot", (event) => {
    let data;
    try { data = JSON.parse(event.data); } catch { return; }
    if (event.lastEventId) state.lastEventID = event.lastEventId;
    for (const task of data.tasks) {
      if (model.wasDeleted(task.id)) continue;
      if (task.parent_id) model.parents.add(task.parent_id);
      if (!matchesFilter(task) && !model.get(task.id)) continue;
      model.put(task, true);
      if (state.rows.includes(task.id) && !matchesFilter(task)) leave(task.id); else arrived(task);
    }
    refreshList();
    scheduleRender();
  });
  for (const name of TASK_EVENTS.concat("task.deleted")) source.addEventListener(name, onTaskEvent);
}

// MARK: - The detail view

function showView(name) {
  for (const view of ["token-view", "list-view", "detail-view"]) $(view).hidden = view !== name;
}

/// Empties the detail view (a task shown before must not stay under another one).
function clearDetail() {
  setText($("detail-heading"), "");
  setText($("detail-problem"), "");
  $("detail-problem").hidden = true;
  $("detail-row").replaceChildren();
  $("detail-children").replaceChildren();
  $("fields").replaceChildren();
  $("output").replaceChildren();
  setText($("output-empty"), "");
  drawHistory($("chart"), []);
  setText($("chart-caption"), "");
  $("detail-body").hidden = true;
}

/// Says why the detail view has no task to show.
function showDetailProblem(text) {
  clearDetail();
  setText($("detail-heading"), t("detailUnavailable"));
  setText($("detail-problem"), text);
  $("detail-problem").hidden = false;
}

async function openDetail(id) {
  state.detailID = id;
  clearDetail();
  showView("detail-view");
  let task = model.get(id);
  if (!task) {
    try { task = await request("GET", `/v1/tasks/${encodeURIComponent(id)}`); }
    catch (error) {
      if (state.detailID !== id) return;
      if (error instanceof APIError && error.status === 401) return tokenRefused(error);
      showDetailProblem(error instanceof APIError && (error.status === 404 || error.status === 403)
        ? t(error.status === 404 ? "taskMissing" : "taskHidden", { id: isolate(id) })
        : t("loadFailed", { detail: errorText(error) }));
      $("back").focus();
      return;
    }
    if (state.detailID !== id) return;
    model.put(task, false);
  }
  setText($("detail-heading"), displayName(task));
  $("detail-body").hidden = false;
  const list = element("ul", "tasks detail-task");
  const row = createRow(task);
  list.append(row);
  $("detail-row").replaceChildren(list);
  // Drawn again now that it knows it is the detail page's own row (no expander).
  updateRow(row, task);
  renderDetailFields(task);
  fitHistory();
  loadHistory();
  loadOutput();
  loadChildren(id);
  $("back").focus();
}

function closeDetail() {
  const back = state.returnFocusID ?? state.detailID;
  state.detailID = null;
  clearDetail();
  showView("list-view");
  state.returnFocusID = null;
  listDirty = true;
  scheduleRender();
  // The focus goes back to the task's link in the list (or the list's start).
  requestAnimationFrame(() => {
    const link = back !== null ? listRows.get(back)?.querySelector(".name") : null;
    (link ?? document.querySelector('[data-filter][aria-pressed="true"]'))?.focus();
  });
  prune();
}

function renderDetailFields(task) {
  const none = t("none");
  const date = (value) => value ? formatDateTime(new Date(value)) : none;
  const progress = task.total !== null
    ? `${t("ofTotal", { completed: formatInteger(task.completed), total: formatInteger(task.total) })}${unitText(task)}`
    : task.fraction !== null ? formatPercentText(task.fraction) : formatInteger(task.completed);
  const left = offline() ? null : secondsLeft(task);
  const signal = noSignalSeconds(task, Date.now());
  const badge = badgeOf(task);
  // Why first: the state (or what needs attention) and the message lead, times follow.
  const fields = [
    ["field_id", task.id], ["field_name", plain(task.name)],
    ["field_state", badge.startsWith("attention_") ? `${t(`state_${task.state}`)} · ${t(`badge_${badge}`)}` : t(`state_${task.state}`)],
    ["field_message", plain(task.message) || none],
    ["field_label", plain(task.label) || none], ["field_progress", progress],
    ["field_children", childrenText(task) || none],
    // A parent's rate is a fraction per second ("0/s"): not shown.
    ["field_rate", showsRate(task) ? t("rate", { rate: formatNumber(task.rate) + unitText(task) }) : none],
    ["field_eta", left !== null ? formatDuration(left) : none],
    ["field_stall", task.stalled && !FINISHED.has(task.state) ? stallText(task) : t("no")],
    ["field_last_signal", signal !== null && !FINISHED.has(task.state) ? t("ago", { age: formatDuration(signal, "short") }) : none],
    ["field_ran", formatDuration(elapsedSeconds(task, Date.now()), "short")],
    ["field_stall_timeout", formatDuration(task.stall_timeout_seconds)],
    ["field_cancel", task.cancel_requested ? t("yes") : t("no")],
    ["field_parent", task.parent_id || none], ["field_created", date(task.created_at)],
    ["field_updated", date(task.updated_at)], ["field_finished", date(task.finished_at)],
  ];
  const list = $("fields");
  if (list.children.length !== fields.length * 2) {
    list.replaceChildren(...fields.flatMap(() => [element("dt"), element("dd")]));
  }
  fields.forEach(([key, value], index) => {
    setText(list.children[index * 2], t(key));
    setText(list.children[index * 2 + 1], String(value));
  });
}

/// The detail task printed more: its output tail is read again (at most every second).
function outputChanged() {
  if (state.outputTimer) return;
  const wait = Math.max(0, state.outputAt + 1000 - performance.now());
  state.outputTimer = setTimeout(() => { state.outputTimer = null; loadOutput(); }, wait);
}

/// Reads and shows the detail task's output tail (its last lines, oldest first).
async function loadOutput() {
  const id = state.detailID;
  if (!id) return;
  state.outputAt = performance.now();
  const box = $("output");
  try {
    const tail = await request("GET", `/v1/tasks/${encodeURIComponent(id)}/output`);
    if (state.detailID !== id) return;
    const lines = Array.isArray(tail?.lines) ? tail.lines : [];
    box.replaceChildren(...lines.map((line) => {
      const item = element("span", "line", plain(line.line));
      if (line.t) item.title = formatDateTime(new Date(line.t));
      return item;
    }));
    box.hidden = lines.length === 0;
    setText($("output-empty"), lines.length === 0 ? t("outputEmpty") : "");
  } catch (error) {
    if (state.detailID !== id) return;
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    box.hidden = true;
    // A daemon without output tails (404 on the route) has none to show.
    setText($("output-empty"), error instanceof APIError && error.status === 404 ? t("outputEmpty")
      : t("loadFailed", { detail: errorText(error) }));
  }
}

/// The detail task reported progress: its history is read again (at most every 2 s).
function historyChanged() {
  if (state.historyTimer) return;
  const wait = Math.max(0, state.historyAt + 2000 - performance.now());
  state.historyTimer = setTimeout(() => { state.historyTimer = null; loadHistory(); }, wait);
}

/// The points to ask for: about one per 3 pixels of the chart, times the zoom.
function fitHistory() {
  const width = $("chart").clientWidth || 600;
  state.detailPoints = clampPoints((width / 3) * state.zoom);
}

async function loadHistory() {
  const id = state.detailID;
  if (!id) return;
  state.historyAt = performance.now();
  const points = state.detailPoints;
  $("zoom-in").disabled = points >= MAX_POINTS;
  $("zoom-out").disabled = points <= MIN_POINTS;
  setText($("zoom-text"), tn("points", points));
  try {
    const history = await request("GET", `/v1/tasks/${encodeURIComponent(id)}/history?max_points=${points}`);
    if (state.detailID !== id) return;
    const task = model.get(id);
    // An unfinished task's line runs to now.
    const until = task && !FINISHED.has(task.state) ? new Date() : null;
    const drawn = drawHistory($("chart"), history.points, until);
    setText($("chart-caption"), drawn.count
      ? tn("chartCaption", drawn.count, { from: formatDateTime(drawn.first), to: formatDateTime(drawn.last) })
      : t("chartEmpty"));
  } catch (error) {
    if (state.detailID !== id) return;
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    setText($("chart-caption"), t("loadFailed", { detail: errorText(error) }));
  }
}

function zoom(factor) {
  const before = state.detailPoints;
  state.detailPoints = clampPoints(state.detailPoints * factor);
  const width = $("chart").clientWidth || 600;
  state.zoom = state.detailPoints / (width / 3);
  if (state.detailPoints !== before) loadHistory();
}

/// A task id as the API accepts it.
const TASK_ID = /^[A-Za-z0-9._~:-]{1,128}$/;

function route() {
  const match = /^#task=(.*)$/.exec(location.hash);
  if (match) {
    let id = null;
    try { id = decodeURIComponent(match[1]); } catch { id = null; }
    // Only an id of the API's form names a task ("." and ".." would change the request's path).
    if (id === null || !TASK_ID.test(id) || id === "." || id === "..") {
      state.detailID = null;
      showView("detail-view");
      showDetailProblem(t("badLink"));
      $("back").focus();
      return;
    }
    if (state.detailID === null) state.returnFocusID = id;
    openDetail(id);
  } else if (state.detailID !== null || $("detail-view").hidden === false) closeDetail();
}

// MARK: - Cancel, tokens, start

/// The focus, on a confirmation button that is gone, moves to the task's link.
function focusTaskLink(id) {
  requestAnimationFrame(() => {
    const row = document.activeElement?.closest?.("li.task") ?? listRows.get(id);
    (row?.querySelector(".name") ?? listRows.get(id)?.querySelector(".name"))?.focus();
  });
}

/// Says on the task's rows (and to screen readers) that an action failed, and why.
function actionFailed(id, key, error) {
  const text = t(key, { detail: errorText(error) });
  state.actionErrors.set(id, text);
  model.dirty.add(id);
  announce(text);
  if (error instanceof APIError && error.status === 401) tokenRefused(error);
}

async function cancelTask(id) {
  state.confirming.delete(id);
  state.actionErrors.delete(id);
  state.canceling.add(id);
  model.dirty.add(id);
  scheduleRender();
  focusTaskLink(id);
  try {
    const task = await request("POST", `/v1/tasks/${encodeURIComponent(id)}/cancel`, {});
    state.cancelAskedAt.set(id, performance.now());
    model.put(task, model.streamed.has(id));
  } catch (error) {
    state.canceling.delete(id);
    actionFailed(id, "cancelFailed", error);
  }
  scheduleRender();
}

/// Finishes a task whose cancel went unanswered (its runner died or ignores it): the
/// server marks it canceled, "terminated", with its unfinished descendants.
async function terminateTask(id) {
  state.confirming.delete(id);
  state.actionErrors.delete(id);
  model.dirty.add(id);
  scheduleRender();
  focusTaskLink(id);
  try {
    const task = await request("POST", `/v1/tasks/${encodeURIComponent(id)}/terminate`, {});
    model.put(task, model.streamed.has(id));
  } catch (error) {
    actionFailed(id, "terminateFailed", error);
  }
  scheduleRender();
}

/// Shows the token form with `message` (if any); the stream and every retry stop.
function needToken(message) {
  if (state.source) { state.source.close(); state.source = null; }
  clearTimeout(state.retryTimer);
  clearTimeout(state.refreshTimer);
  state.refreshTimer = null;
  state.lostAt = null;
  setConnection("signedOut");
  showView("token-view");
  setText($("token-error"), message || "");
  $("token-input").focus();
}

/// The server refused the token (revoked, expired): it is forgotten and the form shown.
function tokenRefused(error) {
  const had = storedToken();
  storeToken("");
  needToken(had ? t("tokenRefused", { detail: error.message }) : "");
}

let started = false;

async function start({ quiet = false } = {}) {
  let grant;
  try {
    grant = await request("GET", "/v1/token");
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    // The daemon is away: keep trying (the stream retries by itself while it can).
    connectionLost();
    clearTimeout(state.retryTimer);
    state.retryTimer = setTimeout(() => start({ quiet: true }), 3000);
    if (!started && !quiet) showView("list-view");
    return;
  }
  if (!grant.scopes.includes("read")) {
    // No token while tokens are required, or one that cannot read: back to the form.
    if (storedToken()) { storeToken(""); return needToken(t("tokenNoRead")); }
    return needToken("");
  }
  state.canCancel = grant.scopes.includes("control");
  setText($("token-error"), "");
  if ($("token-view").hidden === false || !started) showView(state.detailID ? "detail-view" : "list-view");
  if (state.connection === "signedOut") setConnection("connecting");
  started = true;
  if (!state.source || state.source.readyState === EventSource.CLOSED) connect();
  refreshList();
  loadSummary();
  for (const id of rendered.keys()) model.dirty.add(id);
  scheduleRender();
}

function tick() {
  if (state.filter === "running") {
    for (const id of [...state.rows]) {
      const task = model.get(id);
      if (task && FINISHED.has(task.state) && !lingers(task)) leave(id);
    }
  }
  // Every row tells ages (running for, last signal, stall, time left): all are drawn again.
  for (const id of rendered.keys()) model.dirty.add(id);
  if (state.connection === "reconnecting" && state.lostAt && Date.now() - state.lostAt > OFFLINE_AFTER_MS) {
    setConnection("offline");
  }
  prune();
  scheduleRender();
}

function relabel() {
  for (const id of rendered.keys()) model.dirty.add(id);
  listDirty = true;
  if (state.connection) setConnection(state.connection);
  setSearchHint();
  if (state.detailID) loadHistory();
  scheduleRender();
}

function setSearchHint() {
  setText($("search-hint"), t("searchHint"));
}

function setup() {
  let stored = null;
  try { stored = localStorage.getItem("headway.language"); } catch { stored = null; }
  setLanguage(initialLanguage(location.search, stored, navigator.language));
  $("language").value = currentLanguage();
  $("language").addEventListener("change", (event) => {
    setLanguage(event.target.value);
    try { localStorage.setItem("headway.language", event.target.value); } catch { /* not kept */ }
    relabel();
  });
  const minDuration = $("min-duration");
  const fromQuery = new URLSearchParams(location.search).get("min_duration");
  if (fromQuery !== null && /^\d+(\.\d+)?$/.test(fromQuery) && Number(fromQuery) <= 86400) minDuration.value = fromQuery;
  state.minDuration = Number(minDuration.value);
  minDuration.addEventListener("change", () => {
    const value = Number(minDuration.value);
    if (minDuration.value === "" || !Number.isFinite(value) || value < 0 || value > 86400) {
      minDuration.setCustomValidity("0–86400");
      minDuration.reportValidity();
      return;
    }
    minDuration.setCustomValidity("");
    state.minDuration = value;
    // What the stream sent under the old setting is judged again by the new one.
    model.streamed.clear();
    state.rows = state.rows.filter((id) => model.get(id) && displayable(model.get(id)));
    listDirty = true;
    scheduleRender();
    connect({ fresh: true });
    refreshList();
  });
  for (const button of document.querySelectorAll("[data-filter]")) {
    button.addEventListener("click", () => {
      state.filter = button.dataset.filter;
      for (const other of document.querySelectorAll("[data-filter]")) {
        other.setAttribute("aria-pressed", String(other === button));
      }
      restartList();
    });
  }
  let searchTimer = null;
  const searched = () => {
    clearTimeout(searchTimer);
    state.search = $("search").value.trim();
    if (state.search !== state.listedSearch) searchTimer = setTimeout(restartList, 250);
  };
  $("search").addEventListener("input", searched);
  setSearchHint();
  $("new-tasks").addEventListener("click", showHeld);
  for (const suffix of ["", "-top"]) {
    $(`prev-page${suffix}`).addEventListener("click", () => {
      if (state.page <= 1 || !state.listed) return;
      state.page -= 1;
      navigate();
    });
    $(`next-page${suffix}`).addEventListener("click", () => {
      if (!state.nextToken || !state.listed) return;
      state.pageTokens[state.page] = state.nextToken;
      state.page += 1;
      navigate();
    });
  }
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!looksLikeToken(token)) { setText($("token-error"), t("tokenMalformed")); return; }
    storeToken(token);
    $("token-input").value = "";
    start();
  });
  $("back").addEventListener("click", () => { history.pushState(null, "", location.pathname + location.search); route(); });
  $("zoom-in").addEventListener("click", () => zoom(2));
  $("zoom-out").addEventListener("click", () => zoom(0.5));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("detail-view").hidden && !event.defaultPrevented) $("back").click();
  });
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (!state.detailID) return;
      const before = state.detailPoints;
      fitHistory();
      if (state.detailPoints !== before) loadHistory();
    }, 300);
  });
  window.addEventListener("hashchange", route);
  setInterval(tick, 1000);
  state.rowsKey = listKey();
  start();
  route();
}

setup();
