// Unit tests of dashboard/hooks.js: the request a filled webhook form makes (each format
// with the fields of its own, and only those), what is wrong with a form field by field,
// the server's refusals by field, a delivery's outcome in words, and the pages of a long
// delivery list. Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  DELIVERIES_PAGE, EVENTS, FORMATS, addressList, deliveryPage, outcomeWords, problemFields, shortURL, webhookRequest,
} from "../../dashboard/hooks.js";
import { setLanguage, t } from "../../dashboard/i18n.js";

const base = { url: "https://hooks.example.com/x", format: "json", events: ["task.failed", "task.finished"] };

test("a plain form makes the request, events in the page's order, unknown ones dropped", () => {
  assert.deepEqual(webhookRequest({ ...base, events: ["task.stalled", "task.finished", "task.exploded"] }), {
    body: { url: "https://hooks.example.com/x", events: ["task.finished", "task.stalled"], format: "json" },
  });
});

test("outcomes narrow task.finished only, and all three are the same as none", () => {
  assert.deepEqual(webhookRequest({ ...base, outcomes: ["failed"] }).body.outcomes, ["failed"]);
  assert.equal(webhookRequest({ ...base, outcomes: ["failed", "succeeded", "canceled"] }).body.outcomes, undefined);
  assert.equal(webhookRequest({ ...base, events: ["task.stalled"], outcomes: ["failed"] }).body.outcomes, undefined);
});

test("each format sends its own fields and no other's", () => {
  const values = { ...base, chat_id: "-100123", routing_key: "R0123456789abcdef0123456789abcdef",
    mail_from: "headway@example.com", mail_to: "ops@example.com, dev@example.com;boss@example.com" };
  assert.deepEqual(Object.keys(webhookRequest({ ...values, format: "slack" }).body).sort(), ["events", "format", "url"]);
  assert.equal(webhookRequest({ ...values, format: "telegram" }).body.chat_id, "-100123");
  assert.equal(webhookRequest({ ...values, format: "telegram" }).body.routing_key, undefined);
  assert.equal(webhookRequest({ ...values, format: "pagerduty" }).body.routing_key, values.routing_key);
  const email = webhookRequest({ ...values, format: "email", url: "smtps://mail.example.com:465" }).body;
  assert.deepEqual(email.mail_to, ["ops@example.com", "dev@example.com", "boss@example.com"]);
  assert.equal(email.mail_from, "headway@example.com");
  assert.equal(email.chat_id, undefined);
  for (const [format, fields] of Object.entries(FORMATS)) {
    for (const field of fields) {
      const errors = webhookRequest({ ...base, format, url: format === "email" ? "smtp://m.example.com" : base.url }).errors;
      assert.ok(errors.some((error) => error.field === field && error.key === "hookFieldMissing"), `${format} ${field}`);
    }
  }
});

test("every mistake is named on its field, all at once", () => {
  const { errors } = webhookRequest({ url: "ftp://x", format: "json", events: [], task_prefix: "a b" });
  assert.deepEqual(errors, [
    { field: "url", key: "hookUrlHttp" }, { field: "events", key: "hookEventsMissing" },
    { field: "task_prefix", key: "hookPrefixInvalid" },
  ]);
  assert.deepEqual(webhookRequest({ ...base, url: "  " }).errors, [{ field: "url", key: "hookUrlMissing" }]);
  assert.deepEqual(webhookRequest({ ...base, format: "email", url: "https://x.example", mail_from: "a@b.c", mail_to: "c@d.e" })
    .errors, [{ field: "url", key: "hookUrlSmtp" }]);
  assert.deepEqual(webhookRequest({ ...base, format: "email", url: "smtp://m.example", mail_from: "nobody", mail_to: "x@y, z" })
    .errors, [{ field: "mail_from", key: "hookAddressInvalid" }, { field: "mail_to", key: "hookAddressInvalid" }]);
});

test("every key the form may show exists in English and Korean", () => {
  for (const language of ["en", "ko"]) {
    setLanguage(language);
    for (const key of ["hookUrlMissing", "hookUrlHttp", "hookUrlSmtp", "hookEventsMissing", "hookPrefixInvalid",
      "hookFieldMissing", "hookAddressInvalid", ...EVENTS.map((event) => `event_${event}`)]) {
      assert.notEqual(t(key), key, `${language} ${key}`);
    }
  }
  setLanguage("en");
});

test("the server's refusal lands on its fields; an unknown field or none on the form", () => {
  const problem = { detail: "url: refused.", errors: [{ field: "url", message: "resolves to 10.0.0.1" },
    { field: "url", message: "again" }, { field: "secret", message: "is not allowed" }] };
  assert.deepEqual(problemFields(problem, ["url", "events"]), { url: "resolves to 10.0.0.1; again", "": "is not allowed" });
  assert.deepEqual(problemFields({ detail: "At most 100 webhooks" }, ["url"]), { "": "At most 100 webhooks" });
  assert.deepEqual(problemFields(null, ["url"]), {});
});

test("an outcome in words: status and time, or the error", () => {
  setLanguage("en");
  const words = (delivery) => { const w = outcomeWords(delivery); return t(w.key, w.values); };
  assert.equal(words({ state: "delivered", status_code: 200, latency_ms: 34 }), "Delivered: HTTP 200 in 34 ms");
  assert.equal(words({ state: "failed", status_code: 500, latency_ms: 12 }), "Failed: HTTP 500 after 12 ms");
  assert.equal(words({ state: "failed", status_code: null, latency_ms: 3, error: "Couldn't connect to server" }),
    "Failed: Couldn't connect to server (after 3 ms)");
  assert.equal(words({ state: "pending", attempts: 0 }), "Waiting to be sent");
  assert.equal(words({ state: "pending", attempts: 2, error: "HTTP 503" }), "Retrying: 2 attempts so far, last: HTTP 503");
  setLanguage("ko");
  assert.equal(words({ state: "delivered", status_code: 204, latency_ms: 5 }), "전송됨: HTTP 204, 5ms");
  setLanguage("en");
});

test("a long delivery list is paged, the page clamped", () => {
  const items = Array.from({ length: 23 }, (_, index) => index);
  assert.equal(DELIVERIES_PAGE, 10);
  assert.deepEqual(deliveryPage(items, 1), { items: items.slice(0, 10), page: 1, pages: 3, previousDisabled: true, nextDisabled: false });
  assert.deepEqual(deliveryPage(items, 3).items, [20, 21, 22]);
  assert.equal(deliveryPage(items, 9).page, 3);
  assert.deepEqual(deliveryPage([], 1), { items: [], page: 1, pages: 1, previousDisabled: true, nextDisabled: true });
});

test("addresses split at commas, semicolons and spaces; a URL's query hidden in prompts", () => {
  assert.deepEqual(addressList(" a@b.c,, d@e.f ;g@h.i "), ["a@b.c", "d@e.f", "g@h.i"]);
  assert.equal(shortURL("https://ntfy.sh/alerts?auth=secret"), "https://ntfy.sh/alerts?…");
  assert.equal(shortURL("https://hooks.example.com/x"), "https://hooks.example.com/x");
});
