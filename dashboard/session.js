// Getting in: what the token allows (GET /v1/token), the token form when one is needed or
// was refused, and starting (or starting again) the stream and the list.

import { APIError, looksLikeToken, request, storeToken, storedToken } from "./api.js";
import { setCanCancel } from "./actions.js";
import { connect, connectionKind, connectionLost, disconnect, retryLater, setConnection, streaming } from "./connection.js";
import { detailID } from "./detail.js";
import { $, setText, showView } from "./dom.js";
import { scheduleRender } from "./frame.js";
import { t } from "./i18n.js";
import { cancelRefresh, minDuration, refreshList } from "./list.js";
import { markAllDirty } from "./rows.js";
import { COUNTS_POLL_MS } from "./subscription.js";
import { pollCounts, stopCounts } from "./tabs.js";
import { setAdmin, webhooksShown } from "./webhooks.js";

let started = false;

/// Wires the token form.
export function initSession() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!looksLikeToken(token)) { setText($("token-error"), t("tokenMalformed")); return; }
    storeToken(token);
    $("token-input").value = "";
    start();
  });
}

/// Shows the token form with `message` (if any); the stream and every retry stop.
function needToken(message) {
  setAdmin(false);
  disconnect();
  cancelRefresh();
  stopCounts();
  setConnection("signedOut");
  showView("token-view");
  setText($("token-error"), message || "");
  $("token-input").focus();
}

/// The server refused the token (revoked, expired): it is forgotten and the form shown.
export function tokenRefused(error) {
  const had = storedToken();
  storeToken("");
  needToken(had ? t("tokenRefused", { detail: error.message }) : "");
}

/// Asks what the token allows, then opens the stream and reads the list; while the daemon
/// is away, tries again every 3 s (`quiet`: a retry, which leaves the view as it is).
export async function start({ quiet = false } = {}) {
  let grant;
  try {
    grant = await request("GET", "/v1/token");
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    // The daemon is away: keep trying (the stream retries by itself while it can).
    connectionLost();
    retryLater(() => start({ quiet: true }));
    if (!started && !quiet) showView("list-view");
    return;
  }
  if (!grant.scopes.includes("read")) {
    // No token while tokens are required, or one that cannot read: back to the form.
    if (storedToken()) { storeToken(""); return needToken(t("tokenNoRead")); }
    return needToken("");
  }
  setCanCancel(grant.scopes.includes("control"));
  setText($("token-error"), "");
  if (($("token-view").hidden === false || !started) && !webhooksShown()) showView(detailID() ? "detail-view" : "list-view");
  setAdmin(grant.scopes.includes("admin"));
  if (connectionKind() === "signedOut") setConnection("connecting");
  started = true;
  if (!streaming()) connect({ minDuration: minDuration() });
  // The counts are polled from now on: they tell of the tasks the stream does not follow.
  pollCounts(COUNTS_POLL_MS);
  refreshList();
  markAllDirty();
  scheduleRender();
}
