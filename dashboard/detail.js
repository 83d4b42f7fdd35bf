// The detail view of one task (`#task=ID`): its row, fields, output tail, history chart with
// bounded zoom, and children. Owns which task it shows and when it last read the output
// and the history (each read again, at most every 1 s and 2 s, when the task changes).

import { APIError, request } from "./api.js";
import { clampPoints, drawHistory, MAX_POINTS, MIN_POINTS } from "./chart.js";
import { loadChildren } from "./children.js";
import { offline, readLanded, readMark } from "./connection.js";
import { $, element, setText, showView } from "./dom.js";
import { isFinished } from "./facts.js";
import { formatDateTime, t, tn } from "./i18n.js";
import { listRowOf } from "./list.js";
import { createRow, updateRow } from "./rows.js";
import { detailFields, displayName, errorText, isolate, plain } from "./wording.js";

/// A task id as the API accepts it.
const TASK_ID = /^[A-Za-z0-9._~:-]{1,128}$/;

const state = {
  /// The task shown, or null.
  detailID: null,
  /// The task whose row gets the focus back when the detail view closes.
  returnFocusID: null,
  /// The history's points asked for.
  points: 200,
  /// The zoom: points asked for relative to one per 3 pixels of the chart.
  zoom: 1,
  outputAt: 0,
  outputTimer: null,
  historyAt: 0,
  historyTimer: null,
};
let model = null;
let tokenRefused = () => {};
let closed = () => {};

/// `model`: the TaskModel; `onTokenRefused(error)`: the server refused the token;
/// `onClosed()`: the list view shows again. Wires the back and zoom buttons, Escape and
/// the window's width.
export function initDetail({ model: taskModel, onTokenRefused, onClosed }) {
  model = taskModel;
  tokenRefused = onTokenRefused;
  closed = onClosed;
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
      const before = state.points;
      fitHistory();
      if (state.points !== before) loadHistory();
    }, 300);
  });
}

/// The id of the task shown, or null.
export function detailID() { return state.detailID; }

/// Shows what the location's hash names: a task's detail view, or the list.
export function route() {
  const match = /^#task=(.*)$/.exec(location.hash);
  if (match) {
    let id = null;
    try { id = decodeURIComponent(match[1]); } catch { id = null; }
    // Only an id of the API's form names a task ("." and ".." would change the request's path).
    if (id === null || !TASK_ID.test(id) || id === "." || id === "..") {
      state.detailID = null;
      showView("detail-view");
      showProblem(t("badLink"));
      $("back").focus();
      return;
    }
    if (state.detailID === null) state.returnFocusID = id;
    openDetail(id);
  } else if (state.detailID !== null || $("detail-view").hidden === false) closeDetail();
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
export function showProblem(text) {
  clearDetail();
  setText($("detail-heading"), t("detailUnavailable"));
  setText($("detail-problem"), text);
  $("detail-problem").hidden = false;
}

/// The task shown was deleted.
export function detailDeleted(id) { showProblem(t("taskMissing", { id: isolate(id) })); }

async function openDetail(id) {
  state.detailID = id;
  clearDetail();
  showView("detail-view");
  let task = model.get(id);
  if (!task) {
    const mark = readMark();
    try { task = await request("GET", `/v1/tasks/${encodeURIComponent(id)}`); }
    catch (error) {
      if (state.detailID !== id) return;
      if (error instanceof APIError && error.status === 401) return tokenRefused(error);
      showProblem(error instanceof APIError && (error.status === 404 || error.status === 403)
        ? t(error.status === 404 ? "taskMissing" : "taskHidden", { id: isolate(id) })
        : t("loadFailed", { detail: errorText(error) }));
      $("back").focus();
      return;
    }
    if (state.detailID !== id) return;
    model.put(task, false);
    readLanded(mark);
  }
  setText($("detail-heading"), displayName(task));
  $("detail-body").hidden = false;
  const list = element("ul", "tasks detail-task");
  const row = createRow(task);
  list.append(row);
  $("detail-row").replaceChildren(list);
  // Drawn again now that it knows it is the detail page's own row (no expander).
  updateRow(row, task);
  drawFields(task);
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
  closed();
  // The focus goes back to the task's link in the list (or the list's start).
  requestAnimationFrame(() => {
    const link = back !== null ? listRowOf(back)?.querySelector(".name") : null;
    (link ?? document.querySelector('[data-filter][aria-pressed="true"]'))?.focus();
  });
}

/// Draws the fields of the task shown.
export function drawFields(task) {
  const fields = detailFields(task, Date.now(), offline());
  const list = $("fields");
  if (list.children.length !== fields.length * 2) {
    list.replaceChildren(...fields.flatMap(() => [element("dt"), element("dd")]));
  }
  fields.forEach(([key, value], index) => {
    setText(list.children[index * 2], t(key));
    setText(list.children[index * 2 + 1], String(value));
  });
}

/// The model took a new copy of the task shown (`before` → `after`): new progress or the
/// end adds to the history, a new last line to the output; a signal, a stall or the clock
/// do not.
export function taskChanged(before, after) {
  if (!before || before.last_progress_at !== after.last_progress_at || before.state !== after.state) historyChanged();
  if (before && ((before.last_output ?? null) !== (after.last_output ?? null) || before.state !== after.state)) {
    outputChanged();
  }
}

/// The task shown printed more: its output tail is read again (at most every second).
function outputChanged() {
  if (state.outputTimer) return;
  const wait = Math.max(0, state.outputAt + 1000 - performance.now());
  state.outputTimer = setTimeout(() => { state.outputTimer = null; loadOutput(); }, wait);
}

/// Reads and shows the output tail of the task shown (its last lines, oldest first).
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

/// The task shown reported progress: its history is read again (at most every 2 s).
function historyChanged() {
  if (state.historyTimer) return;
  const wait = Math.max(0, state.historyAt + 2000 - performance.now());
  state.historyTimer = setTimeout(() => { state.historyTimer = null; loadHistory(); }, wait);
}

/// The points to ask for: about one per 3 pixels of the chart, times the zoom.
function fitHistory() {
  const width = $("chart").clientWidth || 600;
  state.points = clampPoints((width / 3) * state.zoom);
}

/// Reads and draws the history of the task shown (in the page's language: also after a
/// change of language).
export async function loadHistory() {
  const id = state.detailID;
  if (!id) return;
  state.historyAt = performance.now();
  const points = state.points;
  $("zoom-in").disabled = points >= MAX_POINTS;
  $("zoom-out").disabled = points <= MIN_POINTS;
  setText($("zoom-text"), tn("points", points));
  try {
    const history = await request("GET", `/v1/tasks/${encodeURIComponent(id)}/history?max_points=${points}`);
    if (state.detailID !== id) return;
    const task = model.get(id);
    // An unfinished task's line runs to now.
    const until = task && !isFinished(task) ? new Date() : null;
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
  const before = state.points;
  state.points = clampPoints(state.points * factor);
  const width = $("chart").clientWidth || 600;
  state.zoom = state.points / (width / 3);
  if (state.points !== before) loadHistory();
}
