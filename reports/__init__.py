"""Paper-layout tables from finished runs: tidy results frame → LaTeX (booktabs) or markdown.

Reports read only ``result.json`` files and CSVs; they never import training code.
"""
from reports.layouts import LAYOUTS, list_layouts
from reports.load import load_csv, load_results
from reports.render import RenderedReport, render_report

__all__ = ["LAYOUTS", "RenderedReport", "list_layouts", "load_csv", "load_results", "render_report"]
