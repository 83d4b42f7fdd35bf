// The dashboard's entry: a page of tasks kept live by the event stream. It makes the model,
// hands it to the views (list.js, detail.js, children.js, rows.js) and the stream
// (connection.js, events.js), and draws each frame: events change the model only; the DOM
// is brought up to date at most once per animation frame, and only the rows on the page
// whose task changed are touched.

import { initActions, cancelingIDs, forgetMissing as forgetActions } from "./actions.js";
import {
  expandedIDs, forgetMissing as forgetExpanded, hasDirty as childrenDirty, drawDirty as drawChildren, initChildren,
  isExpanded, toggleExpanded,
} from "./children.js";
import * as connection from "./connection.js";
import { detailID, drawFields, initDetail, loadHistory, route } from "./detail.js";
import { $, setText } from "./dom.js";
import { applySnapshot, applyTaskEvent, initEvents } from "./events.js";
import { scheduleRender, setDraw, stats } from "./frame.js";
import { currentLanguage, initialLanguage, setLanguage, t } from "./i18n.js";
import * as list from "./list.js";
import { TaskModel } from "./model.js";
import { drawDirty as drawRows, forgetDetachedRows, initRows, markAllDirty, renderedCounts } from "./rows.js";
import { initSession, start, tokenRefused } from "./session.js";
import { streamSelection } from "./subscription.js";
import { initTabs } from "./tabs.js";
import { initWebhooks, relabelWebhooks, routeWebhooks } from "./webhooks.js";

const model = new TaskModel();

/// Keeps the model to what the page shows: the list's rows, the children of open parents,
/// the detail task and its children, and the tasks being canceled. Rows no longer in the
/// document are forgotten.
function prune() {
  const keep = new Set(list.rowIDs());
  const shown = detailID();
  if (shown) keep.add(shown);
  for (const id of cancelingIDs()) keep.add(id);
  const parents = new Set(expandedIDs());
  if (shown) parents.add(shown);
  model.prune((task) => keep.has(task.id) || (task.parent_id !== null && parents.has(task.parent_id)));
  connection.forgetApplied((id) => model.get(id) !== undefined);
  forgetExpanded();
  forgetActions();
  forgetDetachedRows();
  list.trimHeld();
}

/// What the event stream names: the list's rows, the detail task, the open parents (their
/// children) and the tasks being canceled — those the page holds (a detail link to a task
/// it may not see names nothing) —, and new top-level tasks while the list is on a first
/// page they would join (unless they come in a flood: the counts then tell of them).
function selection() {
  const shown = detailID();
  return streamSelection({
    rows: list.rowIDs(),
    detail: shown && model.get(shown) ? shown : null,
    expanded: [...expandedIDs()].filter((id) => model.get(id)),
    others: [...cancelingIDs()].filter((id) => model.get(id)),
    newRoots: list.joinsNewTasks() && connection.asksNewRoots(),
  });
}

/// One frame: the changed tasks' rows (and the detail fields), the list, the tabs' counts,
/// the open children lists; rows the reconciliation took out of the document are forgotten now,
/// not at the next event or page: a list left alone keeps no row it no longer shows. Then
/// the stream follows what the page shows.
function draw() {
  drawRows((id, task) => { if (id === detailID()) drawFields(task); });
  const listDrawn = list.drawList();
  list.drawCounts();
  const reconciling = listDrawn || childrenDirty();
  drawChildren();
  if (reconciling) forgetDetachedRows();
  connection.follow();
}

/// Once a second: rows that lingered their minute leave, every row's ages are drawn again,
/// a stream away long enough is offline.
function tick() {
  list.tick();
  markAllDirty();
  connection.tick();
  prune();
  scheduleRender();
}

/// The language changed: every word drawn again.
function relabel() {
  markAllDirty();
  list.markDirty();
  connection.setConnection(connection.connectionKind());
  setText($("search-hint"), t("searchHint"));
  if (detailID()) loadHistory();
  relabelWebhooks();
  scheduleRender();
}

/// Shows what the location names: the webhook page (`#webhooks`), a task's detail view
/// (`#task=ID`) or the list.
function routeAll() {
  if (!routeWebhooks()) route();
}

/// The setting "Hide tasks shorter than": from `?min_duration=` or the field, checked
/// (0–86400 s); a new value reconnects the stream with it and reads the list again.
function setUpMinDuration() {
  const field = $("min-duration");
  const fromQuery = new URLSearchParams(location.search).get("min_duration");
  if (fromQuery !== null && /^\d+(\.\d+)?$/.test(fromQuery) && Number(fromQuery) <= 86400) field.value = fromQuery;
  field.addEventListener("change", () => {
    const value = Number(field.value);
    if (field.value === "" || !Number.isFinite(value) || value < 0 || value > 86400) {
      field.setCustomValidity("0–86400");
      field.reportValidity();
      return;
    }
    field.setCustomValidity("");
    list.setMinDuration(value);
    connection.connect({ minDuration: value, fresh: true });
    list.refreshList();
  });
  return Number(field.value);
}

function setUpLanguage() {
  let stored = null;
  try { stored = localStorage.getItem("headway.language"); } catch { stored = null; }
  setLanguage(initialLanguage(location.search, stored, navigator.language));
  $("language").value = currentLanguage();
  $("language").addEventListener("change", (event) => {
    setLanguage(event.target.value);
    try { localStorage.setItem("headway.language", event.target.value); } catch { /* not kept */ }
    relabel();
  });
}

/// Counters for measurements (bench/dashboard.py and the tests read `window.headwayStats`).
Object.defineProperties(stats, {
  modelTasks: { get: () => model.tasks.size },
  modelFinished: { get: () => model.finishedSeen.size },
  renderedIDs: { get: () => renderedCounts().ids },
  renderedRows: { get: () => renderedCounts().rows },
  domRows: { get: () => document.querySelectorAll("li.task").length },
});
window.headwayStats = stats;

setUpLanguage();
const minDuration = setUpMinDuration();
initActions({ model, onTokenRefused: tokenRefused });
initRows({ model, isExpanded, onToggle: toggleExpanded });
initChildren({ model, detailID, onTokenRefused: tokenRefused });
initTabs({ onRead: list.markDirty, onTokenRefused: tokenRefused, onChanged: (counts) => list.refreshList({ counts }) });
list.initList({ model, onTokenRefused: tokenRefused, prune, minDuration });
initDetail({
  model, onTokenRefused: tokenRefused,
  onClosed() { list.markDirty(); scheduleRender(); prune(); },
});
initEvents({ model });
connection.initConnection({
  onSnapshot: applySnapshot,
  onTaskEvent: applyTaskEvent,
  onOfflineChanged: markAllDirty,
  onClosed: () => connection.retryLater(() => start({ quiet: true })),
  selection,
});
initWebhooks({ onTokenRefused: tokenRefused });
initSession();
setText($("search-hint"), t("searchHint"));
setDraw(draw);
window.addEventListener("hashchange", routeAll);
setInterval(tick, 1000);
start();
routeAll();
