// The webhook page's rules, without the DOM: the formats and the fields each needs, the
// request a filled form makes (or what is wrong with it, field by field), the words of a
// delivery's outcome, and the pages of a long delivery list. webhooks.js draws; the unit
// tests (Tests/js/hooks.test.js) call these directly.

/// Each format and the fields of its own it needs (POST /v1/webhooks), in the form's order.
export const FORMATS = {
  json: [],
  slack: [],
  discord: [],
  ntfy: [],
  telegram: ["chat_id"],
  pagerduty: ["routing_key"],
  email: ["mail_from", "mail_to"],
};

/// Every field a format may add; those of other formats are left out of the request.
export const FORMAT_FIELDS = ["chat_id", "routing_key", "mail_from", "mail_to"];

/// The events a webhook may be told about, most asked for first.
export const EVENTS = [
  "task.finished", "task.stalled", "task.recovered", "task.overdue", "task.too_quick", "task.cancel_requested",
  "task.created", "task.updated", "task.deleted",
];

/// The outcomes `task.finished` may be narrowed to.
export const OUTCOMES = ["failed", "succeeded", "canceled"];

/// Deliveries shown per page.
export const DELIVERIES_PAGE = 10;

/// A task prefix as the API takes it.
const PREFIX = /^[A-Za-z0-9._~:-]{1,128}$/;
/// An e-mail address, loosely: something@host, no spaces or angle brackets.
const ADDRESS = /^[^\s@<>,]+@[^\s@<>,]+$/;

/// The addresses of a "To" field: split at commas, semicolons and spaces, empties dropped.
export function addressList(text) {
  return (text ?? "").split(/[\s,;]+/).filter(Boolean);
}

/// The request body of the create form's `values` ({url, format, events: [...], task_prefix,
/// outcomes: [...], chat_id, routing_key, mail_from, mail_to}), or the errors that keep it
/// from being sent: `{body}` or `{errors: [{field, key}]}`, `key` a string of i18n.js.
export function webhookRequest(values) {
  const errors = [];
  const format = Object.hasOwn(FORMATS, values.format) ? values.format : "json";
  const url = (values.url ?? "").trim();
  const schemes = format === "email" ? /^smtps?:\/\//i : /^https?:\/\//i;
  if (!url) errors.push({ field: "url", key: "hookUrlMissing" });
  else if (!schemes.test(url) || /\s/.test(url)) {
    errors.push({ field: "url", key: format === "email" ? "hookUrlSmtp" : "hookUrlHttp" });
  }
  const events = EVENTS.filter((event) => (values.events ?? []).includes(event));
  if (events.length === 0) errors.push({ field: "events", key: "hookEventsMissing" });
  const prefix = (values.task_prefix ?? "").trim();
  if (prefix && !PREFIX.test(prefix)) errors.push({ field: "task_prefix", key: "hookPrefixInvalid" });
  const outcomes = OUTCOMES.filter((outcome) => (values.outcomes ?? []).includes(outcome));
  const body = { url, events, format };
  if (prefix) body.task_prefix = prefix;
  // Outcomes narrow task.finished only; all three are the same as none.
  if (events.includes("task.finished") && outcomes.length > 0 && outcomes.length < OUTCOMES.length) body.outcomes = outcomes;
  for (const field of FORMATS[format]) {
    const text = (values[field] ?? "").trim();
    if (field === "mail_to") {
      const list = addressList(text);
      if (list.length === 0) errors.push({ field, key: "hookFieldMissing" });
      else if (!list.every((address) => ADDRESS.test(address))) errors.push({ field, key: "hookAddressInvalid" });
      body.mail_to = list;
    } else if (!text) {
      errors.push({ field, key: "hookFieldMissing" });
    } else if (field === "mail_from" && !ADDRESS.test(text)) {
      errors.push({ field, key: "hookAddressInvalid" });
    } else {
      body[field] = text;
    }
  }
  return errors.length ? { errors } : { body };
}

/// The server's refusal of a form, by field: `{field: message}` from a problem's `errors`
/// (a field the form does not have goes under "" with the problem's detail).
export function problemFields(problem, formFields) {
  const byField = {};
  for (const item of problem?.errors ?? []) {
    const field = formFields.includes(item.field) ? item.field : "";
    byField[field] = byField[field] ? `${byField[field]}; ${item.message}` : item.message;
  }
  if (Object.keys(byField).length === 0 && problem?.detail) byField[""] = problem.detail;
  return byField;
}

/// What a delivery came to, as an i18n.js key and its values: delivered with its status,
/// failed with a status or an error, pending with its attempts so far; `ms` the latency.
export function outcomeWords(delivery) {
  const ms = typeof delivery.latency_ms === "number" ? delivery.latency_ms : null;
  const status = typeof delivery.status_code === "number" ? delivery.status_code : null;
  if (delivery.state === "delivered") return { key: ms === null ? "hookDelivered" : "hookDeliveredIn", values: { status, ms } };
  if (delivery.state === "pending") {
    return delivery.attempts > 0
      ? { key: "hookRetrying", values: { attempts: delivery.attempts, error: delivery.error ?? "" } }
      : { key: "hookWaiting", values: {} };
  }
  if (status !== null) return { key: "hookFailedStatus", values: { status, ms } };
  return { key: "hookFailedError", values: { error: delivery.error ?? "", ms } };
}

/// The deliveries of page `page` (1-based, clamped) of `deliveries`, with the pager's view.
export function deliveryPage(deliveries, page, size = DELIVERIES_PAGE) {
  const pages = Math.max(1, Math.ceil(deliveries.length / size));
  const shown = Math.min(Math.max(1, page), pages);
  return {
    items: deliveries.slice((shown - 1) * size, shown * size),
    page: shown, pages, previousDisabled: shown <= 1, nextDisabled: shown >= pages,
  };
}

/// A webhook's one-line description for a screen reader's list and the delete prompt:
/// its URL without the query (where secrets such as a bot token or key often sit).
export function shortURL(url) {
  const cut = url.search(/[?#]/);
  return cut < 0 ? url : `${url.slice(0, cut)}?…`;
}

/// How long to wait before showing that a short operation is under way: one that ends
/// sooner changes nothing on the screen but its outcome (no flash of "Sending…").
export const BUSY_DELAY_MS = 400;
