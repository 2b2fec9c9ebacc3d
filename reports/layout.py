"""What a table layout is made of. A layout is data: these frozen dataclasses, no code.

A layout is a sequence of body items (rows, headings, rules) crossed with column groups,
each group holding metrics. A cell is selected by merging the layout's fixed filters, the
row's ``where`` and the group's ``where``; together they must name every key column
(dataset, backbone, method, J, variant) exactly once, so each cell is one tidy-frame key.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from benchmark.escaping import latex_text, markdown_text
from reports.columns import KEY_COLUMNS, METRIC_COLUMNS

KeyValue = str | int
Where = Mapping[str, KeyValue]

@dataclass(frozen=True)
class Text:
    """A label in its two spellings: markdown/plain text and LaTeX source. ``markup``: ``md`` is
    the suite's own markdown (a layout's caption); otherwise it is plain text (a label made from
    data by :func:`text`), which the markdown renderer escapes (benchmark/escaping.py)."""

    md: str
    tex: str
    markup: bool = True

    @property
    def markdown(self) -> str:
        """The spelling a markdown document shows: ``md`` itself, or escaped plain text."""
        return self.md if self.markup else markdown_text(self.md)


def text(plain: str) -> Text:
    """A label with no markup (data: a display name, a dataset): LaTeX and markdown escape it."""
    return Text(md=plain, tex=latex_text(plain), markup=False)


#: what a caption says of the best/second-best marks ({scope}: "column", "backbone/metric", …);
#: ``report --significance`` replaces it with its legend (reports.table.caption_text)
BEST_NOTE = Text(
    md="Best is **bold**; second-best is <u>underlined</u> within each {scope}.",
    tex=r"Best is \textbf{bold}; second-best is \underline{underlined} within each {scope}.",
)


@dataclass(frozen=True)
class Metric:
    """A metric column: tidy column name, header, which direction is better, and the digits it
    is shown with (None: the table's ``--decimals``)."""

    key: str
    header: Text
    higher_is_better: bool = True
    decimals: int | None = None

    def __post_init__(self) -> None:
        if self.key not in METRIC_COLUMNS:
            raise ValueError(f"unknown metric column {self.key!r}; expected one of {METRIC_COLUMNS}")


@dataclass(frozen=True)
class ColumnGroup:
    """Adjacent columns sharing a selector (e.g. one backbone), one column per metric."""

    label: Text | None
    where: Where
    metrics: tuple[Metric, ...]


@dataclass(frozen=True)
class Row:
    """A table row: its label cells, its selector, and an optional qualifier.

    The qualifier follows the first label after the dagger, as in ``NPPP$^\\dagger$ (J=3)``.
    """

    labels: tuple[Text, ...]
    where: Where
    qualifier: Text | None = None


@dataclass(frozen=True)
class Heading:
    """A full-width line inside the body (``\\multicolumn{n}{align}{...}``).

    ``level`` nests headings (0 = section, 1 = subsection); it names missing cells.
    """

    text: Text
    align: Literal["l", "c"] = "l"
    style: Literal["bold", "emph", "plain"] = "bold"
    level: int = 0


@dataclass(frozen=True)
class Rule:
    """A ``\\midrule`` between row groups."""


BodyItem = Row | Heading | Rule


@dataclass(frozen=True)
class Layout:
    """One paper table: selection, structure, labels, and typesetting switches.

    mark_best: bold the best and underline the second-best value of every column.
    show_std: print mean±std for multi-seed cells (otherwise the mean, marked with †).
    show_n: after a multi-seed mean, print how many seeds it averages, ``(n=3)``.
    rule_after_labels / rule_between_groups: vertical rules in the tabular column spec (the paper's
    tables have them; the generic table does not and sets its column groups apart by ``\\cmidrule``).
    wide / resize: ``table*`` float; scale the tabular to ``\\textwidth``.
    tabcolsep / arraystretch: the float's ``\\tabcolsep`` and ``\\arraystretch`` (None: LaTeX's).
    dataset: the one dataset of a paper table; None when the rows and columns select it.
    """

    name: str
    description: str
    caption: Text
    tex_label: str
    dataset: str | None
    filters: Where
    label_headers: tuple[Text, ...]
    label_align: tuple[Literal["l", "c"], ...]
    columns: tuple[ColumnGroup, ...]
    body: tuple[BodyItem, ...]
    mark_best: bool = True
    show_std: bool = False
    rule_after_labels: bool = True
    rule_between_groups: bool = False
    wide: bool = False
    resize: bool = False
    show_n: bool = False
    tabcolsep: str | None = None
    arraystretch: str | None = None

    def __post_init__(self) -> None:
        if len(self.label_align) != len(self.label_headers):
            raise ValueError(f"layout {self.name}: one alignment per label column is needed")
        for row in self.rows:
            if len(row.labels) != len(self.label_headers):
                raise ValueError(
                    f"layout {self.name}: row {row.labels} needs {len(self.label_headers)} labels"
                )
            for group in self.columns:
                self.cell_key(row, group)

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(item for item in self.body if isinstance(item, Row))

    @property
    def n_columns(self) -> int:
        return len(self.label_headers) + sum(len(g.metrics) for g in self.columns)

    def cell_key(self, row: Row, group: ColumnGroup) -> tuple[KeyValue, ...]:
        """The (dataset, backbone, method, J, variant) value selecting one cell."""
        merged: dict[str, KeyValue] = {} if self.dataset is None else {"dataset": self.dataset}
        for part in (self.filters, row.where, group.where):
            clash = merged.keys() & part.keys()
            if clash:
                raise ValueError(f"layout {self.name}: {sorted(clash)} given twice for row {row.labels}")
            merged.update(part)
        if set(merged) != set(KEY_COLUMNS):
            raise ValueError(
                f"layout {self.name}: row {row.labels} selects {sorted(merged)}, expected {KEY_COLUMNS}"
            )
        return tuple(merged[k] for k in KEY_COLUMNS)
