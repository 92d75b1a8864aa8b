// On every page (base.html). A box that scrolls sideways (a wide table on a phone) must be
// reachable with the keyboard to be scrolled without a mouse: it gets a tab stop while it
// overflows, named after the table inside it, and loses it when it fits again.
(function () {
  "use strict";

  const SCROLL_BOXES = ".table-responsive, main table.table";

  function nameOf(box) {
    const table = box.matches("table") ? box : box.querySelector("table");
    const card = box.closest(".card");
    const heading = card && card.querySelector(".card-header h2, .card-header h3");
    const caption = table && table.querySelector("caption");
    return (caption || heading || { textContent: "Table" }).textContent.trim();
  }

  function update() {
    document.querySelectorAll(SCROLL_BOXES).forEach((box) => {
      const scrolls = box.scrollWidth > box.clientWidth + 1 &&
        ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
      if (scrolls && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.dataset.csScrollBox = "";
        if (!box.matches("table")) {
          box.setAttribute("role", "region");
          box.setAttribute("aria-label", nameOf(box));
        }
      } else if (!scrolls && "csScrollBox" in box.dataset) {
        box.removeAttribute("tabindex");
        delete box.dataset.csScrollBox;
        if (!box.matches("table")) {
          box.removeAttribute("role");
          box.removeAttribute("aria-label");
        }
      }
    });
  }

  let pending = 0;
  function soon() {
    window.cancelAnimationFrame(pending);
    pending = window.requestAnimationFrame(update);
  }
  document.addEventListener("DOMContentLoaded", update);
  window.addEventListener("resize", soon);
  document.addEventListener("htmx:afterSettle", soon);
})();
