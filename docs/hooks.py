"""MkDocs hooks: the reference pages' generated parts, written from the code at build time.

A page holds ``<!-- generated: NAME -->`` on a line of its own (and, as committed, the block up to
``<!-- end generated: NAME -->``) where the generator ``NAME`` of
``benchmark.cli.docs_catalog.PAGES`` (the CLI from the argparse parser, grid keys from RunSpec,
methods from the registry, metrics, datasets, backbones) puts its markdown; the block is written
afresh here (``benchmark.cli.docs_pages``). An unknown name fails the build.
"""
from __future__ import annotations


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - MkDocs' hook signature
    from benchmark.cli.docs_pages import filled

    return filled(markdown, page.file.src_path, markers=False)
