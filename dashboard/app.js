// The dashboard: a page of tasks kept live by the event stream. Events change the model
// only; the DOM is brought up to date at most once per animation frame, and only the rows
// on the page whose task changed are touched.

import { APIError, eventsURL, looksLikeToken, request, storeToken, storedToken } from "./api.js";
import { clampPoints, drawHistory, MAX_POINTS, MIN_POINTS } from "./chart.js";
import {
  currentLanguage, formatClock, formatDateTime, formatDuration, formatInteger, formatNumber, formatPercent,
  formatPercentText, initialLanguage, setLanguage, t,
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
  search: "",
  minDuration: 2,
  page: 1,
  pageTokens: [null],
  nextToken: null,
  totalSize: 0,
  rows: [],
  listSerial: 0,
  expanded: new Set(),
  canCancel: true,
  canceling: new Set(),
  confirming: new Set(),
  detailID: null,
  detailPoints: 200,
  historyAt: 0,
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
const stats = { events: 0, frames: 0, rowUpdates: 0 };
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
  if (listDirty) { listDirty = false; reconcileList(); }
  for (const parentID of childrenDirty) {
    if (state.expanded.has(parentID) || parentID === state.detailID) reconcileChildren(parentID);
  }
  childrenDirty.clear();
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
  info.append(head, id, label);
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
  for (const name of ["percent", "count", "rate", "eta", "stall"]) facts.append(element("span", name));
  meter.append(bar, activity, facts);
  const actions = element("div", "actions");
  const cancel = element("button", "cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => { state.confirming.add(task.id); model.dirty.add(task.id); scheduleRender(); });
  const confirm = element("span", "confirm");
  confirm.setAttribute("role", "group");
  const question = element("span", "question");
  const yes = element("button", "yes");
  yes.type = "button";
  yes.addEventListener("click", () => cancelTask(task.id));
  const no = element("button", "no");
  no.type = "button";
  no.addEventListener("click", () => {
    state.confirming.delete(task.id);
    model.dirty.add(task.id);
    scheduleRender();
    requestAnimationFrame(() => row.querySelector(".cancel")?.focus());
  });
  confirm.append(question, yes, no);
  actions.append(cancel, confirm);
  line.append(expander, info, meter, actions);
  const children = element("ul", "children tasks");
  children.hidden = true;
  row.append(line, children);
  register(row, task.id);
  updateRow(row, task);
  return row;
}

function setText(node, text) { if (node.textContent !== text) node.textContent = text; }
function setAttr(node, name, value) {
  if (value === null) { if (node.hasAttribute(name)) node.removeAttribute(name); }
  else if (node.getAttribute(name) !== value) node.setAttribute(name, value);
}

/// Seconds left at the task's rate, counted from its last report.
function secondsLeft(task) {
  if (task.eta_seconds === null || task.eta_seconds === undefined || FINISHED.has(task.state)) return null;
  const since = task.last_progress_at ? (Date.now() - Date.parse(task.last_progress_at)) / 1000 : 0;
  const left = task.eta_seconds - Math.max(0, since);
  return left >= 1 ? left : null;
}

function stallText(task) {
  if (!task.stalled || FINISHED.has(task.state)) return "";
  const since = task.stalled_since ? Date.parse(task.stalled_since) : Date.now();
  const age = formatDuration((Date.now() - since) / 1000, "short");
  return t(task.stall_reason === "no_progress" ? "stalledNoProgress" : "stalledSilent", { age });
}

/// Brings `row` up to `task`, touching only what differs.
function updateRow(row, task) {
  const finished = FINISHED.has(task.state);
  row.classList.toggle("finished", finished);
  row.classList.toggle("stalled", task.stalled && !finished);
  row.dataset.state = task.state;
  const name = row.querySelector(".name");
  setText(name, task.name || task.id);
  setText(row.querySelector(".tid"), task.id);
  setText(row.querySelector(".label"), task.label || "");
  const badge = row.querySelector(".badge");
  setText(badge, task.stalled && !finished ? t("stalled") : t(`state_${task.state}`));
  badge.dataset.state = task.stalled && !finished ? "stalled" : task.state;

  const expander = row.querySelector(".expander");
  const parent = hasChildren(model, task);
  expander.classList.toggle("absent", !parent);
  expander.disabled = !parent;
  setAttr(expander, "aria-hidden", parent ? null : "true");
  const open = state.expanded.has(task.id) && parent && !row.closest("#detail-row");
  setAttr(expander, "aria-expanded", open ? "true" : "false");
  setAttr(expander, "aria-label", t(open ? "collapse" : "expand", { name: task.name || task.id }));
  setText(expander, open ? "▾" : "▸");
  row.querySelector(".children").hidden = !open;

  const quantified = task.mode === "quantified";
  const bar = row.querySelector(".bar");
  const activity = row.querySelector(".activity");
  bar.hidden = !quantified;
  activity.hidden = quantified;
  const left = secondsLeft(task);
  const percentText = row.querySelector(".percent");
  if (quantified) {
    const fraction = Math.min(1, Math.max(0, task.fraction ?? 0));
    const percent = Math.floor(fraction * 100);
    bar.querySelector(".fill").style.transform = `scaleX(${fraction})`;
    setAttr(bar, "aria-valuenow", String(percent));
    setAttr(bar, "aria-valuetext", left !== null && !task.stalled
      ? t("valueTextEta", { percent: formatPercent(fraction), duration: formatDuration(left) })
      : t("valueText", { percent: formatPercent(fraction) }));
    setAttr(bar, "aria-label", task.name || task.id);
    setText(percentText, formatPercentText(fraction));
    const count = task.total !== null
      ? t("ofTotal", { completed: formatInteger(task.completed), total: formatInteger(task.total) }) + (task.unit ? ` ${task.unit}` : "")
      : "";
    setText(row.querySelector(".count"), count);
    const rate = task.rate !== null && task.total !== null
      ? t("rate", { rate: formatNumber(task.rate) + (task.unit ? ` ${task.unit}` : "") }) : "";
    setText(row.querySelector(".rate"), rate);
  } else {
    setText(percentText, "");
    setText(row.querySelector(".count"), task.completed > 0 ? formatInteger(task.completed) + (task.unit ? ` ${task.unit}` : "") : "");
    setText(row.querySelector(".rate"), "");
    setAttr(activity, "aria-label", task.name || task.id);
    setAttr(activity, "aria-valuetext", task.stalled ? stallText(task) : finished ? t(`state_${task.state}`) : t("working"));
  }
  activity.classList.toggle("stopped", (task.stalled || finished));
  bar.classList.toggle("stopped", task.stalled && !finished);
  setText(row.querySelector(".eta"), left !== null && !task.stalled ? t("etaLeft", { duration: formatDuration(left) }) : "");
  setText(row.querySelector(".stall"), stallText(task));

  const cancel = row.querySelector(".cancel");
  const confirm = row.querySelector(".confirm");
  const cancellable = state.canCancel && !finished;
  const canceling = !finished && (state.canceling.has(task.id) || task.cancel_requested);
  if (finished) { state.canceling.delete(task.id); state.confirming.delete(task.id); }
  const confirming = cancellable && !canceling && state.confirming.has(task.id);
  cancel.hidden = !cancellable || confirming;
  cancel.disabled = canceling;
  setText(cancel, canceling ? t("canceling") : t("cancel"));
  setAttr(cancel, "aria-label", canceling ? `${t("canceling")} ${task.name || task.id}` : `${t("cancel")} ${task.name || task.id}`);
  const wasHidden = confirm.hidden;
  confirm.hidden = !confirming;
  setText(confirm.querySelector(".question"), t("cancelConfirm"));
  setText(confirm.querySelector(".yes"), t("cancelYes"));
  setText(confirm.querySelector(".no"), t("cancelNo"));
  if (confirming && wasHidden) requestAnimationFrame(() => confirm.querySelector(".yes").focus());
}

// MARK: - The list and its pages

function rootFilter() { return state.filter === "running" || state.filter === "finished" || state.filter === "all"; }

function listQuery() {
  const query = new URLSearchParams({ page_size: String(PAGE_SIZE) });
  if (rootFilter()) query.set("root", "true");
  const states = { running: ["pending", "running"], failed: ["failed"], finished: ["succeeded", "failed", "canceled"] }[state.filter];
  for (const s of states ?? []) query.append("state", s);
  if (state.filter === "stalled") query.set("stalled", "true");
  const token = state.pageTokens[state.page - 1];
  if (token) query.set("page_token", token);
  return query;
}

function matchesFilter(task) {
  if (rootFilter() && task.parent_id) return false;
  switch (state.filter) {
    case "running": return task.state === "pending" || task.state === "running";
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

async function refreshList() {
  const serial = ++state.listSerial;
  try {
    const page = await request("GET", `/v1/tasks?${listQuery()}`);
    if (serial !== state.listSerial) return;
    $("list-error").hidden = true;
    for (const task of page.tasks) model.put(task, false);
    const lingering = state.filter === "running"
      ? state.rows.filter((id) => FINISHED.has(model.get(id)?.state) && !page.tasks.some((task) => task.id === id)) : [];
    const ids = page.tasks.filter(longEnough).map((task) => task.id);
    state.rows = [...new Set([...ids, ...lingering])].filter((id) => model.get(id))
      .sort((a, b) => newestFirst(model.get(a), model.get(b)));
    state.nextToken = page.next_page_token;
    state.totalSize = page.total_size + lingering.length;
    listDirty = true;
    scheduleRender();
  } catch (error) {
    if (serial !== state.listSerial) return;
    if (error instanceof APIError && error.status === 401) return needToken(error);
    $("list-error").textContent = t("loadFailed", { detail: error.message });
    $("list-error").hidden = false;
  }
}

function reconcileList() {
  const list = $("tasks");
  const search = state.search.toLowerCase();
  const wanted = state.rows.map((id) => model.get(id)).filter(Boolean)
    .filter((task) => !search || task.id.toLowerCase().startsWith(search) || (task.name || "").toLowerCase().startsWith(search));
  const keep = new Set(wanted.map((task) => task.id));
  for (const [id, row] of listRows) if (!keep.has(id)) { row.remove(); listRows.delete(id); }
  let cursor = list.firstElementChild;
  for (const task of wanted) {
    let row = listRows.get(task.id);
    if (!row) { row = createRow(task); listRows.set(task.id, row); }
    if (row !== cursor) list.insertBefore(row, cursor); else cursor = cursor.nextElementSibling;
    if (state.expanded.has(task.id)) reconcileChildren(task.id);
  }
  $("empty").hidden = wanted.length > 0;
  const pages = Math.max(1, Math.ceil(state.totalSize / PAGE_SIZE));
  setText($("page-text"), t("pageOf", { page: formatInteger(Math.min(state.page, pages)), pages: formatInteger(pages) }));
  $("prev-page").disabled = state.page <= 1;
  $("next-page").disabled = !state.nextToken;
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
    if (error instanceof APIError && error.status === 401) return needToken(error);
    announce(t("loadFailed", { detail: error.message }));
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

/// A task the stream sent: joins the first page when it matches the filter.
function arrived(task) {
  if (task.parent_id) { childrenDirty.add(task.parent_id); model.dirty.add(task.parent_id); }
  if (state.page !== 1 || state.rows.includes(task.id) || !matchesFilter(task)) return;
  state.rows.unshift(task.id);
  state.rows.sort((a, b) => newestFirst(model.get(a), model.get(b)));
  state.totalSize += 1;
  if (state.rows.length > PAGE_SIZE) {
    state.rows.pop();
    state.nextToken ??= "";
  }
  listDirty = true;
}

function leave(id) {
  const index = state.rows.indexOf(id);
  if (index < 0) return;
  state.rows.splice(index, 1);
  state.totalSize = Math.max(0, state.totalSize - 1);
  listDirty = true;
}

// MARK: - The event stream

function announce(text) {
  const region = $("announce");
  region.textContent = "";
  requestAnimationFrame(() => { region.textContent = text; });
}

function setConnection(kind) {
  state.connection = kind;
  const node = $("connection");
  node.dataset.state = kind;
  const text = kind === "offline" ? t("offlineSince", { time: formatClock(new Date(state.lostAt)) }) : t(kind);
  if ($("connection-text").textContent !== text) {
    $("connection-text").textContent = text;
    if (kind !== "connecting") announce(text);
  }
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
  if (event.type === "task.deleted") {
    model.remove(data.id);
    leave(data.id);
    state.expanded.delete(data.id);
    scheduleRender();
    return;
  }
  const before = model.get(data.id);
  const visible = rendered.has(data.id);
  // New to this view: first sent by the stream (a new task, or one held back until now),
  // or a change that makes it match the filter (a task that failed, for Failed).
  const joins = !model.streamed.has(data.id) || !(before && matchesFilter(before));
  model.put(data, true);
  if (visible && before) {
    if (event.type === "task.finished") announce(t("announceFinished", { name: data.name, state: t(`state_${data.state}`) }));
    else if (event.type === "task.stalled") announce(t("announceStalled", { name: data.name }));
    else if (event.type === "task.recovered") announce(t("announceRecovered", { name: data.name }));
  }
  if (joins) arrived(data);
  else if (data.parent_id) { childrenDirty.add(data.parent_id); model.dirty.add(data.parent_id); }
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
    for (const task of data.tasks) { model.put(task, true); arrived(task); }
    refreshList();
    scheduleRender();
  });
  for (const name of TASK_EVENTS.concat("task.deleted")) source.addEventListener(name, onTaskEvent);
}

// MARK: - The detail view

function showView(name) {
  for (const view of ["token-view", "list-view", "detail-view"]) $(view).hidden = view !== name;
}

async function openDetail(id) {
  state.detailID = id;
  showView("detail-view");
  let task = model.get(id);
  if (!task) {
    try { task = await request("GET", `/v1/tasks/${encodeURIComponent(id)}`); model.put(task, false); }
    catch (error) {
      if (error instanceof APIError && error.status === 401) return needToken(error);
      setText($("detail-heading"), error.message);
      return;
    }
  }
  if (state.detailID !== id) return;
  setText($("detail-heading"), task.name || task.id);
  const holder = $("detail-row");
  const list = element("ul", "tasks detail-task");
  list.append(createRow(task));
  holder.replaceChildren(list);
  $("detail-children").replaceChildren();
  renderDetailFields(task);
  state.detailPoints = clampPoints(($("chart").clientWidth || 600) / 3);
  loadHistory();
  loadChildren(id);
  $("back").focus();
}

function closeDetail() {
  state.detailID = null;
  $("detail-row").replaceChildren();
  $("detail-children").replaceChildren();
  showView("list-view");
}

function renderDetailFields(task) {
  const none = t("none");
  const date = (value) => value ? formatDateTime(new Date(value)) : none;
  const progress = task.total !== null
    ? `${t("ofTotal", { completed: formatInteger(task.completed), total: formatInteger(task.total) })}${task.unit ? ` ${task.unit}` : ""}`
    : task.fraction !== null ? formatPercentText(task.fraction) : formatInteger(task.completed);
  const left = secondsLeft(task);
  const fields = [
    ["field_id", task.id], ["field_name", task.name], ["field_state", t(`state_${task.state}`)],
    ["field_label", task.label || none], ["field_progress", progress],
    ["field_rate", task.rate !== null ? `${formatNumber(task.rate)}/s` : none],
    ["field_eta", left !== null ? formatDuration(left) : none],
    ["field_stall", task.stalled ? stallText(task) : t("no")],
    ["field_stall_timeout", formatDuration(task.stall_timeout_seconds)],
    ["field_cancel", task.cancel_requested ? t("yes") : t("no")],
    ["field_parent", task.parent_id || none], ["field_created", date(task.created_at)],
    ["field_updated", date(task.updated_at)], ["field_finished", date(task.finished_at)],
    ["field_message", task.message || none],
  ];
  const list = $("fields");
  if (list.children.length !== fields.length * 2) {
    list.replaceChildren(...fields.flatMap(() => [element("dt"), element("dd")]));
  }
  fields.forEach(([key, value], index) => {
    setText(list.children[index * 2], t(key));
    setText(list.children[index * 2 + 1], String(value));
  });
  if (performance.now() - state.historyAt > 2000) loadHistory();
}

async function loadHistory() {
  const id = state.detailID;
  if (!id) return;
  state.historyAt = performance.now();
  const points = state.detailPoints;
  $("zoom-in").disabled = points >= MAX_POINTS;
  $("zoom-out").disabled = points <= MIN_POINTS;
  setText($("zoom-text"), t("points", { count: formatInteger(points) }));
  try {
    const history = await request("GET", `/v1/tasks/${encodeURIComponent(id)}/history?max_points=${points}`);
    if (state.detailID !== id) return;
    const drawn = drawHistory($("chart"), history.points);
    setText($("chart-caption"), drawn.count
      ? t("chartCaption", { count: formatInteger(drawn.count), from: formatDateTime(drawn.first), to: formatDateTime(drawn.last) })
      : t("chartEmpty"));
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return needToken(error);
    setText($("chart-caption"), error.message);
  }
}

function zoom(factor) {
  state.detailPoints = clampPoints(state.detailPoints * factor);
  loadHistory();
}

function route() {
  const match = /^#task=(.+)$/.exec(location.hash);
  if (match) openDetail(decodeURIComponent(match[1]));
  else if (state.detailID !== null || $("detail-view").hidden === false) closeDetail();
}

// MARK: - Cancel, tokens, start

async function cancelTask(id) {
  state.confirming.delete(id);
  state.canceling.add(id);
  model.dirty.add(id);
  scheduleRender();
  try {
    const task = await request("POST", `/v1/tasks/${encodeURIComponent(id)}/cancel`, {});
    model.put(task, model.streamed.has(id));
  } catch (error) {
    state.canceling.delete(id);
    model.dirty.add(id);
    announce(t("cancelFailed", { detail: error.message }));
    if (error instanceof APIError && error.status === 401) needToken(error);
  }
  scheduleRender();
}

function needToken(error) {
  if (state.source) { state.source.close(); state.source = null; }
  showView("token-view");
  if (error && storedToken()) setText($("token-error"), t("tokenRefused", { detail: error.message }));
  $("token-input").focus();
}

let started = false;

async function start({ quiet = false } = {}) {
  try {
    const grant = await request("GET", "/v1/token");
    state.canCancel = grant.scopes.includes("control") || grant.scopes.includes("admin");
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return needToken(error);
    // The daemon is away: keep trying (the stream retries by itself while it can).
    connectionLost();
    clearTimeout(state.retryTimer);
    state.retryTimer = setTimeout(() => start({ quiet: true }), 3000);
    if (!started && !quiet) showView("list-view");
    return;
  }
  setText($("token-error"), "");
  if ($("token-view").hidden === false || !started) showView(state.detailID ? "detail-view" : "list-view");
  started = true;
  if (!state.source || state.source.readyState === EventSource.CLOSED) connect();
  refreshList();
  for (const id of rendered.keys()) model.dirty.add(id);
  scheduleRender();
}

function tick() {
  const now = performance.now();
  for (const [id, seen] of model.finishedSeen) {
    if (now - seen > LINGER_MS && state.filter === "running" && state.rows.includes(id)) leave(id);
  }
  for (const id of rendered.keys()) {
    const task = model.get(id);
    if (task && (task.stalled || task.eta_seconds !== null)) model.dirty.add(id);
  }
  if (state.connection === "reconnecting" && state.lostAt && Date.now() - state.lostAt > OFFLINE_AFTER_MS) {
    setConnection("offline");
  }
  scheduleRender();
}

function relabel() {
  for (const id of rendered.keys()) model.dirty.add(id);
  listDirty = true;
  if (state.connection) setConnection(state.connection);
  if (state.detailID) loadHistory();
  scheduleRender();
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
    connect({ fresh: true });
  });
  for (const button of document.querySelectorAll("[data-filter]")) {
    button.addEventListener("click", () => {
      state.filter = button.dataset.filter;
      for (const other of document.querySelectorAll("[data-filter]")) {
        other.setAttribute("aria-pressed", String(other === button));
      }
      state.page = 1;
      state.pageTokens = [null];
      refreshList();
    });
  }
  $("search").addEventListener("input", (event) => { state.search = event.target.value.trim(); listDirty = true; scheduleRender(); });
  $("prev-page").addEventListener("click", () => {
    if (state.page <= 1) return;
    state.page -= 1;
    refreshList();
  });
  $("next-page").addEventListener("click", () => {
    if (!state.nextToken) return;
    state.pageTokens[state.page] = state.nextToken;
    state.page += 1;
    refreshList();
  });
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
    if (event.key === "Escape" && state.detailID) $("back").click();
  });
  window.addEventListener("hashchange", route);
  setInterval(tick, 1000);
  start();
  route();
}

setup();
