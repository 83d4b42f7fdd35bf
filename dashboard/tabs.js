// The filter tabs and their counts. The counts come from GET /v1/tasks/summary, read with
// every listing and polled between listings (subscription.js nextCountsRead: every 2 s
// while they change, up to 3 s when quiet, 30 s in a hidden tab): the stream follows only
// the tasks on the page, so a change of the counts is how the page hears of the others —
// a new task, one finished elsewhere — and reads its page again. The pressed tab's count
// is the list's own (listing.js listCount): it always agrees with the rows below it,
// drawn in the same frame.

import { APIError, request } from "./api.js";
import { setAttr, setText } from "./dom.js";
import { tabCounts } from "./facts.js";
import { scheduleRender } from "./frame.js";
import { formatInteger, t, tn } from "./i18n.js";
import { COUNTS_POLL_MS, nextCountsRead } from "./subscription.js";

/// At most one summary read per REFRESH_MS while changes come.
const REFRESH_MS = 2000;

const state = {
  /// The counts (facts.js tabCounts), null until read or when the server has no summary.
  counts: null,
  timer: null,
  readAt: 0,
  /// How long the poll waited last.
  pollWait: COUNTS_POLL_MS,
  pollTimer: null,
  /// Whether the counts are polled (not while the page waits for a token).
  polling: false,
};
let hooks = { onRead() {}, onTokenRefused() {}, onChanged() {} };

/// `onRead()`: new counts to draw; `onTokenRefused(error)`: the server refused the token;
/// `onChanged(read)`: the poll found the counts changed (the page is read again, with
/// these counts).
export function initTabs(handlers) {
  hooks = handlers;
  document.addEventListener("visibilitychange", () => { if (!document.hidden && state.polling) pollCounts(COUNTS_POLL_MS); });
}

/// Reads the counts; resolves with `{counts}` (null counts: a server without the summary
/// route), `{refused: error}` for a refused token, or `{}` when the server could not be
/// reached (the counts shown stay). Never rejects.
export async function fetchCounts() {
  clearTimeout(state.timer);
  state.timer = null;
  state.readAt = performance.now();
  try {
    const [summary, roots] = await Promise.all([request("GET", "/v1/tasks/summary"),
                                                request("GET", "/v1/tasks/summary?root=true")]);
    return { counts: tabCounts(summary, roots) };
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return { refused: error };
    return error instanceof APIError ? { counts: null } : {};
  }
}

/// Whether `read` holds counts other than those kept.
function differs(read) {
  return read.counts !== undefined && JSON.stringify(read.counts) !== JSON.stringify(state.counts);
}

/// Keeps what `fetchCounts` read (drawn with the next `drawTabs`); the poll waits again
/// from this read.
export function takeCounts(read) {
  const changed = differs(read);
  if (read.counts !== undefined) state.counts = read.counts;
  if (state.polling) {
    pollCounts(nextCountsRead({ previous: state.pollWait, changed, failed: read.counts === undefined, hidden: document.hidden }));
  }
}

/// Polls the counts in `wait` ms (and on from there); a change makes the page read its
/// listing again (`onChanged`).
export function pollCounts(wait) {
  state.polling = true;
  clearTimeout(state.pollTimer);
  state.pollWait = wait;
  state.pollTimer = setTimeout(() => { state.pollTimer = null; readCounts(); }, wait);
}

/// Stops the poll (the page needs a token).
export function stopCounts() {
  state.polling = false;
  clearTimeout(state.pollTimer);
  state.pollTimer = null;
  clearTimeout(state.timer);
  state.timer = null;
}

/// Reads the counts alone, soon (at most once per REFRESH_MS): a change on the page.
export function scheduleCounts() {
  if (state.timer) return;
  const wait = Math.max(150, state.readAt + REFRESH_MS - performance.now());
  state.timer = setTimeout(() => { state.timer = null; readCounts(); }, wait);
}

/// Reads the counts alone: changed, the page is read again with them; else they are drawn.
async function readCounts() {
  const read = await fetchCounts();
  if (!state.polling) return;
  if (read.refused) return hooks.onTokenRefused(read.refused);
  if (differs(read)) return hooks.onChanged(read);
  takeCounts(read);
  hooks.onRead();
  scheduleRender();
}

/// Draws the tabs' counts, each with its accessible wording; the pressed tab `filter` shows
/// `listCount` when it is known (a number).
export function drawTabs(filter, listCount) {
  for (const button of document.querySelectorAll("[data-filter]")) {
    const name = button.dataset.filter;
    const count = name === filter && typeof listCount === "number" ? listCount : state.counts?.[name];
    setText(button.querySelector(".count"), typeof count === "number" ? formatInteger(count) : "");
    const label = t(button.querySelector("[data-i18n]").dataset.i18n);
    setAttr(button, "aria-label", typeof count === "number" ? tn("tabCount", count, { label }) : null);
  }
}

/// Presses the tab `filter` (the others released).
export function pressTab(filter) {
  for (const button of document.querySelectorAll("[data-filter]")) {
    button.setAttribute("aria-pressed", String(button.dataset.filter === filter));
  }
}
