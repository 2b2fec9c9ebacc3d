"""The static results site (``protobench site``): plain HTML pages that open from ``file://``,
Plotly's JavaScript as a local asset, every string from the data escaped; built from the tidy
frame of ``reports.load.load_runs`` and the runs' own files, never executing any of them."""
