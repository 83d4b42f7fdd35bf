// What each message of the event stream changes: the model, the list's rows and held tasks,
// the children lists of open parents, the detail view, the tabs' counts, and what screen
// readers hear. connection.js receives the messages; this module applies them.

import { childrenChanged, collapse, isExpanded } from "./children.js";
import { announce } from "./dom.js";
import { detailDeleted, detailID, taskChanged } from "./detail.js";
import { scheduleRender } from "./frame.js";
import { t } from "./i18n.js";
import * as list from "./list.js";
import { isDrawn } from "./rows.js";
import { scheduleCounts } from "./tabs.js";
import { displayName, isolate } from "./wording.js";

/// Events that can change which tasks a listing holds.
const MEMBERSHIP = new Set(["task.created", "task.finished", "task.stalled", "task.recovered", "task.deleted"]);

let model = null;

/// `model`: the TaskModel the events change.
export function initEvents({ model: taskModel }) { model = taskModel; }

/// A fresh connection's snapshot: the matching unfinished tasks and those finished lately.
export function applySnapshot(tasks) {
  for (const task of tasks) {
    if (model.wasDeleted(task.id)) continue;
    if (task.parent_id) model.parents.add(task.parent_id);
    const before = model.get(task.id);
    if (!list.matches(task) && !before) continue;
    // A stream switched to the detail task starts with a snapshot: what changed since the
    // view read it (its output, its history) is read again, as an event would have it.
    if (model.put(task, true) && task.id === detailID()) taskChanged(before, task);
    if (list.isShown(task.id) && !list.matches(task)) list.leave(task.id); else list.arrived(task);
  }
  list.refreshList();
  list.readLingering();
  scheduleRender();
}

/// One task event (`type`, the task or, deleted, `{id}`).
export function applyTaskEvent(type, data) {
  // The tab counts follow every change of state, shown on this page or not.
  if (MEMBERSHIP.has(type)) scheduleCounts();
  if (type === "task.deleted") {
    model.markDeleted(data.id);
    list.leave(data.id);
    collapse(data.id);
    list.unhold(data.id);
    if (data.id === detailID()) detailDeleted(data.id);
    list.scheduleRefresh();
    scheduleRender();
    return;
  }
  // The id is used again: what was deleted before no longer stands in its way.
  if (type === "task.created") model.deleted.delete(data.id);
  if (model.wasDeleted(data.id)) return;
  if (data.parent_id && model.get(data.parent_id)) {
    model.parents.add(data.parent_id);
    childrenChanged(data.parent_id);
    model.dirty.add(data.parent_id);
  }
  const before = model.get(data.id);
  const parentOpen = data.parent_id && (isExpanded(data.parent_id) || data.parent_id === detailID());
  // A task the page neither shows nor would show is not kept.
  if (!before && !parentOpen && data.id !== detailID() && !list.matches(data)) {
    if (list.isHeld(data.id)) { list.unhold(data.id); scheduleRender(); }
    return;
  }
  const changed = model.put(data, true);
  if (data.id === detailID() && changed) taskChanged(before, data);
  if (isDrawn(data.id) && before) {
    if (type === "task.finished") announce(t("announceFinished", { name: isolate(displayName(data)), state: t(`state_${data.state}`) }));
    else if (type === "task.stalled") announce(t("announceStalled", { name: isolate(displayName(data)) }));
    else if (type === "task.recovered") announce(t("announceRecovered", { name: isolate(displayName(data)) }));
    else if (type === "task.overdue") announce(t("announceOverdue", { name: isolate(displayName(data)) }));
    else if (type === "task.too_quick") announce(t("announceTooQuick", { name: isolate(displayName(data)) }));
  }
  if (list.isShown(data.id)) {
    if (!list.matches(data)) list.leave(data.id);
    else if (MEMBERSHIP.has(type)) list.scheduleRefresh();
  } else if (list.isHeld(data.id)) {
    if (!list.matches(data)) list.unhold(data.id);
  } else if (list.matches(data)) {
    list.arrived(data);
  }
  scheduleRender();
}
