// Cancel and Terminate from a task's rows: the confirmation each asks first, the requests,
// and what the page remembers meanwhile (the tasks it is canceling, when each cancel was
// asked, a failed action's words). rows.js draws the buttons from `viewOf`.

import { APIError, request } from "./api.js";
import { announce, listRow } from "./dom.js";
import { actionsOf, isFinished } from "./facts.js";
import { scheduleRender } from "./frame.js";
import { t } from "./i18n.js";
import { errorText } from "./wording.js";

const state = {
  /// Whether the token has the control scope.
  canCancel: true,
  /// Tasks this page asked to cancel and has not seen finish.
  canceling: new Set(),
  /// What each open confirmation asks: "cancel" or "terminate", by task id.
  confirming: new Map(),
  /// When (performance.now) this page asked to cancel each task, or first saw it asked:
  /// Terminate is offered once the cancel has gone unanswered for 10 s.
  cancelAskedAt: new Map(),
  /// A failed action's words, shown in the task's rows, by task id.
  actionErrors: new Map(),
};
let model = null;
let tokenRefused = () => {};

/// `model`: the TaskModel; `onTokenRefused(error)`: the server refused the token.
export function initActions({ model: taskModel, onTokenRefused }) {
  model = taskModel;
  tokenRefused = onTokenRefused;
}

export function setCanCancel(allowed) { state.canCancel = allowed; }

/// The ids of tasks being canceled (the model keeps them).
export function cancelingIDs() { return state.canceling; }

/// Notes what `task` says about its cancel (drawn at `now`, performance.now): a finished
/// task is done with; a cancel asked elsewhere starts Terminate's wait.
export function observe(task, now) {
  if (isFinished(task)) {
    state.canceling.delete(task.id);
    state.confirming.delete(task.id);
    state.cancelAskedAt.delete(task.id);
  } else if (task.cancel_requested && !state.cancelAskedAt.has(task.id)) {
    state.cancelAskedAt.set(task.id, now);
  }
}

/// What the rows of `task` offer at `now` (facts.js actionsOf), and a failed action's words.
export function viewOf(task, now) {
  return {
    ...actionsOf(task, {
      canCancel: state.canCancel, askedHere: state.canceling.has(task.id), asking: state.confirming.get(task.id),
      askedAt: state.cancelAskedAt.get(task.id), now,
    }),
    error: state.actionErrors.get(task.id) ?? "",
  };
}

/// Opens the confirmation of `kind` ("cancel" or "terminate") on the task's rows.
export function askToConfirm(id, kind) {
  state.confirming.set(id, kind);
  state.actionErrors.delete(id);
  model.dirty.add(id);
  scheduleRender();
}

/// Closes the task's confirmation ("Keep running"); returns what it asked.
export function dismiss(id) {
  const kind = state.confirming.get(id);
  state.confirming.delete(id);
  model.dirty.add(id);
  scheduleRender();
  return kind;
}

/// Does what the task's confirmation asked ("Yes").
export function confirm(id) {
  if (state.confirming.get(id) === "terminate") terminateTask(id); else cancelTask(id);
}

/// The focus, on a confirmation button that is gone, moves to the task's link.
function focusTaskLink(id) {
  requestAnimationFrame(() => {
    const row = document.activeElement?.closest?.("li.task") ?? listRow(id);
    (row?.querySelector(".name") ?? listRow(id)?.querySelector(".name"))?.focus();
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

/// Forgets what is remembered of tasks the model no longer holds.
export function forgetMissing() {
  for (const id of state.confirming.keys()) if (!model.get(id)) state.confirming.delete(id);
  for (const id of state.cancelAskedAt.keys()) if (!model.get(id)) state.cancelAskedAt.delete(id);
  for (const id of state.actionErrors.keys()) if (!model.get(id)) state.actionErrors.delete(id);
}
