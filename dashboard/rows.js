// A task's row, wherever it shows (the list, under an open parent, the detail view): made
// once, then brought up to its task, touching only what differs. Keeps which rows are drawn
// for each task id, so a change to a task redraws exactly its rows.

import * as actions from "./actions.js";
import { offline } from "./connection.js";
import { element, setAttr, setNamed, setText } from "./dom.js";
import { badgeOf, isFinished, lastSignalAge, percentOf, secondsLeft } from "./facts.js";
import { stats } from "./frame.js";
import { formatDuration, formatPercentText, t } from "./i18n.js";
import { hasChildren } from "./model.js";
import {
  amountText, badgeText, childrenText, countText, displayName, plain, rateText, runTimeText, stallText, valueText,
  whenText,
} from "./wording.js";

/// Row elements drawn for each task id (its list row, a child row, the detail row).
const rendered = new Map();
let model = null;
let isExpanded = () => false;
let toggle = () => {};

/// `model`: the TaskModel; `isExpanded(id)`: the task's children are shown; `onToggle(id)`:
/// its expander was pressed.
export function initRows({ model: taskModel, isExpanded: expanded, onToggle }) {
  model = taskModel;
  isExpanded = expanded;
  toggle = onToggle;
}

/// The rows drawn for `id` (a set, maybe empty).
export function rowsOf(id) { return rendered.get(id) ?? new Set(); }

/// Whether a row is drawn for `id`.
export function isDrawn(id) { return rendered.has(id); }

/// Marks every drawn task dirty (ages, the language or the connection changed).
export function markAllDirty() { for (const id of rendered.keys()) model.dirty.add(id); }

/// Brings the rows of the tasks changed since the last frame up to date; calls `drawn(id,
/// task)` for each changed task that has rows and is still known.
export function drawDirty(drawn) {
  for (const id of model.takeDirty()) {
    const task = model.get(id);
    const views = rendered.get(id);
    if (!views) continue;
    for (const row of [...views]) {
      if (!row.isConnected) { views.delete(row); continue; }
      if (task) { updateRow(row, task); stats.rowUpdates += 1; }
    }
    if (views.size === 0) rendered.delete(id);
    if (task) drawn(id, task);
  }
}

/// Forgets the rendered rows no longer in the document.
export function forgetDetachedRows() {
  for (const [id, views] of rendered) {
    for (const row of views) if (!row.isConnected) views.delete(row);
    if (views.size === 0) rendered.delete(id);
  }
}

/// Counts for measurements: task ids drawn, and rows drawn.
export function renderedCounts() {
  let rows = 0;
  for (const views of rendered.values()) rows += views.size;
  return { ids: rendered.size, rows };
}

/// A new row for `task` (drawn at once).
export function createRow(task) {
  const row = element("li", "task");
  row.dataset.taskId = task.id;
  const line = element("div", "row");
  const expander = element("button", "expander");
  expander.type = "button";
  expander.setAttribute("aria-expanded", "false");
  expander.addEventListener("click", () => toggle(task.id));
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
  for (const name of ["percent", "count", "rate", "eta", "stall", "runtime", "when", "signal"]) facts.append(element("span", name));
  meter.append(bar, activity, facts);
  const buttons = element("div", "actions");
  const cancel = element("button", "cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => actions.askToConfirm(task.id, "cancel"));
  const terminate = element("button", "terminate");
  terminate.type = "button";
  terminate.hidden = true;
  terminate.addEventListener("click", () => actions.askToConfirm(task.id, "terminate"));
  const confirm = element("span", "confirm");
  confirm.setAttribute("role", "group");
  const question = element("span", "question");
  const yes = element("button", "yes");
  yes.type = "button";
  yes.addEventListener("click", () => actions.confirm(task.id));
  const no = element("button", "no");
  no.type = "button";
  confirm.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.preventDefault();
    event.stopPropagation();
    no.click();
  });
  no.addEventListener("click", () => {
    const kind = actions.dismiss(task.id);
    requestAnimationFrame(() => row.querySelector(kind === "terminate" ? ".terminate" : ".cancel")?.focus());
  });
  confirm.append(question, yes, no);
  // A failed action says so here, visibly and in the page's language.
  const failure = element("p", "action-error");
  failure.setAttribute("role", "alert");
  failure.hidden = true;
  buttons.append(cancel, terminate, confirm, failure);
  line.append(expander, info, meter, buttons);
  const children = element("ul", "children tasks");
  children.hidden = true;
  row.append(line, children);
  if (!rendered.has(task.id)) rendered.set(task.id, new Set());
  rendered.get(task.id).add(row);
  updateRow(row, task);
  return row;
}

/// Brings `row` up to `task`, touching only what differs.
export function updateRow(row, task) {
  const now = Date.now();
  const finished = isFinished(task);
  const away = offline();
  row.classList.toggle("finished", finished);
  row.classList.toggle("stalled", task.stalled && !finished);
  // Overdue while running; a finished task keeps its late (or too quick) line, not the colour of its bar.
  row.classList.toggle("overdue", task.overdue && !finished);
  row.dataset.state = task.state;
  setAttr(row, "data-attention", !finished && task.attention ? task.attention : null);
  setText(row.querySelector(".name"), displayName(task));
  setText(row.querySelector(".tid"), task.id);
  setText(row.querySelector(".label"), plain(task.label));
  const badge = row.querySelector(".badge");
  setText(badge, badgeText(task));
  badge.dataset.state = badgeOf(task);
  setText(row.querySelector(".kids"), childrenText(task));
  setText(row.querySelector(".message"), finished ? plain(task.message) : "");

  const expander = row.querySelector(".expander");
  // The detail page's own row lists its children below it: no expander there.
  const inDetail = row.closest("#detail-row") !== null;
  const parent = hasChildren(model, task) && !inDetail;
  expander.classList.toggle("absent", !parent);
  expander.disabled = !parent;
  setAttr(expander, "aria-hidden", parent ? null : "true");
  const open = isExpanded(task.id) && parent;
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
  const left = away ? null : secondsLeft(task, now);
  const percentText = row.querySelector(".percent");
  if (quantified) {
    const fraction = Math.min(1, Math.max(0, task.fraction ?? 0));
    bar.querySelector(".fill").style.transform = `scaleX(${fraction})`;
    setAttr(bar, "aria-valuenow", String(percentOf(fraction)));
    setAttr(bar, "aria-valuetext", valueText(fraction, left));
    setAttr(bar, "aria-label", displayName(task));
    setText(percentText, formatPercentText(fraction));
    setText(row.querySelector(".count"), countText(task));
  } else {
    setText(percentText, finished ? t(`state_${task.state}`) : "");
    setText(row.querySelector(".count"), amountText(task));
    setAttr(activity, "aria-label", displayName(task));
    setAttr(activity, "aria-valuetext", task.stalled ? stallText(task, now) : t("working"));
  }
  setText(row.querySelector(".rate"), rateText(task));
  activity.classList.toggle("stopped", task.stalled || finished);
  bar.classList.toggle("stopped", task.stalled && !finished);
  setText(row.querySelector(".eta"), left !== null ? t("etaLeft", { duration: formatDuration(left) }) : "");
  setText(row.querySelector(".stall"), stallText(task, now));
  setText(row.querySelector(".runtime"), runTimeText(task, now));
  setText(row.querySelector(".when"), whenText(task, now));
  const signal = lastSignalAge(task, now);
  setText(row.querySelector(".signal"), signal !== null ? t("lastSignal", { age: formatDuration(signal, "short") }) : "");
  updateActions(row, task, away);
}

/// The row's Cancel, Terminate, confirmation and failed-action line.
function updateActions(row, task, away) {
  const cancel = row.querySelector(".cancel");
  const terminate = row.querySelector(".terminate");
  const confirm = row.querySelector(".confirm");
  const monotonic = performance.now();
  actions.observe(task, monotonic);
  const view = actions.viewOf(task, monotonic);
  const name = displayName(task);
  cancel.hidden = !view.cancellable || view.confirming;
  // Offline, nothing can be sent: the buttons wait, and say why.
  cancel.disabled = view.canceling || away;
  setAttr(cancel, "title", away ? t("unavailableOffline") : null);
  setAttr(cancel, "aria-describedby", away ? "offline-note" : null);
  setText(cancel, view.canceling ? t("canceling") : t("cancel"));
  setAttr(cancel, "aria-label", t(view.canceling ? "cancelingNamed" : "cancelNamed", { name }));
  terminate.hidden = !view.terminate || view.confirming;
  terminate.disabled = away;
  setAttr(terminate, "title", away ? t("unavailableOffline") : null);
  setAttr(terminate, "aria-describedby", away ? "offline-note" : null);
  setText(terminate, t("terminate"));
  setAttr(terminate, "aria-label", t("terminateNamed", { name }));
  const wasHidden = confirm.hidden;
  confirm.hidden = !view.confirming;
  setNamed(confirm.querySelector(".question"), view.asking === "terminate" ? "terminateConfirm" : "cancelConfirm", name);
  const yes = confirm.querySelector(".yes");
  setText(yes, t(view.asking === "terminate" ? "terminateYes" : "cancelYes"));
  yes.disabled = away;
  setText(confirm.querySelector(".no"), t("cancelNo"));
  const failure = row.querySelector(".action-error");
  failure.hidden = view.error === "";
  setText(failure, view.error);
  // "Keep running" takes the focus: Enter, Enter must not cancel by accident.
  if (view.confirming && wasHidden) requestAnimationFrame(() => confirm.querySelector(".no").focus());
}
