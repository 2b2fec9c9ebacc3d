"""Tables, exports and plots from finished runs: tidy results frame → LaTeX, markdown, CSV, figures.

Reports read only ``result.json`` files, ``metrics.jsonl`` and CSVs; they never import training
code. The pieces: ``reports.load`` (results and CSVs → tidy frame), ``reports.layouts`` (the
paper's tables as data), ``reports.pivot`` (a layout for any grid), ``reports.render`` (frame +
layout → text), ``reports.export`` (one flat row per run), ``reports.plots`` and
``reports.curves`` (figures); the commands that call them (``protobench report``, ``export``,
``compare``, ``plot``) are the CLI's, in ``benchmark.cli.results``.
"""
