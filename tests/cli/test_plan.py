"""``protobench plan``: every shipped grid plans without its data; costs, caches and arrays."""
from __future__ import annotations

import csv
import json
import re
import tomllib
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.cluster import ClusterProfile, load_profile
from benchmark.errors import ProtobenchError
from benchmark.grid import load_grid, parse_grid
from benchmark.estimates.costmodel import CALIBRATION_EPOCH_SECONDS, Calibration, CostModel, Device
from benchmark.estimates.costs import PAPER_SHAPE, PAPER_TRUNK_DEPTH, load_perf, model_costs
from benchmark.estimates.plan import GB, make_plan, training_reads
from benchmark.estimates.workload import Shape, run_epochs, split_images, trunk_macs
from methods.registry import list_methods

REPO = Path(__file__).resolve().parents[2]
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


def test_the_model_is_calibrated_on_the_papers_runtime_table() -> None:
    with (REPO / "reports" / "paper" / "runtime.csv").open() as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    # the paper's epochs run the trunk at every step (reports/columns.py)
    assert {m: float(r["epoch_seconds_live_trunk"]) for m, r in rows.items()} == CALIBRATION_EPOCH_SECONDS
    tex = (REPO.parent / "shared" / "paper" / "vmfproto.tex")
    if tex.exists():
        table = tex.read_text().split(r"\label{tab:supp_runtime}")[1][:600]
        assert re.search(r"NPPP & 76\.9 & 189\.0", table) and re.search(r"method\{\} & 206\.8 & 73\.0", table)


def grid_of(**defaults: object):
    base = {"dataset": "cub", "data_root": "/nowhere", "backbone": "dinov2_vitb14", "method": "vmfproto",
            "prototypes_per_class": 5}
    return parse_grid({"name": "g", "defaults": {**base, **defaults}}, source="t")


def test_model_arithmetic_matches_a_hand_computed_case() -> None:
    model = CostModel(Device("X", bf16_tflops=100, fp32_tflops=10, memory_gb_s=1000),
                      Calibration(achieved_fraction=0.5, overhead_bytes_per_image={"vmfproto": 2e9}))
    case = dict(head_macs=1e9, live_trunk_macs=0.0, epochs=2, pushes=1, train_images=100, push_images=50,
                test_images=30)
    fp32 = model.run_cost(method="vmfproto", precision="fp32", **case)
    # 2 FLOPs per MAC at 0.5 × 10 TFLOP/s: epoch 3·1e9·100 MACs → 0.12 s + 2e9 B·100 / 1e12 B/s = 0.2 s
    assert (fp32.epochs, fp32.pushes, fp32.evaluation) == pytest.approx((2 * 0.32, 0.02, 0.012))
    bf16 = model.run_cost(method="vmfproto", precision="bf16", **case)
    assert bf16.total == pytest.approx(2 * (0.012 + 0.2) + 0.002 + 0.0012)
    live = model.run_cost(method="nppp", precision="fp32", **{**case, "live_trunk_macs": 4e9})
    assert live.total == pytest.approx(2 * 7e11 / 2.5e12 + 5 * 5e10 / 2.5e12 + 5 * 3e10 / 2.5e12)


def test_trunk_multiply_adds_match_timms_published_count() -> None:
    # timm's model table: vit_base_patch16_224 17.6 GMACs — 12 blocks on 196 patches + the class
    # token, plus the patch embedding (196 × 16·16·3 × 768); rounded to 0.1 G
    patch_embedding = 196 * 16 * 16 * 3 * 768
    assert 12 * Shape(197, 768, 0, 0).block_macs() + patch_embedding == pytest.approx(17.6e9, rel=0.005)
    (spec,) = grid_of().runs
    assert trunk_macs(spec) == PAPER_TRUNK_DEPTH * PAPER_SHAPE.block_macs()  # dinov2_vitb14 at 224, CUB


def test_calibration_reproduces_the_papers_rtx8000_epochs() -> None:
    rtx = model_costs("RTX8000").model
    for method, seconds in CALIBRATION_EPOCH_SECONDS.items():
        epoch = rtx.run_cost(method=method, precision="fp32", head_macs=PAPER_SHAPE.flops(),
                             live_trunk_macs=PAPER_TRUNK_DEPTH * PAPER_SHAPE.block_macs(), epochs=1, pushes=0,
                             train_images=5994, push_images=0, test_images=0)
        assert epoch.total == pytest.approx(seconds)
    # the fraction by hand: 2·(12·block + 3·head)·5,994 FLOPs in 76.9 s at 16.3 TFLOP/s
    block, head = 256 * (12 * 768**2 + 2 * 256 * 768), 256 * (12 * 768**2 + 2 * 256 * 768) + 200 * 5 * 256 * 768
    assert rtx.calibration.achieved_fraction == pytest.approx(2 * (12 * block + 3 * head) * 5994 / 76.9 / 16.3e12)
    h100 = model_costs().model  # the same fraction at H100's fp32 peak; non-matmul work at its bandwidth
    assert h100.compute_seconds(1e12, "fp32") == pytest.approx(rtx.compute_seconds(1e12, "fp32") * 16.3 / 66.9)
    assert h100.overhead_seconds("vmfproto", 5994) == pytest.approx((206.8 - 76.9) * 672 / 3350)


def test_run_cost_is_the_sum_of_its_phases_and_follows_the_device() -> None:
    (run,) = make_plan(grid_of(), ClusterProfile(), model_costs()).runs
    assert run.epochs == 20 and run.source == "model (H100)"
    model = model_costs().model
    head = PAPER_SHAPE.flops()
    compute = (20 * (model.compute_seconds(3 * head * 5994, "fp32") + model.overhead_seconds("vmfproto", 5994))
               + model.compute_seconds(head * 2 * 5794, "fp32"))  # no push; clean + noisy test views
    read = run.reads.entry.bytes / GB  # 4.7 GB fits in 32 GB of memory: read once at 1 GB/s
    assert not run.reads.every_epoch and run.hours == pytest.approx((compute + read) / 3600)
    (protopnet,) = make_plan(grid_of(method="protopnet"), ClusterProfile(), model_costs()).runs
    assert protopnet.source == "model (H100, FLOPs only)"
    (a100,) = make_plan(grid_of(method="protopnet"), ClusterProfile(device_model="A100"), model_costs("A100")).runs
    assert a100.hours * 3600 - read == pytest.approx((protopnet.hours * 3600 - read) * 66.9 / 19.5)


def test_gpu_hours_count_gpus_per_job_and_cache_passes() -> None:
    plan = make_plan(grid_of(), ClusterProfile(), model_costs())
    model = model_costs().model
    trunk = PAPER_TRUNK_DEPTH * PAPER_SHAPE.block_macs()
    images = 5994 + 5794 + 5794  # train clean, test clean, test noise (seed 0)
    written = sum(need.bytes for need, _ in plan.caches) / GB  # at 1 GB/s
    assert plan.cache_hours == pytest.approx((model.compute_seconds(trunk * images, "fp32") + written) / 3600)
    startup = ClusterProfile().task_startup_s / 3600  # one array task
    assert plan.gpu_hours == pytest.approx(plan.runs[0].hours + startup + plan.cache_hours)


def test_offline40_entry_read_every_epoch_states_its_io_and_recommends_local(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (shared,) = grid_of(method="protopnet", augmentation="offline40").runs
    reads = training_reads(shared, ClusterProfile())
    # 239,760 images × 257 tokens × 768 fp16 (no early tokens for ProtoPNet): 95 GB > 32 GB of memory
    assert reads.entry.view == "offline40 seed 0" and reads.entry.bytes > 90 * GB and reads.every_epoch
    assert reads.epoch_seconds == pytest.approx(reads.entry.bytes / GB)  # at 1 GB/s
    assert reads.seconds == pytest.approx(run_epochs(shared) * reads.entry.bytes / GB)
    (local,) = grid_of(method="protopnet", augmentation="offline40", cache_stage="local").runs
    staged = training_reads(local, ClusterProfile())  # one copy, then node-local reads at 2 GB/s
    assert staged.seconds == pytest.approx(reads.entry.bytes / GB + run_epochs(local) * reads.entry.bytes / 2 / GB)
    grid = tmp_path / "aug.toml"
    grid.write_text('name = "aug"\n[defaults]\ndataset = "cub"\ndata_root = "/nowhere"\nbackbone = "dinov2_vitb14"\n'
                    'method = "protopnet"\nprototypes_per_class = 5\naugmentation = "offline40"\n'
                    '[[sweep]]\nprecision = ["fp32", "bf16"]\n')
    assert main(["plan", str(grid)]) == 0
    out = capsys.readouterr().out
    assert f"2 run(s) read the dinov2_vitb14 offline40 seed 0 training entry ({reads.entry.bytes / GB:.0f} GB" in out
    assert f"every epoch from shared storage at 1 GB/s: {reads.entry.bytes / GB:.0f} s per epoch" in out
    # fp32: ~160 s of H100 compute per epoch, more than the 95 s read; bf16: ~11 s, so the read dominates
    assert 'longer than the epoch\'s compute in 1 of them — set cache_stage = "local"' in out


def test_plan_prints_the_model_its_device_and_assumptions(capsys: pytest.CaptureFixture[str]) -> None:
    grid = str(REPO / "benchmark" / "grids" / "cub_main.toml")
    assert main(["plan", grid]) == 0
    out = capsys.readouterr().out
    assert "cost model: FLOPs-and-bytes model on H100" in out and "assumptions:" in out
    assert "calibrated on the paper's live-trunk RTX8000 epochs (NPPP 76.9 s, vMFProto 206.8 s" in out
    assert "run(s): model (H100)" in out and "storage: token-cache entries written, and training entries read, at 1 GB/s" in out
    assert main(["plan", grid, "--device-model", "V100"]) == 0
    assert "cost model: FLOPs-and-bytes model on V100" in capsys.readouterr().out


def test_profile_names_the_device_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('device_model = "A100"\nstorage_gb_s = 0.5\n')
    grid = str(REPO / "benchmark" / "grids" / "demo.toml")
    assert main(["plan", grid, "--profile", str(profile)]) == 0
    assert "cost model: FLOPs-and-bytes model on A100" in capsys.readouterr().out
    profile.write_text('device_model = "B200"\n')
    with pytest.raises(ProtobenchError, match="device_model = 'B200' must be one of H100, H200, A100, V100, RTX8000"):
        load_profile(profile)


def test_demo_grid_plan_lists_its_caches() -> None:
    plan = make_plan(load_grid(REPO / "benchmark" / "grids" / "demo.toml"), ClusterProfile(), model_costs())
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
    plan = make_plan(grid, load_profile(EXAMPLE), model_costs())
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
    # vmfproto's default schedule: discovery 1 epoch, end_to_end 19; CUB 5,994 train / 5,794 test;
    # the training entry (within the job's memory) read once at 1 GB/s
    read = run.reads.entry.bytes / GB
    expected = (1 * 0.01 + 19 * 0.02) * 5994 + 2 * (2.0 + 1.0) * 5994 / 100 + 5.0 * 5794 / 50 + read
    assert run.hours == pytest.approx(expected / 3600)
    assert run.source == "measured (vmfproto J=5 seed=0 dinov2_vitb14 synthbirds)"
    (nppp,) = make_plan(grid_of(method="nppp"), ClusterProfile(), costs).runs
    assert nppp.hours == pytest.approx(((0.01 + 19 * 0.005) * 5994 + 6.0 * 5994 / 100 + 5.0 * 5794 / 50
                                        + nppp.reads.entry.bytes / GB) / 3600)
    assert run_epochs(grid_of().runs[0]) == 20


def test_measured_frozen_features_are_charged_once_per_training_image_and_test_view(tmp_path: Path) -> None:
    plain, gated = tmp_path / "plain.json", tmp_path / "gated.json"
    plain.write_text(json.dumps([perf_row()]))
    gated.write_text(json.dumps([perf_row(frozen_features_seconds_per_image=0.01)]))
    (without,), (with_gate,) = (make_plan(grid_of(), ClusterProfile(), load_perf(p)).runs for p in (plain, gated))
    # CUB: 5,994 training images, 5,794 test images in two views (clean and noisy: part annotations)
    assert (with_gate.hours - without.hours) * 3600 == pytest.approx(0.01 * (5994 + 2 * 5794))


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
    cub_read, vits_read = cub.reads.seconds, vits.reads.seconds  # not scaled: bytes at 1 GB/s
    # multiply-adds per image, T = 256 tokens: block T(12d² + 2Td) + heads C·J·T·d
    measured_flops = 256 * (12 * 768**2 + 2 * 256 * 768) + 10 * 5 * 256 * 768
    cub_flops = 256 * (12 * 768**2 + 2 * 256 * 768) + 200 * 5 * 256 * 768
    vits_flops = 256 * (12 * 384**2 + 2 * 256 * 384) + 200 * 5 * 256 * 384
    assert cub.hours == pytest.approx((unscaled * cub_flops / measured_flops + cub_read) / 3600)
    assert vits.hours == pytest.approx((unscaled * vits_flops / measured_flops + vits_read) / 3600)
    assert "scaled from measured" in cub.source and "C=10" in cub.source and "C=200" in cub.source
    (other,) = make_plan(grid_of(method="tesnet"), ClusterProfile(), costs).runs
    assert other.source == "model (H100, FLOPs only)"  # no measurement of its method


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
    plan = make_plan(grid, ClusterProfile(), model_costs())
    train = sorted((c.view, c.images, readers) for c, readers in plan.caches if c.split == "train")
    # push reads the clean split; the epochs read the one augmented set (augmentation seed 0)
    assert train == [("clean", 5994, 2), ("offline40 seed 0", 40 * 5994, 2)]


@pytest.mark.parametrize("path", GRIDS, ids=[p.stem for p in GRIDS])
def test_every_grid_file_plans_its_tuning(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tune GRID` starts every study at the cell's own values, so each shipped grid's values must lie
    in its cells' spaces (demo_all widens the linear probe's lr; cub_ablations' variants hold theirs)."""
    missing = grid_methods(path) - set(list_methods())
    if missing:
        pytest.skip(f"{path.name} names methods not registered yet: {', '.join(sorted(missing))}")
    assert main(["plan", str(path), "--profile", str(EXAMPLE), "--tuning-trials", "2"]) == 0
    assert "tuning: " in capsys.readouterr().out


def test_a_cpu_measurement_is_flagged_and_a_gpu_one_is_not(tmp_path: Path) -> None:
    gpu, cpu = tmp_path / "gpu.json", tmp_path / "cpu.json"
    gpu.write_text(json.dumps([perf_row(), perf_row("nppp", device="cuda:0: NVIDIA H100 80GB HBM3")]))
    cpu.write_text(json.dumps([perf_row(), perf_row("nppp", device="cpu")]))
    assert not load_perf(gpu).cpu_measured and load_perf(gpu).cpu_caution() is None
    assert load_perf(cpu).cpu_measured
    assert "not A100 figures" in load_perf(cpu, "A100").cpu_caution()


def test_a_tuning_ratio_is_the_median_of_the_side_by_side_ratios(tmp_path: Path) -> None:
    """Repeats 87/84, 97/85, 91/91 s (sequential/batched): the medians' ratio 85/91 = 0.93 mixes repeats;
    the plan charges the median of each repeat's own ratio, 0.97 (files without it: the medians' ratio)."""
    sequential, batched = [87.0, 97.0, 91.0], [84.0, 85.0, 91.0]
    ratios = sorted(b / s for b, s in zip(batched, sequential))
    row = {"method": "vmfproto", "k": 8, "sequential_s": 91.0, "packed_s": 95.0, "batched_s": 85.0,
           "batched_over_sequential": {"median": ratios[1]}, "packed_over_sequential": {"median": 1.01}}
    path = tmp_path / "perf.json"
    path.write_text(json.dumps({"rows": [perf_row()], "tuning": [row]}))
    assert load_perf(path).tuning_factor("vmfproto") == (pytest.approx(84 / 87), "batched trials (--batch 8)")
    del row["batched_over_sequential"], row["packed_over_sequential"]
    path.write_text(json.dumps({"rows": [perf_row()], "tuning": [row]}))
    assert load_perf(path).tuning_factor("vmfproto") == (pytest.approx(85 / 91), "batched trials (--batch 8)")
