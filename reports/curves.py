"""``protobench plot --curves``: training curves from each run's per-epoch ``metrics.jsonl``.

The runner appends one JSON object per finished epoch to ``RUN_DIR/metrics.jsonl``:
``{"epoch": int, "stage": str, "seconds": number, "lr": {group: lr}, "terms": {name: value}}``
(more keys are allowed and ignored). Epochs are drawn in file order over all stages; an epoch
logged again after a resume (same stage and epoch) replaces the earlier record. A quantity is a
loss term by name, ``lr.<group>`` or ``seconds``; one panel per quantity, one line per run.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.run.store import RESULT_FILE, SPEC_FILE, UnreadableRunFile, curve_files, parse_run_json, read_json
from reports.figure_style import SCREEN, FigureStyle, drawing
from reports.plots import check_figure_path, one_legend, panels, save_figure


@dataclass(frozen=True)
class Curve:
    """One run's per-epoch records: stage of each epoch and every quantity's values (NaN: not logged)."""

    run_dir: Path
    label: str
    stages: tuple[str, ...]
    values: dict[str, tuple[float, ...]]


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


def plot_curves(run_dirs: Sequence[Path], out: Path, *, quantities: Sequence[str] | None = None,
                style: FigureStyle = SCREEN) -> list[Curve]:
    """Draw the chosen quantities (default: every loss term) of each run against the epoch.

    A run has one colour and one legend label in every panel. When every run went through the
    same stages, their names run along the top; otherwise each run's stage boundaries are dotted
    in its colour and its legend label lists its stages (``[warm 1–5, joint 6–10]``)."""
    check_figure_path(out)
    curves = [read_curve(file) for file in curve_files(run_dirs)]
    available = list(dict.fromkeys(name for curve in curves for name in curve.values))
    chosen = list(quantities) if quantities else [n for n in available if not n.startswith("lr.") and n != "seconds"]
    unknown = [q for q in chosen if q not in available]
    if unknown or not chosen:
        raise ProtobenchError(
            f"No curve named {', '.join(unknown) or '(any loss term)'}; the runs logged: {', '.join(available)}."
        )
    with drawing(style):
        _draw(curves, chosen, out, style)
    return curves


def _draw(curves: list[Curve], chosen: list[str], out: Path, style: FigureStyle) -> None:
    from matplotlib.ticker import MaxNLocator

    fig, axes = panels(len(chosen), style)
    labels = _unique_labels(curves)
    colours = [f"C{i % 10}" for i in range(len(curves))]  # a run keeps its colour in every panel
    shared = len({c.stages for c in curves}) == 1  # one schedule: its stages named along the top
    if not shared:  # schedules differ: each run's stages in its own legend entry, never mixed
        labels = [f"{label} [{_schedule(curve)}]" for label, curve in zip(labels, curves)]
    last = max(len(c.stages) for c in curves) + 0.5
    for ax, name in zip(axes, chosen):
        for curve, label, colour in zip(curves, labels, colours):
            if name in curve.values:
                epochs = range(1, len(curve.stages) + 1)
                ax.plot(epochs, curve.values[name], marker=".", linewidth=1.5, label=label, color=colour)
        if shared:
            _name_stages(ax, curves[0], last)
        else:
            for curve, colour in zip(curves, colours):  # each run's boundaries in the run's colour
                for start, _ in _stage_starts([curve])[1:]:
                    ax.axvline(start, color=colour, linestyle=":", linewidth=1, alpha=0.8)
        ax.set_xlim(0.5, last)  # an epoch with no value of this quantity keeps its place
        if style.titles:
            ax.set_title(name, fontsize="medium")
        ax.set_xlabel("epoch (all stages)")
        ax.set_ylabel(_axis_label(name))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    one_legend(fig, axes[0], style=style)
    save_figure(fig, out)


def _name_stages(ax, curve: Curve, last: float) -> None:  # (Axes, …)
    """Dotted boundaries between the stages of the one shared schedule and each stage's name over
    its epochs (a secondary axis along the top)."""
    starts = _stage_starts([curve])
    for start, _ in starts[1:]:
        ax.axvline(start, color="0.6", linestyle=":", linewidth=1)
    stages = ax.secondary_xaxis("top")
    ends = [start for start, _ in starts[1:]] + [last]
    stages.set_xticks([(start + end) / 2 for (start, _), end in zip(starts, ends)],
                      [stage for _, stage in starts], fontsize="x-small", color="0.35")
    stages.tick_params(length=0)


def _schedule(curve: Curve) -> str:
    """``warm 1–5, joint 6–10``: the run's stages and their epochs (1-based, over all stages)."""
    starts = [round(start + 0.5) for start, _ in _stage_starts([curve])] + [len(curve.stages) + 1]
    names = [stage for _, stage in _stage_starts([curve])]
    return ", ".join(f"{name} {a}" if b - 1 == a else f"{name} {a}\u2013{b - 1}"
                     for name, a, b in zip(names, starts, starts[1:]))


def _axis_label(name: str) -> str:
    """The y-axis label of a quantity: a loss term's value, a learning rate, or the epoch's seconds."""
    if name == "seconds":
        return "epoch time (s)"
    if name.startswith("lr."):
        return f"learning rate ({name.removeprefix('lr.')})"
    return f"{name} (epoch mean)"


def _unique_labels(curves: Sequence[Curve]) -> list[str]:
    """The curves' labels, each followed by its run id only where two runs share a label."""
    counts: dict[str, int] = {}
    for curve in curves:
        counts[curve.label] = counts.get(curve.label, 0) + 1
    return [f"{c.label} ({c.run_dir.name})" if counts[c.label] > 1 else c.label for c in curves]


def _record(path: Path, number: int, line: str) -> tuple[str, int, dict[str, float]]:
    where = f"{path} line {number}"
    try:
        data = parse_run_json(line, Path(where))
    except UnreadableRunFile as exc:
        raise ProtobenchError(f"{where} is not JSON ({exc.why}); delete the line or run the run again.") from None
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
    """``vMFProto J=5 seed=0`` (the display name its result.json recorded, :func:`display_name`)
    from the run's spec.json, else the directory name."""
    from reports.layouts import display_name

    spec = read_json(run_dir / SPEC_FILE)
    if not isinstance(spec, dict) or not {"method", "prototypes_per_class", "seed"} <= spec.keys():
        return run_dir.name
    result = read_json(run_dir / RESULT_FILE)
    recorded = result.get("method_display_name") if isinstance(result, dict) else None
    method = display_name(str(spec["method"]), recorded if isinstance(recorded, str) else None)
    return f"{method} J={spec['prototypes_per_class']} seed={spec['seed']}"


def _stage_starts(curves: Sequence[Curve]) -> list[tuple[float, str]]:
    """(x position, stage) where each stage begins, over all runs, in order: 0.5 for the first epoch,
    else between the last epoch of a stage and the first of the next (a dotted boundary)."""
    found = {0.5: c.stages[0] for c in curves}
    found.update({i + 0.5: c.stages[i] for c in curves for i in range(1, len(c.stages))
                  if c.stages[i] != c.stages[i - 1]})
    return sorted(found.items())
