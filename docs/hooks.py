"""MkDocs hooks: the reference pages' generated parts, written from the code at build time.

A page holds ``<!-- generated: NAME -->`` on a line of its own where the generator ``NAME`` of
``benchmark.cli.docs_catalog.PAGES`` (the CLI from the argparse parser, grid keys from RunSpec,
methods from the registry, metrics, datasets, backbones) puts its markdown. An unknown name fails
the build.
"""
from __future__ import annotations

import re

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - MkDocs' hook signature
    from benchmark.cli.docs_catalog import PAGES

    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PAGES:
            raise KeyError(f"{page.file.src_path}: no generator {name!r}; known: {', '.join(PAGES)}")
        return PAGES[name]()

    return MARKER.sub(generate, markdown)
