"""Tables of any grid: a Layout built from the results themselves (``report`` without --layout).

Rows are one dimension set (default method, J, variant), columns another (default dataset,
backbone), metrics innermost. A dimension that is neither a row nor a column must take one
value (it is then a fixed filter named in the caption), so a cell never pools runs that differ
in a key the table does not show. Default dimensions taking one value are left out of the labels;
dimensions named with ``--rows``/``--cols`` are always shown.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from benchmark.errors import ProtobenchError, did_you_mean
from reports.columns import KEY_COLUMNS, METRIC_COLUMNS
from reports.layout import BEST_NOTE, BodyItem, ColumnGroup, KeyValue, Layout, Metric, Row, Rule, Text, text
from reports.layouts import (ACC, BACKBONES, BEYOND_THE_PAPER, CACHED_EPOCH_TIME, CON, DIS, EPOCH_TIME, METHODS,
                             SANITY_SIGNED, STA, THROUGHPUT, display_name)

#: every metric a pivot can show, in the order of its columns
METRICS: dict[str, Metric] = {m.key: m for m in (CON, STA, DIS, *BEYOND_THE_PAPER, SANITY_SIGNED, ACC, CACHED_EPOCH_TIME,
                                                 EPOCH_TIME, THROUGHPUT)}
#: shown by default when any result has them (timings only on request: --metrics epoch_seconds)
DEFAULT_METRICS: tuple[str, ...] = ("con", "sta", "dis", "comp", "acc")
DEFAULT_ROWS: tuple[str, ...] = ("method", "J", "variant")
DEFAULT_COLS: tuple[str, ...] = ("dataset", "backbone")
#: columns ``--where`` may filter on
FILTER_COLUMNS: tuple[str, ...] = (*KEY_COLUMNS, "seed", "grid", "run_id")

_HEADERS: dict[str, Text] = {
    "dataset": text("Dataset"),
    "backbone": text("Backbone"),
    "method": text("Method"),
    "J": Text("J", "$J$"),
    "variant": text("Variant"),
}
_METHOD_LABELS: dict[str, Text] = dict(METHODS)
_METHOD_ORDER: dict[str, int] = {key: i for i, (key, _) in enumerate(METHODS)}
_BACKBONE_LABELS: dict[str, str] = {key: long_label for key, long_label, _ in BACKBONES}
_BACKBONE_ORDER: dict[str, int] = {key: i for i, (key, _, _) in enumerate(BACKBONES)}
_CAPTION = Text(
    md="**Results.** Mean±std over seeds where a cell averages several (n = number of seeds). "
    + BEST_NOTE.md.replace("{scope}", "column"),
    tex=r"\textbf{Results.} Mean$\pm$std over seeds where a cell averages several (n = number of "
    r"seeds). " + BEST_NOTE.tex.replace("{scope}", "column"),
)


def parse_where(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``["method=vmfproto,nppp", "J=5"]`` → ``{"method": ("vmfproto", "nppp"), "J": ("5",)}``."""
    where: dict[str, tuple[str, ...]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            raise ProtobenchError(f"--where {item!r} is not KEY=VALUE; write e.g. --where method=vmfproto.")
        if key not in FILTER_COLUMNS:
            raise ProtobenchError(
                f"--where {item!r}: unknown key {key!r}{did_you_mean(key, FILTER_COLUMNS)}; filter on one of "
                f"{', '.join(FILTER_COLUMNS)}."
            )
        where[key] = where.get(key, ()) + tuple(v.strip() for v in values.split(","))
    return where


def filter_frame(frame: pd.DataFrame, where: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """The rows whose every ``where`` column shows one of its values (compared as text)."""
    keep = pd.Series(True, index=frame.index)
    for key, values in where.items():
        keep &= frame[key].astype(str).isin(values)
    if not keep.any():
        present = "; ".join(f"{k}: {', '.join(_distinct_text(frame[k]))}" for k in where)
        raise ProtobenchError(f"No result matches --where {_describe_where(where)}; the results have {present}.")
    return frame[keep]


def pivot_layout(
    frame: pd.DataFrame,
    *,
    rows: Sequence[str] | None = None,
    cols: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
) -> Layout:
    """The layout that shows every result of ``frame``: rows × (columns × metrics)."""
    _check_dimensions("--rows", rows)
    _check_dimensions("--cols", cols)
    if rows is not None and cols is not None and set(rows) & set(cols):
        raise ProtobenchError(f"{', '.join(sorted(set(rows) & set(cols)))} is in both --rows and --cols; pick one.")
    varying = {d for d in KEY_COLUMNS if frame[d].nunique(dropna=False) > 1}
    taken = set(rows or ()) | set(cols or ())
    if rows is None:
        rows = [d for d in DEFAULT_ROWS if d not in taken and (d == "method" or d in varying)]
    if cols is None:
        cols = [d for d in DEFAULT_COLS if d not in taken | set(rows) and d in varying]
    if not rows:
        raise ProtobenchError("The table has no row dimension; name one with --rows (e.g. --rows method).")
    shown_metrics = _metrics(frame, metrics)
    fixed = fixed_dimensions(frame, [d for d in KEY_COLUMNS if d not in (*rows, *cols)], hint="--rows or --cols")

    display = display_names(frame)
    body: list[BodyItem] = []
    previous: KeyValue | None = None
    for values in _distinct(frame, rows):
        if len(rows) > 1 and previous is not None and values[0] != previous:
            body.append(Rule())
        previous = values[0]
        labels = tuple(dimension_label(d, v, display) for d, v in zip(rows, values))
        body.append(Row(labels, dict(zip(rows, values))))
    groups = []
    for values in _distinct(frame, cols):
        in_group = frame[(frame[list(cols)] == pd.Series(dict(zip(cols, values)))).all(axis=1)] if cols else frame
        # by default a column group shows the metrics its own results have (Dogs and Cars: accuracy only)
        group_metrics = shown_metrics if metrics is not None else _metrics(in_group, None)
        groups.append(ColumnGroup(_group_label(cols, values, display), dict(zip(cols, values)), group_metrics))
    n_columns = len(rows) + sum(len(g.metrics) for g in groups)
    return Layout(
        name="results",
        description="every result, pivoted: " + " × ".join(rows) + " by " + " × ".join([*cols, "metric"]),
        caption=_caption(fixed, display),
        tex_label="tab:results",
        dataset=None,
        filters=fixed,
        label_headers=tuple(_HEADERS[d] for d in rows),
        label_align=tuple("l" for _ in rows),
        columns=tuple(groups),
        body=tuple(body),
        mark_best=True,
        show_std=True,
        show_n=True,
        rule_after_labels=False,  # booktabs: no vertical rule; column groups get a \cmidrule
        wide=n_columns > 7,
        resize=n_columns > 12,
    )


def _check_dimensions(option: str, dims: Sequence[str] | None) -> None:
    if dims is None:
        return
    unknown = [d for d in dims if d not in KEY_COLUMNS]
    if unknown:
        raise ProtobenchError(
            f"{option} {', '.join(unknown)}: not a table dimension; choose from {', '.join(KEY_COLUMNS)} "
            f"(seeds are averaged; pick one seed with --where seed=0)."
        )
    if len(set(dims)) != len(dims):
        raise ProtobenchError(f"{option} names a dimension twice: {', '.join(dims)}.")


def _metrics(frame: pd.DataFrame, requested: Sequence[str] | None) -> tuple[Metric, ...]:
    if requested is not None:
        unknown = [m for m in requested if m not in METRICS]
        if unknown:
            hints = "".join(did_you_mean(m, METRICS) for m in unknown)
            raise ProtobenchError(f"--metrics {', '.join(unknown)}: unknown{hints}; choose from {', '.join(METRICS)}.")
        return tuple(METRICS[m] for m in requested)
    present = tuple(METRICS[m] for m in DEFAULT_METRICS if frame[m].notna().any())
    if not present:
        raise ProtobenchError(
            f"No result has any of {', '.join(DEFAULT_METRICS)}; name the metrics with --metrics "
            f"({', '.join(METRIC_COLUMNS)})."
        )
    return present


def fixed_dimensions(frame: pd.DataFrame, dims: Iterable[str], *, hint: str) -> dict[str, KeyValue]:
    """The one value each of ``dims`` takes; a dimension with several is an error naming ``hint``."""
    fixed: dict[str, KeyValue] = {}
    for d in dims:
        values = _distinct(frame, [d])
        if len(values) > 1:
            shown = ", ".join(str(v[0]) for v in values)
            raise ProtobenchError(
                f"{d} takes {len(values)} values ({shown}) but is not shown: add it to {hint}, "
                f"or keep one with --where {d}={values[0][0]}."
            )
        fixed[d] = values[0][0]
    return fixed


def _sort_key(dim: str, value: KeyValue) -> tuple[int, KeyValue]:
    if dim == "method":
        return (_METHOD_ORDER.get(str(value), len(_METHOD_ORDER)), str(value))
    if dim == "backbone":
        return (_BACKBONE_ORDER.get(str(value), len(_BACKBONE_ORDER)), str(value))
    if dim == "variant":
        return (0 if value == "default" else 1, str(value))
    return (0, value)


def _distinct(frame: pd.DataFrame, dims: Sequence[str]) -> list[tuple[KeyValue, ...]]:
    """The value combinations of ``dims`` present in ``frame``, in table order (one empty tuple if none)."""
    if not dims:
        return [()]
    combos = {tuple(_plain(v) for v in row) for row in frame[list(dims)].itertuples(index=False)}
    return sorted(combos, key=lambda combo: tuple(_sort_key(d, v) for d, v in zip(dims, combo)))


def ordered_values(frame: pd.DataFrame, dim: str | None) -> list[KeyValue | None]:
    """The values ``dim`` takes in ``frame``, in table order; ``[None]`` for no dimension."""
    return [None] if dim is None else [values[0] for values in _distinct(frame, [dim])]


def _plain(value: object) -> KeyValue:
    """numpy/pandas scalars as the int or str a Layout's ``where`` holds."""
    return value if isinstance(value, str) else int(value)  # type: ignore[call-overload]


def display_names(frame: pd.DataFrame) -> dict[str, str]:
    """method → the display name its results carry (import-path methods; first one found)."""
    named = frame.dropna(subset=["method_display_name"])
    return dict(zip(named["method"], named["method_display_name"])) if len(named) else {}


def dimension_label(dim: str, value: KeyValue, display: Mapping[str, str]) -> Text:
    """How a value of a dimension is labelled: paper names of methods (the adapters' display names,
    tests/benchmark/test_run_identity.py) and backbones, another method's display name
    (:func:`reports.layouts.display_name`), other values as they are."""
    if dim == "method":
        return _METHOD_LABELS.get(str(value)) or text(display_name(str(value), display.get(str(value))))
    if dim == "backbone":
        return text(_BACKBONE_LABELS.get(str(value), str(value)))
    return text(str(value))


def method_labels(frame: pd.DataFrame) -> dict[str, str]:
    """method → the label the tables show (:func:`dimension_label`), made unique: methods whose
    labels collide (two own adapters with one display name) show ``label (method)``, so each label
    names one method (``compare --by method``, ``plot --cd``)."""
    display = display_names(frame)
    shown = {str(m): dimension_label("method", m, display).md for m in frame["method"].dropna().unique()}
    taken = list(shown.values())
    return {m: name if taken.count(name) == 1 else f"{name} ({m})" for m, name in shown.items()}


def _group_label(dims: Sequence[str], values: Sequence[KeyValue], display: Mapping[str, str]) -> Text | None:
    if not dims:
        return None
    labels = [dimension_label(d, v, display) for d, v in zip(dims, values)]
    markup = any(t.markup for t in labels)  # data labels stay plain text, escaped where rendered
    return Text(md=" / ".join(t.markdown if markup else t.md for t in labels), tex=" / ".join(t.tex for t in labels),
                markup=markup)


def _caption(fixed: Mapping[str, KeyValue], display: Mapping[str, str]) -> Text:
    if not fixed:
        return _CAPTION
    parts = [(d, dimension_label(d, v, display)) for d, v in fixed.items()]
    md = ", ".join(f"{_HEADERS[d].markdown} {t.markdown}" for d, t in parts)
    tex = ", ".join(f"{_HEADERS[d].tex} {t.tex}" for d, t in parts)
    return Text(md=f"{_CAPTION.md} All rows: {md}.", tex=f"{_CAPTION.tex} All rows: {tex}.")


def _distinct_text(column: pd.Series) -> list[str]:
    return sorted(set(column.astype(str)))


def _describe_where(where: Mapping[str, Sequence[str]]) -> str:
    return " ".join(f"{k}={','.join(v)}" for k, v in where.items())
