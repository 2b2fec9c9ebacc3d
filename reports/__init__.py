"""Paper-layout tables from finished runs: tidy results frame → LaTeX (booktabs) or markdown.

Reports read only ``result.json`` files and CSVs; they never import training code. The pieces:
``reports.load`` (results and CSVs → tidy frame), ``reports.layouts`` (the paper's tables as
data), ``reports.render`` (frame + layout → text), ``reports.cli`` (``protobench report``).
"""
