// The job form's script editor: Tab inserts four spaces instead of leaving the field, as in a
// code editor. Escape first and Tab leaves the field as usual, so keyboard users are never
// trapped in it.
(function () {
  "use strict";

  const INDENT = "    ";

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
})();
