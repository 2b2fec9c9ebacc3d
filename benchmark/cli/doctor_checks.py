"""``protobench doctor [GRID]``: is this machine ready to run the grid? One line per check, each
with its fix: Python/torch/CUDA and the GPUs, the Hugging Face cache, every data root's
annotation files, every backbone's weights, free disk for the token caches, SLURM commands.

``plan`` runs the data and weights checks too, where the paths exist on the planning machine,
and flags placeholder paths (``/path/to/…``) left in a grid.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from slurm.scheduler import SLURM_COMMANDS

PLACEHOLDER_MARKS = ("/path/to/", "path/to/")  # how the shipped grids mark paths to fill in
STATUSES = ("ok", "warn", "fail", "skip")


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: ``fix`` says what to do when the status is not ok."""

    name: str
    status: str  # one of STATUSES
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status:>4}] {self.name}: {self.detail}"
        return text + (f" → {self.fix}" if self.fix and self.status != "ok" else "")


def is_placeholder(path: str) -> bool:
    """A path the grid's author left to fill in (``/path/to/CUB_200_2011``)."""
    return path.startswith(PLACEHOLDER_MARKS)


# ---- the machine ------------------------------------------------------------------------------
def environment_checks(grid: GridSpec | None) -> list[Check]:
    """Python, torch, CUDA and GPUs, and where Hugging Face looks for weights."""
    import torch

    checks = [Check("python", "ok", f"{platform.python_version()} ({sys.executable})"),
              Check("torch", "ok", f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}")]
    devices = sorted({spec.device for spec in grid.runs}) if grid else []
    wants_cuda = any(d.startswith("cuda") for d in devices)
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        shown = "; ".join(f"cuda:{i} {g.name} {g.total_memory / 2**30:.0f} GiB" for i, g in enumerate(gpus))
        checks.append(Check("cuda", "ok", f"{len(gpus)} GPU(s): {shown}"))
    else:
        status = "fail" if wants_cuda else "warn"
        checks.append(Check("cuda", status, "CUDA is not available here: runs on 'auto' use the CPU",
                            "run on a GPU node (srun --gres=gpu:1 protobench doctor GRID), or set device = 'cpu'"
                            if wants_cuda else "fine for the demo; real grids want a GPU node"))
    checks.append(hf_cache_check())
    return checks


def hf_cache_check() -> Check:
    """Where ``weights = "hf-cache"`` is looked up on this machine (HF_HOME / HF_HUB_CACHE)."""
    from huggingface_hub import constants

    where = Path(constants.HF_HUB_CACHE)
    source = ("HF_HUB_CACHE" if os.environ.get("HF_HUB_CACHE") else "HF_HOME" if os.environ.get("HF_HOME")
              else "default, HF_HOME unset")
    if where.is_dir():
        return Check("hf cache", "ok", f"{where} ({source})")
    return Check("hf cache", "warn", f"{where} ({source}) does not exist",
                 "only grids with weights = 'hf-cache' need it: download the weights on a login node and export "
                 "HF_HOME=<a shared folder> on login and compute nodes alike (docs/guides/real-data.md)")


def slurm_check(required: bool) -> Check:
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if not missing:
        return Check("slurm", "ok", f"{', '.join(SLURM_COMMANDS)} on PATH")
    return Check("slurm", "fail" if required else "warn", f"not on PATH: {', '.join(missing)}",
                 "run on a login node of the cluster (module load slurm), or use --executor local / submitit-local")


# ---- the grid's files -------------------------------------------------------------------------
def data_checks(grid: GridSpec, *, absent_ok: bool = False, images: str | None = None) -> list[Check]:
    """Each (dataset, data_root) of the grid: both splits' annotation files read; with ``images``
    (``doctor``: "header", ``doctor --deep``: "deep"), every image checked too, with the bounds
    ``run`` applies (benchmark.data.dataset.check_images). ``absent_ok`` (plan, on a machine
    without the data): a missing root is skipped, a placeholder still flagged."""
    from benchmark.data import load_dataset
    from benchmark.data.dataset import check_images
    from benchmark.data.funnybirds import check_funnybirds

    checks = []
    seen: set[tuple[str, str]] = set()
    for spec in grid.runs:
        if (spec.dataset, spec.data_root) in seen:
            continue
        seen.add((spec.dataset, spec.data_root))
        name = f"data {spec.dataset} {spec.data_root or '(unset)'}"
        fix = f"set data_root in {grid.source or 'the grid'} to the extracted {spec.dataset} folder, or pass --data-root"
        root = Path(spec.data_root).expanduser()
        if not spec.data_root or is_placeholder(spec.data_root):
            checks.append(Check(name, "fail", "a placeholder, not a path" if spec.data_root else "no data_root", fix))
        elif spec.dataset == "synthbirds" and not root.exists():
            # a relative data_root was resolved against the working directory when the grid was read:
            # a warning, so a grid read from the wrong folder does not generate its data there unnoticed
            checks.append(Check(name, "warn", f"absent: will be generated here from the grid's dataset_args at the "
                                f"first run (a relative data_root is read from the working directory, {Path.cwd()})",
                                "run from the folder the grid's data_root is relative to, or make it absolute"))
        elif absent_ok and not root.exists():
            checks.append(Check(name, "skip", "not on this machine", "run `protobench doctor GRID` where the jobs run"))
        else:
            try:
                splits = [load_dataset(spec.dataset, root, split, image_size=spec.image_size)
                          for split in ("train", "test")]
                for split in splits if images is not None else ():
                    check_images(split, images)
                funnybirds = check_funnybirds(root, deep=images == "deep") if spec.dataset == "funnybirds" else ""
            except ProtobenchError as err:  # the reader's message names the missing file and the fix
                checks.append(Check(name, "fail", str(err)))
            else:
                how = {None: "listed", "header": "listed, every image's header read",
                       "deep": "listed, every image decoded"}[images]
                checks.append(Check(name, "ok", f"{len(splits[0])} train / {len(splits[1])} test images {how}"
                                                f"{'; ' + funnybirds if funnybirds else ''}"))
    return checks


def weights_checks(grid: GridSpec, *, absent_ok: bool = False) -> list[Check]:
    """Each (backbone, weights) of the grid resolves to a file (``benchmark.backbones.resolve_weights``:
    the HF cache for 'hf-cache', the file itself for a path). ``absent_ok`` as in :func:`data_checks`."""
    from benchmark.backbones import backbone_spec, resolve_weights

    checks = []
    for backbone, weights in sorted({(spec.backbone, spec.weights) for spec in grid.runs}):
        name = f"weights {backbone} {weights}"
        if is_placeholder(weights):
            checks.append(Check(name, "fail", "a placeholder, not a path",
                                f'name the file in the grid (weights = {{ {backbone} = "/w/model.safetensors" }}) '
                                "or pass --weights"))
            continue
        if absent_ok and weights not in ("hf-cache", "random") and not Path(weights).expanduser().exists():
            checks.append(Check(name, "skip", "not on this machine", "run `protobench doctor GRID` where the jobs run"))
            continue
        try:
            found = resolve_weights(backbone_spec(backbone), weights)
        except ProtobenchError as err:  # its message says what to do
            fix = "or export HF_HOME=<the shared cache that holds them> (docs/guides/real-data.md)" \
                if weights == "hf-cache" else ""
            checks.append(Check(name, "fail", str(err), fix))
        else:
            checks.append(Check(name, "ok", "random init, nothing to load" if found is None else str(found)))
    return checks


# ---- disk for the token caches ------------------------------------------------------------------
def grid_cache_bytes(grid: GridSpec) -> int:
    """Bytes of every token-cache entry the grid reads (each counted once, as ``plan`` lists them)."""
    from benchmark.estimates.caches import grid_cache_needs

    return sum(need.bytes for need, _ in grid_cache_needs(grid.runs))


def disk_check(grid: GridSpec, cache_root: Path) -> Check:
    """Free space where the token cache goes against what the grid's caches take (an upper bound:
    entries already built there need nothing)."""
    needed = grid_cache_bytes(grid)
    existing = cache_root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    detail = f"token caches of the grid take up to {needed / 2**30:.2f} GiB; {free / 2**30:.1f} GiB free at {existing}"
    if free >= needed:
        return Check(f"disk {cache_root}", "ok", detail)
    return Check(f"disk {cache_root}", "fail", detail,
                 "pass --cache-dir on a larger file system (a shared scratch), or clear old entries there")


# ---- all together -----------------------------------------------------------------------------
def run_doctor(grid: GridSpec | None, cache_root: Path | None, *, slurm_required: bool = False,
               deep: bool = False) -> list[Check]:
    checks = environment_checks(grid)
    if grid is not None:
        checks += data_checks(grid, images="deep" if deep else "header") + weights_checks(grid)
        if cache_root is not None and any(spec.cache for spec in grid.runs):
            checks.append(disk_check(grid, cache_root))
    checks.append(slurm_check(slurm_required))
    return checks


def print_checks(checks: list[Check]) -> int:
    """Print one line per check; the exit status: 1 when any check failed."""
    for check in checks:
        print(check.line())
    failed = sum(c.status == "fail" for c in checks)
    print(f"{len(checks)} checks: {failed} failed, {sum(c.status == 'warn' for c in checks)} warnings")
    return 1 if failed else 0
