"""The leaderboard guide's two-lab example (docs/guides/leaderboard.md) with runs trained here: two
labs train one public grid each on their own machine (the same run ids, each lab's own content),
bundle it, and the maintainer builds one leaderboard of both: every entry holds both labs'
(source, seed) replicates, and the between-lab check is reported."""
from __future__ import annotations

import json
from pathlib import Path

from benchmark.cli import main
from tiny_grid import write_tiny_grid


def test_two_independently_trained_copies_of_one_grid_build_one_leaderboard(tmp_path: Path) -> None:
    grid = write_tiny_grid(tmp_path / "public.toml", "public", tmp_path / "synthbirds", device="cpu",
                           method_args={"end_to_end_epochs": 1},
                           sweep=[{"seed": [0, 1]}])
    for lab in ("labA", "labB"):  # each lab trains the grid itself, into its own runs folder
        assert main(["run", str(grid), "--runs-dir", str(tmp_path / lab / "runs")]) == 0
        assert main(["bundle", str(tmp_path / lab / "runs" / "public"), "--out", str(tmp_path / f"{lab}-bundle")]) == 0
    ids = [sorted(p.parent.name for p in (tmp_path / f"{lab}-bundle").glob("public/*/result.json"))
           for lab in ("labA", "labB")]
    assert ids[0] == ids[1] and len(ids[0]) == 2  # one grid: the same run ids in both labs
    out = tmp_path / "leaderboard"
    assert main(["leaderboard", str(tmp_path / "labA-bundle.tar.gz"), str(tmp_path / "labB-bundle"),
                 "--out", str(out)]) == 0
    document = json.loads((out / "leaderboard.json").read_text())
    assert [(s["name"], s["verification"], s["runs"]) for s in document["sources"]] == [
        ("labA-bundle.tar.gz", "verified", 2), ("labB-bundle", "verified", 2)]
    (board,) = document["boards"]
    (entry,) = board["entries"]
    assert [(r["source"], r["seed"]) for r in entry["replicates"]] == [
        ("labA-bundle.tar.gz", 0), ("labA-bundle.tar.gz", 1), ("labB-bundle", 0), ("labB-bundle", 1)]
    (standing,) = next(r for r in board["rankings"] if r["metric"] == "acc")["standings"]
    check = standing["between_labs"]
    assert (check["n_runs"], check["n_sources"]) == (4, 2) and check["test"].startswith("one-way ANOVA F test")
    assert [x["n_seeds"] for x in standing["per_source"]] == [2, 2] and standing["n_seeds"] == 4
    assert "Between labs" in (out / "leaderboard.md").read_text()
