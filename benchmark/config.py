"""RunSpec: everything that defines one benchmark run, validated before any compute.

A run is a pure function of its RunSpec (plus the token cache), so the RunSpec's hash names
the run (``run_id``). Operational fields (where the data lives, whether to cache, which
device) do not change the science and are left out of the hash.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from benchmark.checks import require_type, unknown_key_error
from benchmark.data.declared import DATASETS, dataset_declaration, known_datasets
from benchmark.errors import FieldError, ProtobenchError, did_you_mean, nearest_sibling
from benchmark.spec_fields import identity_fields

DATASET_NAMES = tuple(DATASETS)  # the built-ins (benchmark/data/declared.py; installed ones: known_datasets())
AUGMENTATIONS = ("none", "offline40")
MAP_POOLS = (1, 2)
CACHE_STAGES = ("shared", "local")  # where runs read token-cache entries (benchmark/cache/stage.py)
STORAGE_DTYPES = ("float16", "float32")
EVALUATION_SPLITS = ("test", "validation")  # what a run is scored on (validation: a tuning trial)  # token-cache storage (benchmark/cache/tokens.py)

# Bound on a run's prototypes C·J (classes × prototypes per class), so a mistyped J fails at
# grid load rather than out of memory: the per-prototype similarity maps of one batch are
# B × C·J × H·W float32, 131 KB per prototype at B = 128 on a 16×16 grid, 2.6 GB at 20,000
# prototypes, and a training step holds a few such tensors, which fits one 24 GB GPU.
# CUB's 200 classes allow J ≤ 100 (the paper uses J ≤ 10).
MAX_PROTOTYPES = 20_000

@dataclass(frozen=True)
class RunSpec:
    """One cell of a grid: dataset × backbone × method × J × seed × variant."""

    dataset: str
    backbone: str
    method: str
    prototypes_per_class: int
    seed: int = 0
    variant: str = "default"
    method_args: dict[str, Any] = field(default_factory=dict)
    data_root: str = ""
    dataset_args: dict[str, Any] = field(default_factory=dict)  # synthbirds generation
    weights: str = "hf-cache"  # "hf-cache" | "random" | a file path
    weights_id: str = ""  # label of the weights for the run id ("" → the weights value)
    backbone_args: dict[str, Any] = field(default_factory=dict)  # timm overrides (tests/demo)
    image_size: int = 224
    batch_size: int = 128
    eval_batch_size: int = 128
    augmentation: str = "none"
    map_pool: int = 1
    measure_inference: bool = False
    # After evaluation, also time an epoch of each stage with the frozen trunk's forward at every
    # step (the paper's runtime protocol): timing.epoch_seconds_live_trunk (benchmark/run/timing.py).
    measure_live_epoch: bool = False
    cache: bool = True
    cache_dtype: str = "float16"
    # Store the early block's tokens too, in the training split's entry (set by the grid when any
    # run sharing this trunk and dataset needs them, so every run reads one cache entry); the
    # run's science is unchanged.
    cache_early_tokens: bool = False
    # "local": read a checksum-verified copy of each cache entry on node-local scratch
    # ($SLURM_TMPDIR, else $TMPDIR) instead of the shared filesystem (benchmark/cache/stage.py)
    cache_stage: str = "shared"
    device: str = "auto"
    # DataLoader workers of a cache build; 0: $SLURM_CPUS_PER_TASK inside a SLURM job, else none
    num_workers: int = 0
    # "fp32" | "tf32" (TF32 matmuls on CUDA) | "bf16" (autocast of trunk, block and heads, with
    # fp32/fp64 islands: methods/common/precision.py); part of the run id and of the cache key
    precision: str = "fp32"
    # read a cache entry into RAM once: "auto" (when it fits, benchmark/cache/memory.py) | true | false
    cache_in_memory: str | bool = "auto"
    # write the checkpoint every this many epochs (and always at the end of each stage)
    checkpoint_every: int = 1
    # torch.use_deterministic_algorithms(True) + CUBLAS_WORKSPACE_CONFIG for the run (docs/guides/gpu.md)
    deterministic: bool = False
    # "test": train on the training split, score on test. "validation" (a tuning trial): train on
    # the training split minus its validation split (benchmark/tuning/split.py: fraction and seed
    # below), score on the validation split; the test split is never opened. The three fields
    # enter the run id only for a trial (spec_fields.identity_fields), so no earlier id changes.
    evaluation_split: str = "test"
    validation_fraction: float = 0.1
    validation_seed: int = 0
    # a run with a study's best hyperparameters (`run --hyperparameters tuned`): the study, trial,
    # validation score, trial count, epoch budget and search-space fingerprint it came from; part
    # of the run id, so a tuned result never pools with a default one; {}: not tuned
    tuned: dict[str, Any] = field(default_factory=dict)

    # ---- identity ----------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The normalised fields that define the result (what the run id hashes), the method's
        hyperparameters resolved: its defaults with ``method_args`` applied (docs/design/run-identity.md)."""
        from benchmark.method_lookup import resolved_method_args

        return {**self._declared_identity(), "method_args": resolved_method_args(self.method, self.method_args)}

    def _declared_identity(self) -> dict[str, Any]:
        return identity_fields(asdict(self))

    @property
    def run_id(self) -> str:
        return _hash_id(self.identity())

    @property
    def earlier_run_id(self) -> str:
        """The id this spec had before run ids covered resolved hyperparameters (only the
        ``method_args`` a grid gave): where an earlier version's result of it lies."""
        return _hash_id(self._declared_identity())

    @property
    def has_part_annotations(self) -> bool:
        """Whether the dataset annotates parts, keypoints or masks (its declaration): the part
        metrics, and the stability-noise view of the test split, are computed."""
        found = dataset_declaration(self.dataset)
        return found is not None and found[0].parts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], *, import_trunk: bool = True) -> RunSpec:
        """The spec a ``spec.json``/``result.json`` holds. ``import_trunk=False`` (reading results:
        benchmark/run/own_code.py) takes an own trunk's recorded key as it is instead of importing
        its factory to canonicalise it."""
        return build_run_spec(data, where="spec.json", import_trunk=import_trunk)

    def with_overrides(self, **changes: Any) -> RunSpec:
        return replace(self, **changes)

    @property
    def label(self) -> str:
        return (f"{self.method} J={self.prototypes_per_class} seed={self.seed} "
                f"{self.backbone} {self.dataset}" + ("" if self.variant == "default" else f" [{self.variant}]"))


def _hash_id(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


RUN_FIELDS: dict[str, Any] = {f.name: f for f in fields(RunSpec)}


def read_toml(path: Path, what: str, hint: str) -> dict[str, Any]:
    """A TOML file's contents; a missing or malformed file is one error naming it (``what``:
    "grid file", "cluster profile"; ``hint``: where to find a valid one)."""
    if not path.is_file():
        raise ProtobenchError(f"{what} {str(path)!r} does not exist{nearest_sibling(path)}; {hint}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ProtobenchError(f"{what} {str(path)!r} is not valid TOML: {err}") from err


_FIELD_TYPES: dict[str, type] = {
    "prototypes_per_class": int, "seed": int, "image_size": int, "batch_size": int,
    "eval_batch_size": int, "map_pool": int, "num_workers": int, "checkpoint_every": int,
    "method_args": dict, "dataset_args": dict, "backbone_args": dict,
    "measure_inference": bool, "measure_live_epoch": bool, "cache": bool, "cache_early_tokens": bool,
    "deterministic": bool, "validation_fraction": float, "validation_seed": int, "tuned": dict,
}  # every other RunSpec field is a string but cache_in_memory ("auto" | bool, validate_run_spec)


def check_field(key: str, value: Any, *, where: str) -> None:
    """A known RunSpec field holding a value of its type (``where`` names the place it was written)."""
    if key not in RUN_FIELDS:
        raise unknown_key_error(key, list(RUN_FIELDS), where)
    if key != "cache_in_memory":
        require_type(key, value, _FIELD_TYPES.get(key, str), where)


def build_run_spec(values: dict[str, Any], *, where: str, import_trunk: bool = True) -> RunSpec:
    """Make a RunSpec from plain values, naming the first unknown key or bad value."""
    for key, value in values.items():
        check_field(key, value, where=where)
    for required in ("dataset", "backbone", "method", "prototypes_per_class"):
        if required not in values:
            raise ProtobenchError(f"{where}: missing required key {required!r}")
    recorded = not import_trunk  # reading a result: its trunk's key as recorded (canonical when it ran)
    spec = RunSpec(**{**values, "backbone": values["backbone"] if recorded else
                      canonical_backbone(values["backbone"], where=where)})
    validate_run_spec(spec, where=where, import_trunk=import_trunk)
    return spec


def canonical_backbone(name: str, *, where: str) -> str:
    """One key per trunk (``benchmark.backbones.backbone_spec``): ``"timm:NAME"`` of an alias's
    model becomes the alias, a timm name without a tag gets timm's default tag, so a trunk named
    either way gives one run id."""
    from benchmark.trunks import trunk_declaration

    try:
        if trunk_declaration(name) is not None:  # an alias or an installed package's trunk: no timm
            return name
    except ValueError as err:
        raise ProtobenchError(f"{where}: {err}") from None
    from benchmark.backbones import backbone_spec

    try:
        return backbone_spec(name).key
    except ProtobenchError as err:
        raise ProtobenchError(f"{where}: {err}") from None


def check_prototype_count(spec: RunSpec, num_classes: int) -> None:
    """C·J ≤ :data:`MAX_PROTOTYPES` once the dataset's number of classes C is known."""
    if num_classes * spec.prototypes_per_class > MAX_PROTOTYPES:
        raise ProtobenchError(
            f"run {spec.label}: {num_classes} classes × J = {spec.prototypes_per_class} is "
            f"{num_classes * spec.prototypes_per_class} prototypes, more than {MAX_PROTOTYPES} fit in memory; "
            f"use J ≤ {MAX_PROTOTYPES // num_classes} for {spec.dataset}")


def validate_run_spec(spec: RunSpec, *, where: str, import_trunk: bool = True) -> None:
    """Value checks that need no files or compute (files are checked by the data readers)."""
    from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS
    from benchmark.method_lookup import validate_method_args
    from benchmark.tuning.split import check_rule

    def bad(field: str, msg: str) -> FieldError:
        return FieldError(where, field, msg)

    try:
        declared = dataset_declaration(spec.dataset)
    except ValueError as err:  # an installed package's name clash or broken declaration
        raise bad("dataset", str(err)) from None
    if declared is None:
        known = known_datasets()
        raise bad("dataset", f"unknown dataset {spec.dataset!r}{did_you_mean(spec.dataset, known)}; choose one of "
                  f"{', '.join(known)}, or install a package that declares it (entry point 'protobench.datasets')")
    if spec.prototypes_per_class < 1:
        raise bad("prototypes_per_class", f"prototypes_per_class (J) = {spec.prototypes_per_class} must be ≥ 1")
    if spec.prototypes_per_class > MAX_PROTOTYPES:
        raise bad("prototypes_per_class", f"prototypes_per_class (J) = {spec.prototypes_per_class} is more than fits in memory: "
                  f"classes × J must be ≤ {MAX_PROTOTYPES} (benchmark.config.MAX_PROTOTYPES)")
    for name in ("batch_size", "eval_batch_size", "image_size"):
        if getattr(spec, name) < 1:
            raise bad(name, f"{name} = {getattr(spec, name)} must be ≥ 1")
    if spec.seed < 0:
        raise bad("seed", f"seed = {spec.seed} must be ≥ 0")
    if spec.num_workers < 0:
        raise bad("num_workers", f"num_workers = {spec.num_workers} must be ≥ 0")
    if spec.augmentation not in AUGMENTATIONS:
        raise bad("augmentation", f"augmentation = {spec.augmentation!r} must be one of {', '.join(AUGMENTATIONS)}")
    if spec.map_pool not in MAP_POOLS:
        raise bad("map_pool", f"map_pool = {spec.map_pool} must be 1 (native grid) or 2 (NPPP's 2×2 pooling)")
    if spec.cache_dtype not in STORAGE_DTYPES:
        raise bad("cache_dtype", f"cache_dtype = {spec.cache_dtype!r} must be one the token cache can store: "
                  f"{', '.join(STORAGE_DTYPES)}")
    if spec.cache_stage not in CACHE_STAGES:
        raise bad("cache_stage", f"cache_stage = {spec.cache_stage!r} must be 'shared' or 'local' (copy entries to node-local scratch)")
    from methods.common.precisions import PRECISIONS  # here: readers of configs (reports/) load no methods

    if spec.precision not in PRECISIONS:
        raise bad("precision", f"precision = {spec.precision!r} must be one of {', '.join(PRECISIONS)} "
                  "(tf32 and bf16 only speed up CUDA; on a CPU bf16 autocast is slower)")
    if not (spec.cache_in_memory == "auto" or isinstance(spec.cache_in_memory, bool)):
        raise bad("cache_in_memory", f"cache_in_memory = {spec.cache_in_memory!r} must be 'auto', true or false")
    if spec.checkpoint_every < 1:
        raise bad("checkpoint_every", f"checkpoint_every = {spec.checkpoint_every} must be ≥ 1 (1: a checkpoint every epoch)")
    if spec.device != "auto" and not (spec.device == "cpu" or spec.device.startswith("cuda")):
        raise bad("device", f"device = {spec.device!r} must be 'auto', 'cpu' or 'cuda[:N]'")
    if not spec.weights:
        raise bad("weights", "weights must be 'hf-cache', 'random' or a path to a weights file")
    if spec.dataset_args and spec.dataset != "synthbirds":
        raise bad("dataset_args", "dataset_args only apply to the generated 'synthbirds' dataset")
    for key, value in spec.dataset_args.items():
        if key not in SYNTHBIRDS_DEFAULTS:
            raise unknown_key_error(key, list(SYNTHBIRDS_DEFAULTS), f"{where}: dataset_args")
        require_type(f"dataset_args.{key}", value, int, where)
    if spec.evaluation_split not in EVALUATION_SPLITS:
        raise bad("evaluation_split", f"evaluation_split = {spec.evaluation_split!r} must be 'test' or 'validation' (a tuning trial)")
    if spec.evaluation_split == "validation" and spec.tuned:
        raise bad("evaluation_split", "a tuning trial (evaluation_split = 'validation') cannot also be a tuned run (tuned = {...})")
    check_rule(spec.validation_fraction, spec.validation_seed, where)
    # last: a timm name or an own trunk's factory is imported to canonicalise it
    canonical = spec.backbone if not import_trunk else canonical_backbone(spec.backbone, where=where)
    if canonical != spec.backbone:
        raise bad("backbone", f"backbone {spec.backbone!r} is not in its canonical form {canonical!r}")
    validate_method_args(spec.method, spec.method_args)
