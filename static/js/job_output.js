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

  box.addEventListener("htmx:beforeRequest", (event) => {
    // The card's own requests (its first read and its polls) ask for what it shows.
    if (event.detail.elt.id === "job-output") return;
    box.dataset.wanted = choice(event.detail.pathInfo.finalRequestPath);
  });

  box.addEventListener("htmx:beforeSwap", (event) => {
    const wanted = box.dataset.wanted;
    if (wanted && choice(event.detail.pathInfo.finalRequestPath) !== wanted) {
      event.detail.shouldSwap = false;
    }
  });
})();
