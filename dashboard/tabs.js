// The filter tabs and their counts. The counts come from GET /v1/tasks/summary (read with
// every listing, and after changes off the list at most once per 2 s), except the pressed
// tab's, which is the list's own (listing.js listCount): it always agrees with the rows
// below it, drawn in the same frame.

import { APIError, request } from "./api.js";
import { setAttr, setText } from "./dom.js";
import { tabCounts } from "./facts.js";
import { scheduleRender } from "./frame.js";
import { formatInteger, t, tn } from "./i18n.js";

/// At most one summary read per REFRESH_MS while changes come.
const REFRESH_MS = 2000;

const state = {
  /// The counts (facts.js tabCounts), null until read or when the server has no summary.
  counts: null,
  timer: null,
  readAt: 0,
};
let hooks = { onRead() {}, onTokenRefused() {} };

/// `onRead()`: new counts to draw; `onTokenRefused(error)`: the server refused the token.
export function initTabs(handlers) { hooks = handlers; }

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

/// Keeps what `fetchCounts` read (drawn with the next `drawTabs`).
export function takeCounts(read) {
  if (read.counts !== undefined) state.counts = read.counts;
}

/// Reads the counts alone, soon (at most once per REFRESH_MS): a change off the list.
export function scheduleCounts() {
  if (state.timer) return;
  const wait = Math.max(150, state.readAt + REFRESH_MS - performance.now());
  state.timer = setTimeout(async () => {
    state.timer = null;
    const read = await fetchCounts();
    if (read.refused) return hooks.onTokenRefused(read.refused);
    takeCounts(read);
    hooks.onRead();
    scheduleRender();
  }, wait);
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
