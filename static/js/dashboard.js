// The dashboard: countdowns to an allocation's start or end (and a job's time limit) that keep
// counting while the page stays open, and the organization switch that opens the chosen
// organization's dashboard as soon as it is chosen.
(() => {
  "use strict";
  const UNITS = [["day", 86400], ["hour", 3600], ["minute", 60]];

  // The two largest units, as Django's `timeuntil` writes them ("2 days, 3 hours").
  function until(moment) {
    let seconds = Math.floor((moment - Date.now()) / 1000);
    if (seconds < 60) return "0 minutes";
    const parts = [];
    for (const [name, size] of UNITS) {
      const count = Math.floor(seconds / size);
      if (count || parts.length) {
        if (count) parts.push(`${count} ${name}${count === 1 ? "" : "s"}`);
        if (parts.length === 2 || (parts.length === 1 && !count)) break;
      }
      seconds -= count * size;
    }
    return parts.slice(0, 2).join(", ");
  }

  function tick() {
    document.querySelectorAll("time[data-countdown]").forEach((element) => {
      element.textContent = until(Date.parse(element.getAttribute("datetime")));
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    window.setInterval(tick, 30000);
    const switcher = document.querySelector("[data-dashboard-switch]");
    switcher?.querySelector("select").addEventListener("change", () => switcher.requestSubmit());
  });
})();
