// The job page's output card: the stream (and task) clicked last is the one shown. The card
// polls its stream every few seconds while the job runs; a poll answered after a click on the
// other stream used to replace the clicked one (and a click's answer could land on a card
// already replaced). Here each click records what is wanted, and any answer for something
// else is not swapped in. Aborting the poll instead (hx-sync) logs an error in the console.
(function () {
  "use strict";

  const box = document.getElementById("job-output-box");
  if (!box) return;

  function choice(path) {
    const query = new URL(path, window.location.href).searchParams;
    return `${query.get("stream") || "stdout"}|${query.get("task") || ""}`;
  }

  // What is wanted is recorded when the user asks, not when the request leaves: htmx holds a
  // button's second click until its first request is answered, and drops it if that answer
  // replaced the card, so a request may never leave for the click made last.
  box.addEventListener(
    "click",
    (event) => {
      const button = event.target.closest && event.target.closest("button[hx-get]");
      if (!button || !box.contains(button)) return;
      box.dataset.wanted = choice(button.getAttribute("hx-get"));
    },
    true,
  );
  box.addEventListener(
    "change",
    (event) => {
      const form = event.target.closest && event.target.closest("form[hx-get]");
      if (!form || !box.contains(form)) return;
      const data = new FormData(form);
      box.dataset.wanted = `${data.get("stream") || "stdout"}|${data.get("task") || ""}`;
    },
    true,
  );

  box.addEventListener("htmx:beforeSwap", (event) => {
    const wanted = box.dataset.wanted;
    if (wanted && choice(event.detail.pathInfo.finalRequestPath) !== wanted) {
      event.detail.shouldSwap = false;
    }
  });
})();
