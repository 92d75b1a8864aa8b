// The job form's script editor: Tab inserts four spaces instead of leaving the field, as in a
// code editor. Escape first and Tab leaves the field as usual, so keyboard users are never
// trapped in it.
//
// And the fields the script's #SBATCH lines fill: each time the platform has read the script
// (#job-directives, fetched again as it is typed), the size fields nobody typed in show the
// script's values, and the hidden `script_fields` names them, so that they are sent as the
// script's, not the request's. A field typed in is the user's from then on, and wins over the
// script, as sbatch's command line does.
(function () {
  "use strict";

  const INDENT = "    ";
  const FILLED = ["name", "time_limit_minutes", "cpus_per_task", "ntasks", "nodes", "gpus",
    "mem_per_cpu", "array"];

  document.addEventListener("keydown", (event) => {
    const editor = event.target.closest && event.target.closest("[data-script-editor]");
    if (!editor) return;
    if (event.key === "Escape") {
      editor.dataset.leaving = "true";
      return;
    }
    if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) {
      delete editor.dataset.leaving;
      return;
    }
    if (editor.dataset.leaving) {
      delete editor.dataset.leaving;
      return;
    }
    event.preventDefault();
    editor.setRangeText(INDENT, editor.selectionStart, editor.selectionEnd, "end");
    editor.dispatchEvent(new Event("input", { bubbles: true }));
  });

  function field(name) {
    const form = document.getElementById("job-form");
    return form && form.elements.namedItem(name);
  }

  // A field typed in is the user's: the script no longer fills it.
  document.addEventListener("input", (event) => {
    const input = event.target;
    if (!event.isTrusted || !input.name || !FILLED.includes(input.name)) return;
    input.dataset.typed = "true";
    delete input.dataset.fromScript;
    input.classList.remove("border-info");
    recordFilled();
  });

  function recordFilled() {
    const hidden = field("script_fields");
    if (!hidden) return;
    hidden.value = FILLED.filter((name) => {
      const input = field(name);
      return input && input.dataset.fromScript === "true";
    }).join(",");
  }

  // What the form already holds when the page opens (a copy's own sizes, a refused form's
  // typing) is the user's, unless the hidden field says the script filled it.
  function markTyped() {
    const hidden = field("script_fields");
    const fromScript = hidden ? hidden.value.split(",") : [];
    for (const name of FILLED) {
      const input = field(name);
      if (!input || !input.value) continue;
      if (fromScript.includes(name)) input.dataset.fromScript = "true";
      else input.dataset.typed = "true";
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", markTyped);
  else markTyped();

  document.addEventListener("htmx:afterSwap", (event) => {
    if (!event.detail.target || event.detail.target.id !== "job-directives") return;
    const data = document.getElementById("job-directives-values");
    if (!data) return;
    const values = JSON.parse(data.textContent);
    for (const name of FILLED) {
      const input = field(name);
      if (!input || input.dataset.typed === "true") continue;
      // The field being typed in is left alone even before its first keystroke lands: a value
      // set under the caret would have the keystroke appended to the script's.
      if (input === document.activeElement) continue;
      if (Object.prototype.hasOwnProperty.call(values, name)) {
        input.value = values[name];
        input.dataset.fromScript = "true";
        input.classList.add("border-info");
      } else if (input.dataset.fromScript === "true") {
        input.value = "";
        delete input.dataset.fromScript;
        input.classList.remove("border-info");
      }
    }
    recordFilled();
  });
})();
