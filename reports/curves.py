"""``protobench plot --curves``: training curves from each run's per-epoch ``metrics.jsonl``.

The runner appends one JSON object per finished epoch to ``RUN_DIR/metrics.jsonl``:
``{"epoch": int, "stage": str, "seconds": number, "lr": {group: lr}, "terms": {name: value}}``
(more keys are allowed and ignored). Epochs are drawn in file order over all stages; an epoch
logged again after a resume (same stage and epoch) replaces the earlier record. A quantity is a
loss term by name, ``lr.<group>`` or ``seconds``; one panel per quantity, one line per run.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.run.store import METRICS_FILE, SPEC_FILE, read_json
from reports.plots import check_figure_path, panels, save_figure


@dataclass(frozen=True)
class Curve:
    """One run's per-epoch records: stage of each epoch and every quantity's values (NaN: not logged)."""

    run_dir: Path
    label: str
    stages: tuple[str, ...]
    values: dict[str, tuple[float, ...]]


def curve_files(paths: Sequence[Path]) -> list[Path]:
    """``metrics.jsonl`` of each run directory given, or of every run below a folder given."""
    files: dict[Path, Path] = {}
    for path in paths:
        if not path.is_dir():
            raise ProtobenchError(f"{path} is not a directory; pass run directories (runs/<grid>/<run_id>).")
        found = [path / METRICS_FILE] if (path / METRICS_FILE).is_file() else sorted(path.rglob(METRICS_FILE))
        if not found:
            raise ProtobenchError(
                f"No {METRICS_FILE} in or below {path}; runs write it once per epoch while they train — "
                f"pass a run directory of a run started with this version, or run it again."
            )
        for file in found:
            files.setdefault(file.resolve(), file)
    return list(files.values())


def read_curve(path: Path) -> Curve:
    """Parse and check one ``metrics.jsonl``; a malformed line is an error naming file and line."""
    records: dict[tuple[str, int], dict[str, float]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtobenchError(f"{path} cannot be read ({exc}); run the run again to rewrite it.") from exc
    for number, line in enumerate(lines, start=1):
        if line.strip():
            stage, epoch, values = _record(path, number, line)
            records.pop((stage, epoch), None)  # a re-logged epoch (resume) moves to its new place
            records[(stage, epoch)] = values
    if not records:
        raise ProtobenchError(f"{path} holds no epoch yet; plot it once the run has finished an epoch.")
    names = list(dict.fromkeys(name for values in records.values() for name in values))
    return Curve(
        run_dir=path.parent,
        label=_run_label(path.parent),
        stages=tuple(stage for stage, _ in records),
        values={n: tuple(values.get(n, math.nan) for values in records.values()) for n in names},
    )


def plot_curves(run_dirs: Sequence[Path], out: Path, *, quantities: Sequence[str] | None = None) -> list[Curve]:
    """Draw the chosen quantities (default: every loss term) of each run against the epoch."""
    check_figure_path(out)
    curves = [read_curve(file) for file in curve_files(run_dirs)]
    available = list(dict.fromkeys(name for curve in curves for name in curve.values))
    chosen = list(quantities) if quantities else [n for n in available if not n.startswith("lr.") and n != "seconds"]
    unknown = [q for q in chosen if q not in available]
    if unknown or not chosen:
        raise ProtobenchError(
            f"No curve named {', '.join(unknown) or '(any loss term)'}; the runs logged: {', '.join(available)}."
        )
    fig, axes = panels(len(chosen))
    for ax, name in zip(axes, chosen):
        for curve in curves:
            if name in curve.values:
                epochs = range(1, len(curve.stages) + 1)
                ax.plot(epochs, curve.values[name], marker=".", linewidth=1.5, label=curve.label)
        for boundary in _stage_boundaries(curves):
            ax.axvline(boundary, color="0.6", linestyle=":", linewidth=1)
        ax.set_title(name)
        ax.set_xlabel("epoch (all stages)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, out)
    return curves


def _record(path: Path, number: int, line: str) -> tuple[str, int, dict[str, float]]:
    where = f"{path} line {number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtobenchError(f"{where} is not JSON ({exc}); delete the line or run the run again.") from exc
    if not isinstance(data, dict):
        raise ProtobenchError(f"{where} is not a JSON object; delete the line or run the run again.")
    epoch, stage = data.get("epoch"), data.get("stage")
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise ProtobenchError(f"{where}: epoch must be an integer, got {epoch!r}.")
    if not isinstance(stage, str) or not stage:
        raise ProtobenchError(f"{where}: stage must be a non-empty string, got {stage!r}.")
    values = {"seconds": _number(where, "seconds", data.get("seconds"))}
    for section, prefix in (("terms", ""), ("lr", "lr.")):
        mapping = data.get(section)
        if not isinstance(mapping, dict):
            raise ProtobenchError(f"{where}: {section} must be an object of name → number, got {mapping!r}.")
        values.update({prefix + str(k): _number(where, f"{section}.{k}", v) for k, v in mapping.items()})
    return stage, epoch, values


def _number(where: str, name: str, value: object) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtobenchError(f"{where}: {name} must be a number or null, got {value!r}.")
    return float(value)


def _run_label(run_dir: Path) -> str:
    """``vMFProto J=5 seed=0 (a1b2c3d4e5f6)`` from the run's spec.json (the method by its display
    name), else the directory name."""
    spec = read_json(run_dir / SPEC_FILE)
    if not isinstance(spec, dict) or not {"method", "prototypes_per_class", "seed"} <= spec.keys():
        return run_dir.name
    from methods.registry import display_name_of

    method = display_name_of(str(spec["method"]))
    return f"{method} J={spec['prototypes_per_class']} seed={spec['seed']} ({run_dir.name})"


def _stage_boundaries(curves: Sequence[Curve]) -> list[float]:
    """x positions between the last epoch of a stage and the first of the next, over all runs."""
    return sorted(
        {i + 0.5 for c in curves for i in range(1, len(c.stages)) if c.stages[i] != c.stages[i - 1]}
    )
