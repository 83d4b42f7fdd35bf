// Talking to headwayd: the token (kept in sessionStorage) and JSON requests with
// `Authorization: Bearer` (the event stream carries it as `access_token=`, the one route
// where the API allows it, since EventSource cannot send headers: subscription.js).

const TOKEN_KEY = "headway.token";

/// A reply that was not 2xx, with the problem document's code and detail when there is one.
export class APIError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code || null;
    /// The problem document, if the reply was one (its `errors` name the fields refused).
    this.problem = problem ?? null;
  }
}

export function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

export function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage refused: the token lives as long as the page */ }
}

/// Whether `text` has a token's form (`hw_` and 43 base64url characters).
export function looksLikeToken(text) { return /^hw_[A-Za-z0-9_-]{43}$/.test(text); }

/// `fetch` of a JSON route; resolves to the parsed body (null for 204), rejects with APIError.
export async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body ?? {});
  }
  const reply = await fetch(path, init);
  const text = await reply.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
  if (!reply.ok) throw new APIError(reply.status, parsed);
  return parsed;
}
