// Small helpers over the page's elements: finding and making them, and changing a text or
// an attribute only when it differs (rows are drawn again every second; an unchanged value
// must not touch the DOM, or a screen reader would hear it again).

import { t } from "./i18n.js";

export const $ = (id) => document.getElementById(id);

export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

/// Sets the attribute `name` to `value`, or removes it for null.
export function setAttr(node, name, value) {
  if (value === null) { if (node.hasAttribute(name)) node.removeAttribute(name); }
  else if (node.getAttribute(name) !== value) node.setAttribute(name, value);
}

/// Sets `node` to the string `key` with its {name} in a <bdi> of its own.
export function setNamed(node, key, name) {
  const [before, after = ""] = t(key, { name: "\u0000" }).split("\u0000");
  const bdi = node.querySelector("bdi");
  if (bdi && node.firstChild?.nodeValue === before && node.lastChild?.nodeValue === after && bdi.textContent === name) return;
  const inner = document.createElement("bdi");
  inner.textContent = name;
  node.replaceChildren(before, inner, after);
}

/// Says `text` to screen readers (the live region, emptied first so a repeat is heard).
export function announce(text) {
  const region = $("announce");
  region.textContent = "";
  requestAnimationFrame(() => { region.textContent = text; });
}

/// Shows one of the page's views: "token-view", "list-view", "detail-view" or "webhooks-view".
export function showView(name) {
  for (const view of ["token-view", "list-view", "detail-view", "webhooks-view"]) $(view).hidden = view !== name;
}

/// The list's row of the task `id`, if it is on the page.
export function listRow(id) {
  return document.querySelector(`#tasks > li[data-task-id="${CSS.escape(id)}"]`);
}
