"""What every page must hold in the browser, checked by the crawl and by the journeys: axe-core
(from npm, node_modules/axe-core) finds no serious or critical accessibility violation, and the
document is no wider than the viewport (a phone does not pan sideways). The console's errors are
collected by `ConsoleErrors`, attached to a page before it loads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, ConsoleMessage, Error, Page

AXE_JS = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")

# The elements sticking out past the viewport's right edge, deepest first: what to fix when a
# page pans sideways. An element inside a box that scrolls on its own (a table in
# .table-responsive) is not counted: it scrolls there, not the page.
OVERFLOWING_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const scrollsInside = (element) => {
    for (let node = element.parentElement; node && node !== document.body;
         node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if (['auto', 'scroll', 'hidden', 'clip'].includes(overflow)) return true;
    }
    return false;
  };
  const sticksOut = (element) => {
    const box = element.getBoundingClientRect();
    return box.width > 0 && box.right > width + 1 && !scrollsInside(element);
  };
  const found = [];
  for (const element of document.body.querySelectorAll('*')) {
    if (!sticksOut(element) || [...element.children].some(sticksOut)) continue;
    const name = element.tagName.toLowerCase() + (element.id ? '#' + element.id : '') +
      (typeof element.className === 'string' && element.className.trim()
        ? '.' + element.className.trim().split(/\\s+/).slice(0, 3).join('.') : '');
    found.push(`${name} to ${Math.round(element.getBoundingClientRect().right)} px`);
    if (found.length >= 5) break;
  }
  return {scrollWidth: document.documentElement.scrollWidth, width, found};
}
"""


def with_axe(context: BrowserContext) -> None:
    """Loads axe-core into every page the context opens from now on (cheaper than adding it to
    each page after it has loaded)."""
    context.add_init_script(path=str(AXE_JS))


def axe_violations(page: Page) -> list[str]:
    """The serious and critical violations axe-core finds on the page as it is now."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE_JS))
    result: dict[str, Any] = page.evaluate(
        """async () => await window.axe.run(document, {
             resultTypes: ['violations'],
             runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',
                                             'best-practice']},
           })"""
    )
    problems = []
    for violation in result["violations"]:
        if violation["impact"] not in BLOCKING_IMPACTS:
            continue
        targets = [json.dumps(node["target"]) for node in violation["nodes"][:3]]
        problems.append(
            f"axe {violation['impact']} {violation['id']}: {violation['help']} at "
            + ", ".join(targets)
        )
    return problems


# The page has loaded and no htmx request is in flight (fragments fetched on load are in).
SETTLED_JS = "() => document.readyState === 'complete' && !document.querySelector('.htmx-request')"


def settled(page: Page) -> None:
    page.wait_for_function(SETTLED_JS)


def panning(page: Page) -> list[str]:
    """Why the document is wider than the viewport, if it is."""
    measured: dict[str, Any] = page.evaluate(OVERFLOWING_JS)
    if measured["scrollWidth"] <= measured["width"]:
        return []
    return [
        f"{measured['scrollWidth']} px wide in a {measured['width']} px viewport: "
        + "; ".join(measured["found"])
    ]


@dataclass
class ConsoleErrors:
    """The console's errors and the uncaught exceptions of a page, from when it is attached."""

    page: Page
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("console", self._console)
        self.page.on("pageerror", self._exception)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.seen.append(f"console: {message.text} ({message.location.get('url', '')})")

    def _exception(self, error: Error) -> None:
        self.seen.append(f"exception: {error}")

    def take(self) -> list[str]:
        taken, self.seen = self.seen, []
        return taken
