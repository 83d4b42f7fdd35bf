// The event stream (EventSource) and the connection state it gives the page: connecting,
// live, reconnecting, offline (away for more than 10 s) or signed out. Offline the whole
// page says so: indicators stand still (style.css, by the body's data-connection) and a note
// says why the actions wait. What the events change is for events.js.
//
// The stream names only what the page shows (subscription.js: the rows, the detail task,
// the children of open parents). When that changes (`follow`, each frame) a new stream
// opens, resuming from the last event id the page had (or from before the read that
// brought the new tasks), and the old one is closed once the new one is open: no change
// between them is lost, and what both deliver is applied once (EventLedger).

import { storedToken } from "./api.js";
import { $, announce, setText } from "./dom.js";
import { scheduleRender, stats } from "./frame.js";
import { formatClock, t } from "./i18n.js";
import { EventLedger, NewRootsGate, ResumePoint, changeOf, follows, selectionKey, streamQuery } from "./subscription.js";

/// A stream away this long is shown offline.
const OFFLINE_AFTER_MS = 10_000;
/// At most one new stream per SWITCH_MS for what the page shows (rows coming and going
/// on a busy first page): what changes meanwhile is in the next stream's catch-up.
const SWITCH_MS = 300;
const TASK_EVENTS = ["task.created", "task.updated", "task.stalled", "task.recovered", "task.cancel_requested",
  "task.finished", "task.deleted", "task.overdue", "task.too_quick"];

const state = {
  /// "connecting", "live", "reconnecting", "offline" or "signedOut".
  kind: "connecting",
  /// When (Date.now) the stream was lost, while it is away.
  lostAt: null,
  /// The newest stream: the one the page follows.
  source: null,
  /// The stream it replaces, open until the newest one is.
  previous: null,
  /// What the newest stream names (null: every task), and its key (selectionKey).
  selection: null,
  key: null,
  minDuration: 2,
  retryTimer: null,
  resume: new ResumePoint(),
  ledger: new EventLedger(),
  newRoots: new NewRootsGate(),
  /// When (performance.now) the newest stream was opened.
  openedAt: -Infinity,
  /// A look again at what the page shows, once a switch is allowed.
  followTimer: null,
};
let hooks = { onSnapshot() {}, onTaskEvent() {}, onOfflineChanged() {}, onClosed() {}, selection: () => null };

/// `onSnapshot(tasks)`, `onTaskEvent(type, task)`: what the stream sends; `onOfflineChanged()`:
/// the page went offline or came back (every row is drawn again); `onClosed()`: the stream
/// was refused and the page should start again (`retryLater`); `selection()`: what the page
/// shows now (subscription.js streamSelection).
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

/// Closes the streams and stops retrying (the page needs a token).
export function disconnect() {
  closeStreams();
  clearTimeout(state.retryTimer);
  state.lostAt = null;
}

function closeStreams() {
  for (const source of [state.source, state.previous]) source?.close();
  state.source = null;
  state.previous = null;
}

/// Opens the stream of what the page shows with `minDuration`, resuming where the page is
/// unless `fresh` (a snapshot then).
export function connect({ minDuration, fresh = false }) {
  clearTimeout(state.retryTimer);
  closeStreams();
  state.minDuration = minDuration;
  if (fresh) state.resume.started(null);
  open(hooks.selection());
}

/// Follows what the page shows now: when it differs from what the stream names, a new
/// stream opens from where the page is, and the old one closes when it is open.
export function follow() {
  if (state.source === null) return;
  const selection = hooks.selection();
  if (selectionKey(selection) === state.key) return;
  const wait = state.openedAt + SWITCH_MS - performance.now();
  if (wait > 0) {
    // Too soon after the last one: looked at again when a switch is allowed.
    state.followTimer ??= setTimeout(() => { state.followTimer = null; follow(); }, wait);
    return;
  }
  // A newer stream not yet open is replaced; the one open stays until its successor is.
  if (state.source.readyState === EventSource.OPEN) {
    state.previous?.close();
    state.previous = state.source;
  } else {
    state.source.close();
  }
  open(selection);
}

/// Whether the page may ask for new top-level tasks' creations now (not during a flood of
/// them: NewRootsGate).
export function asksNewRoots() { return state.newRoots.open(performance.now()); }

/// The mark of a read of the API about to be sent (pass it to `readLanded`).
export function readMark() { return state.resume.mark(); }

/// A read sent at `mark` has put its tasks on the page: the next stream resumes from no
/// later than its mark, so what changed since the read is not missed.
export function readLanded(mark) { state.resume.landed(mark); }

/// Forgets what was applied of tasks `keep(id)` does not want (the page no longer holds them).
export function forgetApplied(keep) { state.ledger.prune(keep); }

function open(selection) {
  const resumeFrom = state.resume.resumeFrom();
  const { query, whole } = streamQuery({ selection, minDuration: state.minDuration, resumeFrom, token: storedToken() });
  state.key = selectionKey(selection);
  state.selection = whole ? null : selection;
  stats.wholeStream = whole;
  state.resume.started(resumeFrom);
  const source = new EventSource(`/v1/events?${query}`);
  state.source = source;
  state.openedAt = performance.now();
  stats.streamsOpened += 1;
  stats.streamURL = source.url;
  const current = () => source === state.source;
  const live = () => current() || source === state.previous;
  source.onopen = () => {
    if (!current()) return;
    state.previous?.close();
    state.previous = null;
    state.lostAt = null;
    setConnection("live");
  };
  source.onerror = () => {
    if (!current()) {
      // The stream being replaced failed: its successor carries on.
      if (source === state.previous) { source.close(); state.previous = null; }
      return;
    }
    connectionLost();
    // Refused (not a stream): in a while, see whether the token is the reason, and try again.
    if (source.readyState === EventSource.CLOSED) {
      state.previous?.close();
      state.previous = null;
      hooks.onClosed();
    }
  };
  source.addEventListener("snapshot", (event) => {
    if (!live()) return;
    let data;
    try { data = JSON.parse(event.data); } catch { return; }
    if (current()) state.resume.delivered(event.lastEventId);
    const change = changeOf(event.lastEventId);
    hooks.onSnapshot(data.tasks.filter((task) => state.ledger.take(task.id, change)));
  });
  const onTaskEvent = (event) => {
    if (!live()) return;
    let data;
    try { data = JSON.parse(event.data); } catch { return; }
    if (current()) state.resume.delivered(event.lastEventId);
    const change = changeOf(event.lastEventId);
    if (!state.ledger.take(data.id, change)) { stats.duplicates += 1; return; }
    // A new task the stream does not follow (its creation came by new_roots): once the
    // page shows it, the next stream resumes from its creation, so its changes since are
    // heard (a creation held back by min_duration has no id of its own: the listing read
    // again after it arrives brings it up to date).
    if (!follows(state.selection, data)) {
      state.resume.landed(change);
      if (event.type === "task.created" && !data.parent_id) state.newRoots.note(performance.now());
    }
    stats.events += 1;
    hooks.onTaskEvent(event.type, data);
  };
  for (const name of TASK_EVENTS) source.addEventListener(name, onTaskEvent);
}
