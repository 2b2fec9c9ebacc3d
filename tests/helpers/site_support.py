"""The results-site tests' runs: the reports fixtures copied, one run given training curves,
per-image records and an explanation figure, and one run whose display name and CSV-bound cells
are hostile (a script element, a formula)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from benchmark.run.records import write_records
from reports_support import RUNS

HOSTILE_NAME = '<script>alert("pwned")</script>=HYPERLINK("http://x")'
RICH_RUN = ("smoke", "4c037f0069db")


def site_runs(root: Path) -> Path:
    """The runs the site tests build from, under ``root/runs``."""
    runs = root / "runs"
    shutil.copytree(RUNS, runs)
    rich = runs.joinpath(*RICH_RUN)
    epochs = [{"epoch": e, "lr": {"mu": 1e-3}, "seconds": 1.0, "stage": "end_to_end",
               "terms": {"ce": 1.0 / e, "ppd": 0.5 / e}} for e in (1, 2, 3)]
    (rich / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in epochs))
    images = pd.DataFrame({"index": range(6), "image": [f"images/{i}.jpg" for i in range(6)], "label": [0, 1] * 3,
                           "predicted": [0, 1, 1, 1, 0, 0], "correct": [True, True, False, True, True, False],
                           "margin": [0.5, 0.2, -0.1, 0.9, 0.3, -0.4], "sta": [100.0, 80.0, 60.0, 90.0, 70.0, 50.0]})
    write_records(rich, {"per_image": images})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    (rich / "figures").mkdir()
    fig.savefig(rich / "figures" / "image_0.png")
    plt.close(fig)
    hostile = runs / "hostile" / "0123456789ab"
    hostile.mkdir(parents=True)
    result = json.loads(rich.joinpath("result.json").read_text())
    result.update(grid="hostile", run_id="0123456789ab", method_display_name=HOSTILE_NAME)
    result["spec"].update(method="evil_adapter:Evil", variant="=cmd|' /C calc'!A0")
    hostile.joinpath("result.json").write_text(json.dumps(result))
    return runs
