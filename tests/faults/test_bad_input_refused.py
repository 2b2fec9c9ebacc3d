"""Bad input is refused before compute with one clear error: a seed past 2^63 - 1, integer fields
past their bounds, CUDA asked for without CUDA, a pipe in a display name (kept inside its markdown
cell), an unwritable export path, and `cache rm` of a symlinked entry (the link removed, not its
target). (Source: the fault campaign of issue 18.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cache_helpers import NAME, build_toy
from reports_support import GOOD_RESULT
from tiny_grid import tiny_grid, write_tiny_grid

import benchmark.cache.entry as entries
from benchmark.backbones import FrozenTrunk
from benchmark.cli import main
from benchmark.config import build_run_spec
from benchmark.errors import ProtobenchError


# ---- bad inputs -----------------------------------------------------------------------------------
def test_bad_input_seed_2_63_minus_1_is_refused_before_any_trunk_forward(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    write_tiny_grid(tmp_path / "grid.toml", "camp", tmp_path / "data", device="cpu")

    def no_forward(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trunk ran")

    monkeypatch.setattr(FrozenTrunk, "forward", no_forward)
    assert main(["run", str(tmp_path / "grid.toml"), "--runs-dir", str(tmp_path / "runs"),
                 "--set", "seed=9223372036854775807"]) == 2
    assert "seed = 9223372036854775807 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "camp").exists()


def test_bad_input_an_integer_field_is_bounded_where_validated(tmp_path: Path) -> None:
    values = tiny_grid("camp", tmp_path).runs[0].to_json()
    with pytest.raises(ProtobenchError, match="grid: dataset_args.classes = 1000000000000 is out of range"):
        build_run_spec({**values, "dataset_args": {"classes": 10**12}}, where="grid")
    with pytest.raises(ProtobenchError, match="grid: batch_size = 4294967296 is out of range"):
        build_run_spec({**values, "batch_size": 2**32}, where="grid")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_bad_input_cuda_without_cuda_is_a_validation_error_with_no_run_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tiny_grid(tmp_path / "grid.toml", "camp", tmp_path / "data", device="cpu")
    assert main(["run", str(tmp_path / "grid.toml"), "--runs-dir", str(tmp_path / "runs"), "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "camp").exists()


def test_bad_input_a_pipe_in_a_display_name_does_not_split_its_markdown_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / "g" / "r"
    run.mkdir(parents=True)
    own = {**GOOD_RESULT, "spec": {**GOOD_RESULT["spec"], "method": "my_adapter:Mine"}}
    (run / "result.json").write_text(json.dumps({**own, "method_display_name": "Mine | v2"}))
    assert main(["report", str(tmp_path / "runs")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert "Mine \\| v2" in "\n".join(rows)
    assert len({line.replace("\\|", "").count("|") for line in rows}) == 1  # every row has the header's columns


def test_bad_input_export_to_an_unwritable_path_is_one_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / "g" / "r"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(GOOD_RESULT))
    assert main(["export", str(tmp_path / "runs"), "--out", "/proc/x.csv"]) == 2
    err = capsys.readouterr().err
    assert "cannot write /proc/x.csv" in err and ".tmp" not in err


def test_bad_input_cache_rm_of_an_entry_that_is_a_symlink_removes_the_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry, _ = build_toy(tmp_path / "elsewhere")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / NAME).symlink_to(entry.path)
    assert main(["cache", "rm", NAME, "--cache-dir", str(cache)]) == 0
    assert not (cache / NAME).is_symlink() and entries.verify_entry(entry.path) == []
    assert list(cache.iterdir()) == []  # nothing left renamed aside
