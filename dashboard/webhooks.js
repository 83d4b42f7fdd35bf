// The webhook page (`#webhooks`, admin tokens only): the webhooks, paged; making one with
// its format's fields; sending one a test and showing what came of it; its latest
// deliveries, paged; deleting one after a confirmation. The rules are hooks.js's.

import { APIError, request } from "./api.js";
import { $, announce, element, setAttr, setText, showView } from "./dom.js";
import { currentLanguage, formatInteger, formatWhen, t } from "./i18n.js";
import {
  BUSY_DELAY_MS, EVENTS, FORMATS, FORMAT_FIELDS, OUTCOMES, deliveryPage, outcomeWords, problemFields, shortURL,
  webhookRequest,
} from "./hooks.js";
import { errorText } from "./wording.js";

/// Webhooks shown per page.
const HOOKS_PAGE = 10;
/// The create form's fields that the server may name in a refusal.
const FORM_FIELDS = ["url", "format", "events", "task_prefix", "outcomes", ...FORMAT_FIELDS];

const state = {
  /// Whether the token may manage webhooks (the page and its link show only then).
  admin: false,
  shown: false,
  webhooks: [],
  page: 1,
  /// Per webhook id: {open, deliveries, loads (how many reads of them), page, outcome (words of the last test),
  /// busy, confirming, error}.
  views: new Map(),
  loadSerial: 0,
};
let tokenRefused = () => {};

/// `onTokenRefused(error)`: the server refused the token. Builds the form's choices and wires it.
export function initWebhooks({ onTokenRefused }) {
  tokenRefused = onTokenRefused;
  $("hooks-back").addEventListener("click", () => { location.hash = ""; });
  $("hooks-prev").addEventListener("click", () => { state.page -= 1; drawHooks(); });
  $("hooks-next").addEventListener("click", () => { state.page += 1; drawHooks(); });
  $("hook-format").addEventListener("change", drawFormatFields);
  $("hook-events").addEventListener("change", drawOutcomesEnabled);
  $("hook-form").addEventListener("submit", (event) => { event.preventDefault(); create(); });
  $("hook-secret-copy").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("hook-secret-text").textContent); setText($("hook-secret-copied"), t("hookCopied")); }
    catch { window.getSelection().selectAllChildren($("hook-secret-text")); }
  });
  document.addEventListener("keydown", (event) => {
    // Escape in the form leaves what is typed where it is.
    if (event.key === "Escape" && state.shown && !event.defaultPrevented && !event.target.closest?.("form")) {
      const open = [...state.views.entries()].find(([, view]) => view.confirming);
      if (open) { event.preventDefault(); closeConfirm(open[0]); } else location.hash = "";
    }
  });
  relabelWebhooks();
}

/// Whether the page is open.
export function webhooksShown() { return state.shown; }

/// The grant's scopes are known: the link shows for an admin, and `#webhooks` opens.
export function setAdmin(admin) {
  state.admin = admin;
  $("hooks-link").hidden = !admin;
  routeWebhooks();
}

/// Opens the page when the location names it (and the token may manage webhooks), else
/// closes it; returns whether it is open.
export function routeWebhooks() {
  const wanted = location.hash === "#webhooks" && state.admin;
  if (wanted && !state.shown) {
    state.shown = true;
    showView("webhooks-view");
    requestAnimationFrame(() => $("hooks-heading").focus());
    load();
  } else if (!wanted && state.shown) {
    state.shown = false;
    // A new webhook's secret is shown once: not kept in the page once it is left.
    $("hook-secret").hidden = true;
    setText($("hook-secret-text"), "");
    showView("list-view");
    requestAnimationFrame(() => $("hooks-link").focus());
  }
  return state.shown;
}

/// The language changed: the form's choices and every drawn word again.
export function relabelWebhooks() {
  const format = $("hook-format");
  const chosen = format.value || "json";
  format.replaceChildren(...Object.keys(FORMATS).map((name) => {
    const option = element("option", null, t(`format_${name}`));
    option.value = name;
    return option;
  }));
  format.value = chosen;
  const checked = new Set(checkedValues("hook-events"));
  $("hook-event-list").replaceChildren(...EVENTS.map((event) => choice("events", event, t(`event_${event}`), checked.has(event), event)));
  const outcomes = new Set(checkedValues("hook-outcomes"));
  $("hook-outcome-list").replaceChildren(...OUTCOMES.map((outcome) => choice("outcomes", outcome, t(`state_${outcome}`), outcomes.has(outcome))));
  drawFormatFields();
  drawOutcomesEnabled();
  if (state.shown) drawHooks();
}

/// A checkbox of the form, its label the words and (if given) the event's name in code.
function choice(name, value, words, checked, code) {
  const label = element("label", "choice");
  const box = element("input");
  box.type = "checkbox";
  box.name = name;
  box.value = value;
  box.checked = checked;
  const text = element("span", "words", words);
  // The event's own name under its words, whole (never broken inside).
  if (code) text.append(element("code", null, code));
  label.append(box, text);
  return label;
}

function checkedValues(containerID) {
  return [...$(containerID).querySelectorAll("input[type=checkbox]:checked")].map((box) => box.value);
}

/// Shows the chosen format's own fields, and only those.
function drawFormatFields() {
  const needs = FORMATS[$("hook-format").value] ?? [];
  for (const field of FORMAT_FIELDS) $(`hook-field-${field}`).hidden = !needs.includes(field);
  setText($("hook-url-hint"), t($("hook-format").value === "email" ? "hookUrlHintEmail" : "hookUrlHint"));
}

/// The outcomes narrow task.finished only: offered while it is checked.
function drawOutcomesEnabled() {
  const finished = checkedValues("hook-events").includes("task.finished");
  $("hook-outcomes").disabled = !finished;
}

async function load() {
  const serial = ++state.loadSerial;
  try {
    const reply = await request("GET", "/v1/webhooks");
    if (serial !== state.loadSerial) return;
    state.webhooks = reply.webhooks;
    $("hooks-error").hidden = true;
  } catch (error) {
    if (serial !== state.loadSerial) return;
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    setText($("hooks-error"), t("hooksLoadFailed", { detail: errorText(error) }));
    $("hooks-error").hidden = false;
  }
  for (const id of state.views.keys()) if (!state.webhooks.some((hook) => hook.id === id)) state.views.delete(id);
  drawHooks();
}

function viewOf(id) {
  if (!state.views.has(id)) state.views.set(id, { open: false, deliveries: null, loads: 0, page: 1, outcome: null, busy: false, confirming: false, error: "" });
  return state.views.get(id);
}

/// The cards drawn, by webhook id: each made once and brought up to date in place, so a
/// control keeps the focus, and a reference to it stays good, across changes.
const cards = new Map();

/// Draws the page of webhooks.
function drawHooks() {
  const view = deliveryPage(state.webhooks, state.page, HOOKS_PAGE);
  state.page = view.page;
  const list = $("hooks");
  const shown = new Set(view.items.map((hook) => hook.id));
  for (const [id, item] of cards) if (!shown.has(id)) { item.remove(); cards.delete(id); }
  let cursor = list.firstElementChild;
  for (const hook of view.items) {
    let item = cards.get(hook.id);
    if (!item) { item = makeCard(hook); cards.set(hook.id, item); }
    drawCard(item, hook, viewOf(hook.id));
    if (item !== cursor) list.insertBefore(item, cursor); else cursor = cursor.nextElementSibling;
  }
  $("hooks-empty").hidden = state.webhooks.length > 0;
  $("hooks-pager").hidden = view.pages <= 1;
  setText($("hooks-page-text"), t("pageOf", { page: formatInteger(view.page), pages: formatInteger(view.pages) }));
  $("hooks-prev").disabled = view.previousDisabled;
  $("hooks-next").disabled = view.nextDisabled;
}

/// A webhook's card, its parts in place (drawn by `drawCard`).
function makeCard(hook) {
  const view = viewOf(hook.id);
  const item = element("li", "hook");
  item.dataset.hookId = hook.id;
  const head = element("div", "hook-head");
  head.append(element("bdi", "hook-url", hook.url), element("span", "hook-format"));
  const facts = element("p", "hook-facts");
  facts.append(element("span", "events"), element("span", "prefix"), element("span", "made"));
  const actions = element("div", "hook-actions");
  const test = button("", "test");
  test.addEventListener("click", () => sendTest(hook.id));
  const toggle = button("", "deliveries");
  toggle.setAttribute("aria-controls", `deliveries-${hook.id}`);
  toggle.addEventListener("click", () => { view.open = !view.open; if (view.open) loadDeliveries(hook.id); drawHooks(); });
  const remove = button("", "delete");
  remove.classList.add("danger");
  remove.addEventListener("click", () => { view.confirming = true; view.error = ""; drawHooks(); focusIn(hook.id, "keep"); });
  actions.append(test, toggle, remove);
  const outcome = element("p", "hook-outcome");
  outcome.setAttribute("role", "status");
  const error = element("p", "error hook-error");
  error.setAttribute("role", "alert");
  const confirm = element("div", "confirm");
  confirm.setAttribute("role", "group");
  const yes = button("", "yes");
  yes.classList.add("yes");
  yes.addEventListener("click", () => deleteWebhook(hook.id));
  const keep = button("", "keep");
  keep.addEventListener("click", () => closeConfirm(hook.id));
  confirm.append(element("span", "question"), yes, keep);
  const panel = element("div", "hook-deliveries");
  panel.id = `deliveries-${hook.id}`;
  item.append(head, facts, actions, outcome, error, confirm, panel);
  return item;
}

/// Brings a card up to its webhook and what the page knows of it (`view`), touching only
/// what differs.
function drawCard(item, hook, view) {
  const part = (selector) => item.querySelector(selector);
  const name = shortURL(hook.url);
  setText(part(".hook-format"), t(`format_${hook.format}`));
  const events = hook.events.map((event) => event === "task.finished" && hook.outcomes
    ? `${event} (${hook.outcomes.map((outcome) => t(`state_${outcome}`)).join(", ")})` : event).join(", ");
  setText(part(".hook-facts .events"), t("hookEventsLabel", { events }));
  setText(part(".hook-facts .prefix"), hook.task_prefix ? t("hookPrefixLabel", { prefix: hook.task_prefix }) : t("hookAllTasks"));
  setText(part(".hook-facts .made"), t("hookMade", { time: formatWhen(new Date(hook.created_at)) }));
  const test = part('[data-role="test"]');
  setText(test, view.busy === "shown" ? t("hookTesting") : t("hookTest"));
  setAttr(test, "aria-label", t("hookTestNamed", { name }));
  setAttr(test, "aria-busy", String(Boolean(view.busy)));
  const toggle = part('[data-role="deliveries"]');
  setText(toggle, t("hookShowDeliveries"));
  setAttr(toggle, "aria-expanded", String(view.open));
  const remove = part('[data-role="delete"]');
  setText(remove, t("hookDelete"));
  setAttr(remove, "aria-label", t("hookDeleteNamed", { name }));
  const outcome = part(".hook-outcome");
  setText(outcome, view.outcome?.text ?? "");
  setAttr(outcome, "data-state", view.outcome?.state ?? null);
  setText(part(".hook-error"), view.error);
  part(".hook-error").hidden = !view.error;
  const confirm = part(".confirm");
  confirm.hidden = !view.confirming;
  setText(confirm.querySelector(".question"), t("hookDeleteConfirm", { name }));
  setText(part('[data-role="yes"]'), t("hookDeleteYes"));
  setText(part('[data-role="keep"]'), t("hookDeleteNo"));
  const panel = part(".hook-deliveries");
  panel.hidden = !view.open;
  if (view.open) drawDeliveries(panel, hook.id, view);
}

function button(text, role) {
  const node = element("button", null, text);
  node.type = "button";
  node.dataset.role = role;
  return node;
}

function focusIn(id, role) {
  requestAnimationFrame(() => $("hooks").querySelector(`li.hook[data-hook-id="${CSS.escape(id)}"] [data-role="${role}"]`)?.focus());
}

function closeConfirm(id) {
  viewOf(id).confirming = false;
  drawHooks();
  focusIn(id, "delete");
}

/// The webhook's latest deliveries, a page at a time, newest first.
function drawDeliveries(panel, id, view) {
  // Drawn again only when the list read, its page or the language changed.
  const drawn = JSON.stringify([view.loads, view.page, currentLanguage()]);
  if (panel.dataset.drawn === drawn) return;
  panel.dataset.drawn = drawn;
  const focusedRole = panel.contains(document.activeElement) ? document.activeElement.dataset.role : null;
  panel.replaceChildren(element("h4", null, t("hookDeliveries")));
  if (focusedRole) requestAnimationFrame(() => panel.querySelector(`[data-role="${focusedRole}"]`)?.focus());
  if (view.deliveries === null) return;
  if (view.deliveries.length === 0) { panel.append(element("p", "hint", t("hookNoDeliveries"))); return; }
  const page = deliveryPage(view.deliveries, view.page);
  const list = element("ol", "deliveries");
  for (const delivery of page.items) {
    const item = element("li", "delivery");
    item.dataset.state = delivery.state;
    const when = delivery.last_attempt_at ?? delivery.created_at;
    const words = outcomeWords(delivery);
    item.append(element("time", "when", formatWhen(new Date(when))));
    item.lastChild.dateTime = when;
    item.append(element("code", "event", delivery.event));
    if (delivery.test) item.append(element("span", "tag", t("hookTestTag")));
    item.append(element("span", "outcome", t(words.key, words.values)));
    list.append(item);
  }
  panel.append(list);
  if (page.pages > 1) {
    const pager = element("nav", "pager");
    pager.setAttribute("aria-label", t("hookDeliveriesPages"));
    const previous = button(t("previous"), "deliveries-previous");
    previous.disabled = page.previousDisabled;
    previous.addEventListener("click", () => { view.page = page.page - 1; drawHooks(); });
    const next = button(t("next"), "deliveries-next");
    next.disabled = page.nextDisabled;
    next.addEventListener("click", () => { view.page = page.page + 1; drawHooks(); });
    pager.append(previous, element("span", null, t("pageOf", { page: formatInteger(page.page), pages: formatInteger(page.pages) })), next);
    panel.append(pager);
  }
}

async function loadDeliveries(id) {
  const view = viewOf(id);
  try {
    const reply = await request("GET", `/v1/webhooks/${encodeURIComponent(id)}/deliveries`);
    view.deliveries = reply.deliveries;
    view.loads += 1;
    view.error = "";
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    if (error instanceof APIError && error.status === 404) return load();
    view.error = t("hooksLoadFailed", { detail: errorText(error) });
  }
  if (state.shown) drawHooks();
}

/// Sends a test; "Sending test…" shows only if it takes longer than BUSY_DELAY_MS.
async function sendTest(id) {
  const view = viewOf(id);
  if (view.busy) return;
  view.busy = true;
  view.error = "";
  const timer = setTimeout(() => { if (view.busy) { view.busy = "shown"; drawHooks(); } }, BUSY_DELAY_MS);
  let text;
  let outcomeState;
  try {
    const delivery = await request("POST", `/v1/webhooks/${encodeURIComponent(id)}/test`, {});
    const words = outcomeWords(delivery);
    text = t("hookTestResult", { outcome: t(words.key, words.values) });
    outcomeState = delivery.state;
  } catch (error) {
    if (error instanceof APIError && error.status === 401) { clearTimeout(timer); return tokenRefused(error); }
    if (error instanceof APIError && error.status === 404) { clearTimeout(timer); view.busy = false; return load(); }
    text = t("hookTestFailed", {
      detail: error instanceof APIError && error.code === "webhook_test_too_soon" ? t("hookTestTooSoon") : errorText(error),
    });
    outcomeState = "failed";
  }
  clearTimeout(timer);
  view.busy = false;
  view.outcome = { text, state: outcomeState };
  view.open = true;
  // Said by the card's outcome line (role "status"), drawn in place.
  drawHooks();
  loadDeliveries(id);
}

async function deleteWebhook(id) {
  const view = viewOf(id);
  view.confirming = false;
  const hook = state.webhooks.find((item) => item.id === id);
  try {
    await request("DELETE", `/v1/webhooks/${encodeURIComponent(id)}`);
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    if (!(error instanceof APIError && error.status === 404)) {
      view.error = t("hookDeleteFailed", { detail: errorText(error) });
      drawHooks();
      focusIn(id, "delete");
      return;
    }
  }
  const index = state.webhooks.indexOf(hook);
  state.webhooks = state.webhooks.filter((item) => item.id !== id);
  state.views.delete(id);
  announce(t("hookDeleted"));
  drawHooks();
  // The focus goes to the next webhook's test button, or the page's heading.
  const next = state.webhooks[Math.min(index, state.webhooks.length - 1)];
  if (next) focusIn(next.id, "test"); else requestAnimationFrame(() => $("hooks-heading").focus());
  load();
}

/// Reads the form, refuses what the server would (each field says what is wrong), or makes
/// the webhook and shows its secret once.
async function create() {
  const form = $("hook-form");
  const values = {
    url: $("hook-url").value, format: $("hook-format").value, events: checkedValues("hook-events"),
    outcomes: checkedValues("hook-outcomes"), task_prefix: $("hook-task-prefix").value,
  };
  for (const field of FORMAT_FIELDS) values[field] = $(`hook-${field.replace("_", "-")}`).value;
  const made = webhookRequest(values);
  const errors = {};
  for (const error of made.errors ?? []) errors[error.field] = t(error.key);
  if (made.errors) return showFormErrors(errors);
  showFormErrors({});
  const submit = $("hook-create");
  submit.setAttribute("aria-busy", "true");
  const timer = setTimeout(() => setText(submit, t("hookCreating")), BUSY_DELAY_MS);
  try {
    const webhook = await request("POST", "/v1/webhooks", made.body);
    form.reset();
    relabelWebhooks();
    setText($("hook-secret-text"), webhook.secret);
    setText($("hook-secret-copied"), "");
    $("hook-secret").hidden = false;
    requestAnimationFrame(() => $("hook-secret-copy").focus());
    announce(t("hookCreated"));
    state.page = Math.ceil((state.webhooks.length + 1) / HOOKS_PAGE);
    await load();
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return tokenRefused(error);
    const byField = error instanceof APIError ? problemFields(error.problem, FORM_FIELDS) : {};
    if (Object.keys(byField).length === 0) byField[""] = t("hookCreateFailed", { detail: errorText(error) });
    showFormErrors(byField);
  } finally {
    clearTimeout(timer);
    submit.removeAttribute("aria-busy");
    setText(submit, t("hookCreate"));
  }
}

/// Marks each field with its error (`errors`: {field: message}; "" for the form as a
/// whole), says so above the form, and moves the focus to the first field in error.
function showFormErrors(errors) {
  let first = null;
  for (const field of FORM_FIELDS) {
    const message = errors[field] ?? "";
    const note = $(`hook-${field.replace("_", "-")}-error`);
    if (!note) continue;
    setText(note, message);
    const input = field === "events" || field === "outcomes" ? $(`hook-${field}`) : $(`hook-${field.replace("_", "-")}`);
    if (message) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
    if (message && !first) first = field === "events" || field === "outcomes" ? input.querySelector("input") : input;
  }
  const any = Object.values(errors).some(Boolean);
  setText($("hook-form-error"), errors[""] ? errors[""] : any ? t("hookFormInvalid") : "");
  $("hook-form-error").hidden = !errors[""] && !any;
  first?.focus();
}
