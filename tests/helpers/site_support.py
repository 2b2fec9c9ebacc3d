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
    # 36 images (the block of 6 six times): at least the 30 an interval over test images needs
    # (reports.stats.MIN_IMAGES)
    n = 36
    images = pd.DataFrame({"index": range(n), "image": [f"images/{i}.jpg" for i in range(n)], "label": [0, 1] * (n // 2),
                           "predicted": [0, 1, 1, 1, 0, 0] * (n // 6),
                           "correct": [True, True, False, True, True, False] * (n // 6),
                           "margin": [0.5, 0.2, -0.1, 0.9, 0.3, -0.4] * (n // 6),
                           "sta": [100.0, 80.0, 60.0, 90.0, 70.0, 50.0] * (n // 6)})
    write_records(rich, {"per_image": images})
    result = json.loads(rich.joinpath("result.json").read_text())
    result["evaluation"]["num_images"] = len(images)  # the records cover the whole (toy) test split
    rich.joinpath("result.json").write_text(json.dumps(result))
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
