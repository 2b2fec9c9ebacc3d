"""Readers on the fault campaign's round-5 inputs: a result holding ``acc = 1e999`` is skipped by
name in ``site`` as in ``report`` (never a traceback), a ``|`` in a display name cannot split a row
of ``compare``'s markdown, and a user trunk whose patch grid does not tile the image is refused
before compute, naming the patch size its model was built with."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmark.backbones import create_backbone
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from reports.paired import Comparison, render_comparisons
from reports_support import write_run


def test_a_result_with_an_infinite_metric_is_skipped_by_name_by_report_and_site(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs" / "grid"
    write_run(runs, "good", metrics={"acc": 50.0}, seed=0)
    bad = write_run(runs, "bad", metrics={"acc": 60.0}, seed=1)
    bad.write_text(bad.read_text().replace('"acc": 60.0', '"acc": 1e999'))
    for argv in (["report", str(runs)], ["site", str(runs), "--out", str(tmp_path / "site")]):
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert f"skipped {bad} is malformed: metrics.acc = inf is not a finite number in [0, 100]" in err
    assert len(list((tmp_path / "site" / "runs").glob("*.html"))) == 1  # the good run's page only


def test_a_bar_in_a_display_name_stays_in_its_cell_of_the_compare_table() -> None:
    row = Comparison(cell="all", metric="acc", a="Lab | proto", b="vMFProto", difference=1.0, ci_low=0.5,
                     ci_high=1.5, p_value=0.01, p_holm=0.01, prob_improvement=0.75, n_seeds=3, n_images=100,
                     test="test", clipped=False)
    table = render_comparisons([row], "markdown", 0.95)
    header, rule, line = table.splitlines()[:3]
    cells = lambda text: text.replace(r"\|", "").count("|")  # noqa: E731 - the row's cell borders
    assert cells(line) == cells(header) == cells(rule) and r"Lab \| proto" in line


def test_a_user_trunk_whose_patches_do_not_tile_the_image_is_refused_naming_its_patch_size() -> None:
    with pytest.raises(ProtobenchError, match=r"image_size 56 is not a multiple of the patch size 24 of "
                                              r"example_trunk:tiny_vit; use e\.g\. 48"):
        create_backbone("example_trunk:tiny_vit", weights="random", image_size=56, patch_size=24)
    trunk = create_backbone("example_trunk:tiny_vit", weights="random", image_size=48, patch_size=24)
    assert trunk.grid == (2, 2) and math.prod(trunk.grid) == 4
