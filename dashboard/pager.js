// The page control, the same above and below the rows ("Page N of M", Previous, Next): drawn
// from listing.js pagerView; its buttons call back into the list.

import { $, setText } from "./dom.js";
import { formatInteger, t } from "./i18n.js";

/// Wires both pagers' buttons to `onPrevious()` and `onNext()`.
export function initPager({ onPrevious, onNext }) {
  for (const suffix of ["", "-top"]) {
    $(`prev-page${suffix}`).addEventListener("click", onPrevious);
    $(`next-page${suffix}`).addEventListener("click", onNext);
  }
}

/// Draws both pagers from `view` (listing.js pagerView).
export function drawPager(view) {
  const text = t("pageOf", { page: formatInteger(view.page), pages: formatInteger(view.pages) });
  for (const suffix of ["", "-top"]) {
    setText($(`page-text${suffix}`), text);
    $(`prev-page${suffix}`).disabled = view.previousDisabled;
    $(`next-page${suffix}`).disabled = view.nextDisabled;
  }
  $("pager-top").hidden = view.topHidden;
}

/// After another page has arrived: the page from its top, the focus on its first task (not
/// left on a pager button at the bottom of rows that changed under it).
export function focusFirstRow() {
  requestAnimationFrame(() => {
    window.scrollTo(0, 0);
    ($("tasks").querySelector(".name") ?? $("next-page-top")).focus({ preventScroll: true });
  });
}
