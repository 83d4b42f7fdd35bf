// The event stream (EventSource) and the connection state it gives the page: connecting,
// live, reconnecting, offline (away for more than 10 s) or signed out. Offline the whole
// page says so: indicators stand still (style.css, by the body's data-connection) and a note
// says why the actions wait. What the events change is for events.js.

import { eventsURL } from "./api.js";
import { $, announce, setText } from "./dom.js";
import { scheduleRender, stats } from "./frame.js";
import { formatClock, t } from "./i18n.js";

/// A stream away this long is shown offline.
const OFFLINE_AFTER_MS = 10_000;
const TASK_EVENTS = ["task.created", "task.updated", "task.stalled", "task.recovered", "task.cancel_requested",
  "task.finished", "task.deleted", "task.overdue", "task.too_quick"];

const state = {
  /// "connecting", "live", "reconnecting", "offline" or "signedOut".
  kind: "connecting",
  /// When (Date.now) the stream was lost, while it is away.
  lostAt: null,
  source: null,
  lastEventID: "",
  retryTimer: null,
};
let hooks = { onSnapshot() {}, onTaskEvent() {}, onOfflineChanged() {}, onClosed() {} };

/// `onSnapshot(tasks)`, `onTaskEvent(type, task)`: what the stream sends; `onOfflineChanged()`:
/// the page went offline or came back (every row is drawn again); `onClosed()`: the stream
/// was refused and the page should start again (`retryLater`).
export function initConnection(handlers) { hooks = handlers; }

/// Whether the event stream is away (closed and not yet back): the page's figures are as
/// of then, its indicators stand still and its actions wait.
export function offline() { return state.kind === "reconnecting" || state.kind === "offline"; }

export function connectionKind() { return state.kind; }

/// Whether a stream is open or opening.
export function streaming() { return state.source !== null && state.source.readyState !== EventSource.CLOSED; }

export function setConnection(kind) {
  const wasOffline = offline();
  state.kind = kind;
  const node = $("connection");
  node.dataset.state = kind;
  const since = state.lostAt ? formatClock(new Date(state.lostAt)) : "";
  const text = kind === "offline" ? t("offlineSince", { time: since }) : t(kind);
  if ($("connection-text").textContent !== text) {
    $("connection-text").textContent = text;
    if (kind !== "connecting") announce(text);
  }
  document.body.dataset.connection = kind;
  const note = $("offline-note");
  note.hidden = !offline();
  setText(note, kind === "offline" ? t("offlineNote", { time: since }) : offline() ? t("reconnectingNote") : "");
  if (wasOffline !== offline()) hooks.onOfflineChanged();
  scheduleRender();
}

/// The stream (or the daemon) is away: reconnecting, and offline after a while (`tick`).
export function connectionLost() {
  if (state.kind === "live" || state.kind === "connecting") {
    state.lostAt ??= Date.now();
    setConnection("reconnecting");
  }
}

/// Once a second: a stream away for OFFLINE_AFTER_MS is shown offline.
export function tick() {
  if (state.kind === "reconnecting" && state.lostAt && Date.now() - state.lostAt > OFFLINE_AFTER_MS) {
    setConnection("offline");
  }
}

/// Calls `fn` in 3 s (once: a later call replaces an earlier one).
export function retryLater(fn) {
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(fn, 3000);
}

/// Closes the stream and stops retrying (the page needs a token).
export function disconnect() {
  if (state.source) { state.source.close(); state.source = null; }
  clearTimeout(state.retryTimer);
  state.lostAt = null;
}

/// Opens the stream with `minDuration`, resuming after the last event id seen unless `fresh`.
export function connect({ minDuration, fresh = false }) {
  clearTimeout(state.retryTimer);
  if (state.source) state.source.close();
  if (fresh) state.lastEventID = "";
  const source = new EventSource(eventsURL(minDuration, state.lastEventID));
  state.source = source;
  source.onopen = () => {
    state.lostAt = null;
    setConnection("live");
  };
  source.onerror = () => {
    if (source !== state.source) return;
    connectionLost();
    // Refused (not a stream): in a while, see whether the token is the reason, and try again.
    if (source.readyState === EventSource.CLOSED) hooks.onClosed();
  };
  source.addEventListener("snapshot", (event) => {
    let data;
    try { data = JSON.parse(event.data); } catch { return; }
    if (event.lastEventId) state.lastEventID = event.lastEventId;
    hooks.onSnapshot(data.tasks);
  });
  const onTaskEvent = (event) => {
    stats.events += 1;
    let data;
    try { data = JSON.parse(event.data); } catch { return; }
    if (event.lastEventId) state.lastEventID = event.lastEventId;
    hooks.onTaskEvent(event.type, data);
  };
  for (const name of TASK_EVENTS) source.addEventListener(name, onTaskEvent);
}
