"""``protobench plan``: every shipped grid plans without its data; costs, caches and arrays."""
from __future__ import annotations

import csv
import json
import re
import tomllib
from pathlib import Path

import pytest

from benchmark.cli import main
from slurm.cluster import ClusterProfile, load_profile
from benchmark.errors import ProtobenchError
from benchmark.grid import load_grid, parse_grid
from benchmark.tools.plan import (
    CUB_TRAIN_IMAGES,
    PAPER_EPOCH_SECONDS,
    PAPER_TRUNK_IMAGES_PER_SECOND,
    augmentation_factor,
    load_perf,
    make_plan,
    paper_costs,
    run_epochs,
    split_images,
)
from methods.registry import list_methods

REPO = Path(__file__).resolve().parent.parent
GRIDS = sorted((REPO / "benchmark" / "grids").glob("*.toml"))
EXAMPLE = REPO / "slurm" / "profiles" / "example.toml"


def grid_methods(path: Path) -> set[str]:
    data = tomllib.loads(path.read_text())
    blocks = [data.get("defaults", {}), *data.get("sweep", [])]
    methods: set[str] = set()
    for block in blocks:
        value = block.get("method", [])
        methods.update(value if isinstance(value, list) else [value])
    return methods


@pytest.mark.parametrize("path", GRIDS, ids=[p.stem for p in GRIDS])
def test_every_grid_file_plans_without_its_data(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = grid_methods(path) - set(list_methods())
    if missing:
        pytest.skip(f"{path.name} names methods not registered yet: {', '.join(sorted(missing))}")
    assert main(["plan", str(path), "--profile", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    grid = load_grid(path)
    assert f"{len(grid.runs)} runs" in out and "GPU-hours" in out and "token cache" in out


def test_plan_lines_are_not_wrapped_under_a_long_checkout_path(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # CI checks out under paths of any length; piped output must keep each line whole (greppable logs).
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    grid = deep / "cub_ablations.toml"
    grid.write_text((REPO / "benchmark" / "grids" / "cub_ablations.toml").read_text())
    assert main(["plan", str(grid), "--profile", str(EXAMPLE)]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.startswith("grid cub_ablations (") and first_line.endswith(f"({EXAMPLE})")
    assert f"{len(load_grid(grid).runs)} runs;" in first_line


def test_paper_grids_have_the_papers_size() -> None:
    sizes = {"cub_main": 7 * 4 * 3 + 2 * 4 * 3 * 4, "dogs": 84, "cars": 84, "runtime": 2,
             "cub_ablations": 9 + 7 + 5}
    for name, size in sizes.items():
        path = REPO / "benchmark" / "grids" / f"{name}.toml"
        missing = grid_methods(path) - set(list_methods())
        if missing:
            continue  # checked once the methods land (the plan test above says which)
        assert len(load_grid(path).runs) == size, name


def test_ablation_variants_are_the_report_layouts() -> None:
    from reports.layouts import LAYOUTS

    expected = {row.where["variant"] for name in ("ablation", "gating", "offline_aug", "expanded")
                for row in LAYOUTS[name].body if "variant" in getattr(row, "where", {})} - {"default"}
    data = tomllib.loads((REPO / "benchmark" / "grids" / "cub_ablations.toml").read_text())
    assert {block["variant"] for block in data["sweep"]} == expected


def test_default_costs_are_the_papers_runtime_table() -> None:
    with (REPO / "reports" / "paper" / "runtime.csv").open() as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    # the paper's epochs run the trunk at every step (reports/columns.py)
    assert {m: float(r["epoch_seconds_live_trunk"]) for m, r in rows.items()} == PAPER_EPOCH_SECONDS
    assert float(rows["nppp"]["inference_images_per_second"]) == PAPER_TRUNK_IMAGES_PER_SECOND
    tex = (REPO.parent / "shared" / "paper" / "vmfproto.tex")
    if tex.exists():
        table = tex.read_text().split(r"\label{tab:supp_runtime}")[1][:600]
        assert re.search(r"NPPP & 76\.9 & 189\.0", table) and re.search(r"method\{\} & 206\.8 & 73\.0", table)


def grid_of(**defaults: object):
    base = {"dataset": "cub", "data_root": "/nowhere", "backbone": "dinov2_vitb14", "method": "vmfproto",
            "prototypes_per_class": 5}
    return parse_grid({"name": "g", "defaults": {**base, **defaults}}, source="t")


def test_run_cost_scales_with_epochs_dataset_size_and_augmentation() -> None:
    costs = paper_costs()
    (cub,) = make_plan(grid_of(), ClusterProfile(), costs).runs
    assert cub.epochs == 20 and cub.hours == pytest.approx(20 * 206.8 / 3600)
    (dogs,) = make_plan(grid_of(dataset="dogs"), ClusterProfile(), costs).runs
    assert dogs.hours == pytest.approx(cub.hours * 12000 / CUB_TRAIN_IMAGES)
    (short,) = make_plan(grid_of(method_args={"end_to_end_epochs": 9}), ClusterProfile(), costs).runs
    assert short.epochs == 10 and short.hours == pytest.approx(cub.hours / 2)
    (aug,) = make_plan(grid_of(augmentation="offline40"), ClusterProfile(), costs).runs
    assert aug.hours == pytest.approx(cub.hours * augmentation_factor("offline40"))
    assert augmentation_factor("offline40") == 40  # the paper's 40× (benchmark/data/augment.py)


def test_gpu_hours_count_gpus_per_job_and_cache_passes() -> None:
    plan = make_plan(grid_of(), ClusterProfile(), paper_costs())
    images = 5994 + 5794 + 5794  # train clean, test clean, test noise (seed 0)
    assert plan.cache_hours == pytest.approx(images / PAPER_TRUNK_IMAGES_PER_SECOND / 3600)
    startup = ClusterProfile().task_startup_s / 3600  # one array task
    assert plan.gpu_hours == pytest.approx(plan.runs[0].hours + startup + plan.cache_hours)


def test_demo_grid_plan_lists_its_caches() -> None:
    plan = make_plan(load_grid(REPO / "benchmark" / "grids" / "demo.toml"), ClusterProfile(), paper_costs())
    assert len(plan.runs) == 4 and len(plan.arrays) == 1
    views = sorted((c.split, c.view, c.images, readers) for c, readers in plan.caches)
    # one stability-noise entry (the fixed STABILITY_NOISE_SEED) read by both seeds' runs
    assert views == [("test", "clean", 120, 4), ("test", "noise seed 0", 120, 4), ("train", "clean", 120, 4)]


def test_synthbirds_sizes_follow_its_split_rule() -> None:
    spec = grid_of(dataset="synthbirds", dataset_args={"classes": 3, "images_per_class": 7}).runs[0]
    assert (split_images(spec, "train"), split_images(spec, "test")) == (12, 9)


def test_backbone_shapes_make_arrays() -> None:
    grid = parse_grid({"name": "g", "defaults": {"dataset": "cub", "data_root": "x", "method": "vmfproto",
                                                 "prototypes_per_class": 5},
                       "sweep": [{"backbone": ["dinov2_vitb14", "dinov2_vits14"]}]}, source="t")
    plan = make_plan(grid, load_profile(EXAMPLE), paper_costs())
    assert sorted(len(runs) for _, runs in plan.arrays) == [1, 1]


def perf_row(method: str = "vmfproto", backbone: str = "dinov2_vitb14", classes: int = 200, **over: object) -> dict:
    """A row as `protobench perf --out` writes it (only the fields plan reads)."""
    stages = {"vmfproto": [("discovery", 0.01), ("end_to_end", 0.02)], "nppp": [("discovery", 0.01), ("finetune", 0.005)]}
    row = {"run": f"{method} J=5 seed=0 {backbone} synthbirds", "method_name": method, "backbone": backbone,
           "tokens": 256, "embed_dim": 768 if "vitb" in backbone else 384, "classes": classes,
           "prototypes_per_class": 5, "device": "cuda: H100", "train_images": 100, "test_images": 50,
           "stages": [{"name": n, "epochs": 1, "trains": n != "discovery", "step_seconds_per_image": v,
                       "on_stage_start_seconds": 2.0, "on_epoch_end_seconds": 1.0} for n, v in stages[method]],
           "last_training_stage": stages[method][-1][0], "evaluate_seconds": 5.0, "trunk_images_per_second": 1000.0}
    return {**row, **over}


def test_measured_costs_replace_the_papers(tmp_path: Path) -> None:
    path = tmp_path / "perf.json"
    path.write_text(json.dumps([perf_row(), perf_row("nppp")]))
    costs = load_perf(path)
    (run,) = make_plan(grid_of(), ClusterProfile(), costs).runs
    # vmfproto's default schedule: discovery 1 epoch, end_to_end 19; CUB 5,994 train / 5,794 test
    expected = (1 * 0.01 + 19 * 0.02) * 5994 + 2 * (2.0 + 1.0) * 5994 / 100 + 5.0 * 5794 / 50
    assert run.hours == pytest.approx(expected / 3600)
    assert run.source == "measured (vmfproto J=5 seed=0 dinov2_vitb14 synthbirds)"
    (nppp,) = make_plan(grid_of(method="nppp"), ClusterProfile(), costs).runs
    assert nppp.hours == pytest.approx(((0.01 + 19 * 0.005) * 5994 + 6.0 * 5994 / 100 + 5.0 * 5794 / 50) / 3600)
    assert run_epochs(grid_of().runs[0]) == 20


def test_other_shapes_are_scaled_by_block_and_head_flops(tmp_path: Path) -> None:
    path = tmp_path / "perf.json"
    path.write_text(json.dumps([perf_row(classes=10)]))
    costs = load_perf(path)
    (measured,) = make_plan(grid_of(dataset="synthbirds", dataset_args={"classes": 10, "images_per_class": 24}),
                            ClusterProfile(), costs).runs
    assert measured.source.startswith("measured (")
    (cub,) = make_plan(grid_of(), ClusterProfile(), costs).runs
    (vits,) = make_plan(grid_of(backbone="dinov2_vits14"), ClusterProfile(), costs).runs
    unscaled = (1 * 0.01 + 19 * 0.02) * 5994 + 6.0 * 5994 / 100 + 5.0 * 5794 / 50
    # multiply-adds per image, T = 256 tokens: block T(12d² + 2Td) + heads C·J·T·d
    measured_flops = 256 * (12 * 768**2 + 2 * 256 * 768) + 10 * 5 * 256 * 768
    cub_flops = 256 * (12 * 768**2 + 2 * 256 * 768) + 200 * 5 * 256 * 768
    vits_flops = 256 * (12 * 384**2 + 2 * 256 * 384) + 200 * 5 * 256 * 384
    assert cub.hours == pytest.approx(unscaled * cub_flops / measured_flops / 3600)
    assert vits.hours == pytest.approx(unscaled * vits_flops / measured_flops / 3600)
    assert "scaled from measured" in cub.source and "C=10" in cub.source and "C=200" in cub.source
    (other,) = make_plan(grid_of(method="tesnet"), ClusterProfile(), costs).runs
    assert other.source == "paper (nppp's)"


@pytest.mark.parametrize("content, needle", [
    (None, "does not exist"),
    ("{", "is not JSON"),
    ('{"run": 1}', "is not the output of `protobench perf --out`"),
    ('[{"run": "x", "train_images": 1, "epoch_seconds_from_cache": 1, "trunk_images_per_second": 1}]',
     "written by an older `protobench perf`"),
    (json.dumps([{**perf_row(), "tokens": "many"}]), "has a malformed row"),
])
def test_bad_perf_files_are_one_clear_error(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "perf.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ProtobenchError, match=re.escape(needle)):
        load_perf(path)


def test_offline40_runs_of_two_seeds_read_one_augmented_cache_and_the_clean_split() -> None:
    grid = parse_grid({"name": "g", "defaults": {"dataset": "cub", "data_root": "/nowhere", "backbone": "dinov2_vitb14",
                                                 "method": "protopnet", "prototypes_per_class": 5,
                                                 "augmentation": "offline40"},
                       "sweep": [{"seed": [0, 1]}]}, source="t")
    plan = make_plan(grid, ClusterProfile(), paper_costs())
    train = sorted((c.view, c.images, readers) for c, readers in plan.caches if c.split == "train")
    # push reads the clean split; the epochs read the one augmented set (augmentation seed 0)
    assert train == [("clean", 5994, 2), ("offline40 seed 0", 40 * 5994, 2)]
