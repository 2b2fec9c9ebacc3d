"""The generated parts of the docs' reference pages, kept in the repository so that GitHub shows
them: each page holds ``<!-- generated: NAME -->`` … ``<!-- end generated: NAME -->`` around what
the generator ``NAME`` of :data:`benchmark.cli.docs_catalog.PAGES` writes. ``docs/hooks.py`` fills
the blocks afresh when the site is built; ``python -m benchmark.cli.docs_pages`` (``make
docs-reference``) writes them into the pages, and a test fails when a committed page differs."""
from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

#: an opening marker on a line of its own, then (once written) the block up to its closing marker
BLOCK = re.compile(r"^<!-- generated: ([a-z-]+) -->(?:\n.*?^<!-- end generated: \1 -->)?$", re.M | re.S)
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
REFRESH_COMMAND = "make docs-reference"


def filled(markdown: str, where: str, pages: dict[str, Callable[[], str]] | None = None, *,
           markers: bool = True) -> str:
    """``markdown`` with every generated block written afresh (``markers=False``: without the
    marker lines, as the built site shows it); an unknown generator is an error."""
    if pages is None:
        from benchmark.cli.docs_catalog import PAGES as pages

    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in pages:
            raise KeyError(f"{where}: no generator {name!r}; known: {', '.join(pages)}")
        body = pages[name]()
        body = body.rstrip("\n")
        return f"<!-- generated: {name} -->\n{body}\n<!-- end generated: {name} -->" if markers else body

    return BLOCK.sub(generate, markdown)


def refresh(folder: Path = REFERENCE) -> list[Path]:
    """Write every reference page's generated blocks from the code; the pages that changed."""
    changed = []
    for page in sorted(folder.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        new = filled(text, str(page))
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    for path in refresh():
        print(f"refreshed {path}")
    sys.exit(0)
