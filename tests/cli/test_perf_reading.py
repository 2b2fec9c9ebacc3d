"""``protobench perf --reading N``: the synthetic result set written with the suite's own writers
(records the readers accept, metrics equal to their records), the reading commands timed side by
side as their own processes, the table and its JSON, reuse of a kept set, and bad options refused
before anything is written."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.estimates.reading_perf import READING_COMMANDS, time_command
from benchmark.estimates.reading_set import (MAX_READING_RUNS, READING_METHODS, reading_specs,
                                             write_reading_set)


def test_the_layout_fills_one_cell_after_another() -> None:
    specs = reading_specs(MAX_READING_RUNS)
    assert len(specs) == 420 and len({s.run_id for s in specs}) == 420
    first = specs[:105]  # one backbone: 7 methods × J {3, 5, 10} × 5 seeds
    assert {s.backbone for s in first} == {"dinov2_vitb14"}
    assert {(s.method, s.prototypes_per_class, s.seed) for s in first} == {
        (m, j, seed) for m in READING_METHODS for j in (3, 5, 10) for seed in range(5)}
    assert [s.method for s in specs[:7]] == list(READING_METHODS)  # seven runs: every method of the first cell
    with pytest.raises(ProtobenchError, match="1 to 420 runs"):
        reading_specs(421)


def test_the_set_is_what_the_readers_read(tmp_path: Path) -> None:
    from benchmark.run.records import read_records
    from reports.load import load_runs

    written = write_reading_set(tmp_path / "runs", 14, images=40)
    frame = load_runs([written.root], csv=False)
    assert len(frame) == 14 and frame["seed"].tolist().count(1) == 7
    for row in frame.itertuples():
        records = read_records(Path(row.run_dir))  # the schema check of every read
        prototypes = read_records(Path(row.run_dir), "per_prototype")
        assert len(records) == 40 and len(prototypes) == 200 * row.J
        assert row.acc == pytest.approx(100 * records["correct"].mean(), abs=1e-9)
        assert row.sanity == pytest.approx(np.nanmean(records["sanity"]), abs=1e-9)
        assert row.con == pytest.approx(prototypes["con"].mean(), abs=1e-9)
    assert write_reading_set(written.root, 14, images=40) == written  # the same set again: reused


def test_perf_reading_times_every_command_and_writes_the_table_and_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "perf.json"
    assert main(["perf", "--reading", "21", "--reading-images", "40", "--reading-dir", str(tmp_path / "kept"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    assert (document["runs"], document["images"]) == (21, 40)
    assert [t["command"] for t in document["timings"]] == [c.label for c in READING_COMMANDS]
    for timing in document["timings"]:
        assert timing["user_s"] > 0 and timing["wall_s"] > 0 and timing["peak_mib"] > 20
        assert f"| {timing['command']} |" in printed
    assert "load average" in printed
    outputs = tmp_path / "kept" / "outputs"
    assert "Kendall's τ" in (outputs / "agreement.md").read_text()
    assert (outputs / "site" / "agreement.html").is_file() and (outputs / "leaderboard" / "leaderboard.json").is_file()
    compared = [line for line in (outputs / "compare.md").read_text().splitlines() if line.startswith("| ")]
    assert sum(" vMFProto " in line for line in compared) >= 6  # every other method against vMFProto
    assert main(["perf", "--reading", "14", "--reading-images", "40", "--reading-dir", str(tmp_path / "kept")]) == 2
    refused = capsys.readouterr().err
    assert "--reading-dir: " in refused and "does not hold the synthetic set of 14 runs" in refused


@pytest.mark.parametrize("argv, message", [
    (["--reading", "0"], "--reading 0: the synthetic set holds 1 to 420 runs"),
    (["--reading", "7", "--reading-images", "10"], "at least 30 test images"),
    (["--reading", "7", "--paper-scale"], "leave out --paper-scale"),
    (["--reading", "7", "--repeats", "0"], "--repeats 0 must be ≥ 1"),
    (["--reading", "7", "--runs-dir", "elsewhere"], "leave out --runs-dir"),
])
def test_bad_reading_options_are_refused_before_anything_is_written(argv: list[str], message: str,
                                                                   tmp_path: Path, capsys) -> None:
    assert main(["perf", *argv, "--reading-dir", str(tmp_path / "kept")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "kept").exists()


def test_a_failing_command_is_one_error_with_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match=r"exit 1\): .*boom"):
        time_command(["-c", "import sys; sys.exit('boom')"], "python", cli=(sys.executable,))
    timing = time_command(["-c", "x = bytearray(200 << 20); sum(range(10**6))"], "python", cli=(sys.executable,),
                          env={**os.environ})
    assert timing.peak_mib >= 200 and timing.cpu_s > 0  # the child's own peak and CPU, from the kernel
