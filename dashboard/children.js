// Children under their parent: which parents are open (expanded) in the list, reading a
// parent's children, and drawing them under each open row of the parent and in the detail
// view of the parent.

import { APIError, request } from "./api.js";
import { readLanded, readMark } from "./connection.js";
import { $, announce } from "./dom.js";
import { scheduleRender } from "./frame.js";
import { t } from "./i18n.js";
import { createRow, rowsOf } from "./rows.js";
import { errorText } from "./wording.js";

/// Parents whose children are shown under their rows.
const expanded = new Set();
/// Parents whose children lists must be drawn again.
const dirty = new Set();
let model = null;
let detailID = () => null;
let tokenRefused = () => {};

/// `model`: the TaskModel; `detailID()`: the task of the detail view (its children are
/// drawn there); `onTokenRefused(error)`: the server refused the token.
export function initChildren({ model: taskModel, detailID: currentDetail, onTokenRefused }) {
  model = taskModel;
  detailID = currentDetail;
  tokenRefused = onTokenRefused;
}

export function isExpanded(id) { return expanded.has(id); }

/// The open parents (the model keeps their children).
export function expandedIDs() { return expanded; }

/// The children of `parentID` changed: drawn again at the next frame.
export function childrenChanged(parentID) { dirty.add(parentID); }

/// Forgets `id` as an open parent (deleted).
export function collapse(id) { expanded.delete(id); }

/// Forgets the open parents the model no longer holds.
export function forgetMissing() { for (const id of expanded) if (!model.get(id)) expanded.delete(id); }

/// Opens or closes the children of `id` (its expander).
export function toggleExpanded(id) {
  if (expanded.has(id)) expanded.delete(id);
  else { expanded.add(id); loadChildren(id); }
  model.dirty.add(id);
  dirty.add(id);
  scheduleRender();
}

/// Reads the children of `parentID` into the model (the first 100) and draws them.
export async function loadChildren(parentID) {
  const mark = readMark();
  try {
    const page = await request("GET", `/v1/tasks?parent_id=${encodeURIComponent(parentID)}&page_size=100`);
    for (const task of page.tasks) model.put(task, false);
    readLanded(mark);
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    if (parentID !== detailID()) announce(t("loadFailed", { detail: errorText(error) }));
  }
  dirty.add(parentID);
  model.dirty.add(parentID);
  scheduleRender();
}

/// Draws the children lists marked dirty (of open parents and of the detail task).
export function drawDirty() {
  for (const parentID of dirty) {
    if (expanded.has(parentID) || parentID === detailID()) reconcileChildren(parentID);
  }
  dirty.clear();
}

/// Whether a frame has children lists to draw.
export function hasDirty() { return dirty.size > 0; }

/// Draws the children of `parentID` under each of its rows that is open, and in the
/// detail view when it shows the parent.
export function reconcileChildren(parentID) {
  const children = model.childrenOf(parentID);
  const inDetail = parentID === detailID();
  const containers = inDetail ? [$("detail-children")] : [];
  for (const row of rowsOf(parentID)) {
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
  if (inDetail) $("no-children").hidden = children.length > 0;
}
