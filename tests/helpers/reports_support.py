"""Shared helpers of the reports tests: fixture paths, a LaTeX check, table parsers, a well-formed
result.json and a result.json writer."""
from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark.config import RunSpec
from benchmark.run.identity import method_fingerprint, metrics_fingerprint
from methods.registry import display_name_of, resolved_method_args

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "tests" / "reports" / "fixtures" / "runs"
PAPER_CSV = REPO / "reports" / "paper"
GOLDEN = REPO / "tests" / "reports" / "golden"
PAPER_TEX = REPO.parent / "shared" / "paper" / "vmfproto.tex"

#: a well-formed result.json of the cub_main grid, for tests that break one field of it
GOOD_RESULT = {
    "run_id": "3f2a9c1b7d04",
    "grid": "cub_main",
    "spec": {"dataset": "cub", "backbone": "dinov2_vitb14", "method": "vmfproto",
             "prototypes_per_class": 5, "seed": 0, "variant": "default"},
    "metrics": {"acc": 90.4, "con": 77.7, "sta": 81.3, "dis": 96.9},
    "timing": {"epoch_seconds": 12.1, "inference_images_per_second": 850.0},
    "provenance": {"code_version": "v1", "device": "cpu", "packages": {"torch": "2.14.1"}},
}

_UNESCAPED_AMP = re.compile(r"(?<!\\)&")
_MULTICOLUMN = re.compile(r"^\\multicolumn\{(\d+)\}")


def check_latex(source: str) -> None:
    """Assert that ``source`` would compile in spirit: balanced groups, rows as wide as the spec."""
    depth = 0
    for ch in re.sub(r"\\[{}$&%#_]", "", source):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0, "a } closes nothing"
    assert depth == 0, "unclosed {"
    for env in ("table", "table*", "tabular"):
        assert source.count(f"\\begin{{{env}}}") == source.count(f"\\end{{{env}}}")
    spec = re.search(r"\\begin\{tabular\}\{([^}]*)\}", source).group(1)
    width = len(re.sub(r"[^lcr]", "", spec))
    body = source.split(spec + "}", 1)[1].split("\\end{tabular}", 1)[0]
    rows = 0
    for line in (line.strip() for line in body.strip().splitlines()):
        if line in ("\\toprule", "\\midrule", "\\bottomrule") or line.startswith("\\cmidrule"):
            continue
        assert line.endswith("\\\\"), f"not a row or rule: {line}"
        cells = _UNESCAPED_AMP.split(line[:-2])
        spans = [int(m.group(1)) if (m := _MULTICOLUMN.match(c.strip())) else 1 for c in cells]
        assert sum(spans) == width, f"{sum(spans)} columns, spec has {width}: {line}"
        assert all(len(re.findall(r"(?<!\\)\$", c)) % 2 == 0 for c in cells), f"odd $ in {line}"
        rows += 1
    assert rows > 0


def latex_rows(source: str) -> list[list[str]]:
    """Cells of the tabular's data rows (header rows and full-width headings excluded)."""
    body = source.split("\\midrule", 1)[1].split("\\bottomrule", 1)[0]
    return [
        [c.strip() for c in _UNESCAPED_AMP.split(line.strip()[:-2])]
        for line in body.splitlines()
        if line.strip().endswith("\\\\") and not line.strip().startswith("\\multicolumn")
    ]


def markdown_rows(source: str) -> list[list[str]]:
    """Cells of every table line below the ``|---|`` separator."""
    lines = [line for line in source.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


def write_run(
    root: Path,
    name: str,
    *,
    method: str = "vmfproto",
    J: int = 5,
    seed: int = 0,
    dataset: str = "synthbirds",
    backbone: str = "dinov2_vits14",
    variant: str = "default",
    metrics: dict[str, float | None] | None = None,
    **extra: object,
) -> Path:
    """A minimal ``result.json`` at ``root/name/`` (runner's layout), for report/export/plot tests:
    current (not stale) under the running code unless ``extra`` says otherwise."""
    spec = {"dataset": dataset, "backbone": backbone, "method": method, "prototypes_per_class": J,
            "seed": seed, "variant": variant, "method_args": {}, "map_pool": 1}
    current = RunSpec.from_json(spec)
    payload = {
        "run_id": current.run_id,
        "grid": root.name,
        "spec": spec,
        "method_hyperparameters": resolved_method_args(method, {}),
        "method_fingerprint": method_fingerprint(method),
        "metrics_fingerprint": metrics_fingerprint(),
        "method_display_name": display_name_of(method),  # as the runner records it
        "metrics": metrics if metrics is not None else {"acc": 50.0},
        "timing": {"epoch_seconds": 1.5, "stage_seconds": {"train": 3.0}},
        "provenance": {"code_version": "test", "device": "cpu", "packages": {"torch": "2.14.1"}},
        **extra,
    }
    path = root / name / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path
