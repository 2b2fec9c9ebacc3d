"""Figure styles of every figure command (``plot``, ``plot --curves``, ``plot --cd``, ``figures``).

``screen`` (the default) sizes a figure by its panels and titles it; ``paper`` fits a journal page:
a one-panel figure is one column wide, a wider one the full text width (IEEE two-column:
3.5 in and 7.16 in, the IEEEtran class's ``\\columnwidth`` and ``\\textwidth``), all text at 8 pt
(IEEE asks for 8–10 pt in figures), and no title inside the figure (the caption says it; the
command prints it). Every PDF and PS the suite writes embeds TrueType (Type 42) fonts:
publishers' checkers (IEEE PDF eXpress, ACM) reject Type 3 fonts, matplotlib's default.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from benchmark.errors import ProtobenchError, did_you_mean

#: TrueType (Type 42) fonts in every PDF/PS: matplotlib's default (3) writes Type 3 fonts
EMBEDDED_FONTS: dict[str, int] = {"pdf.fonttype": 42, "ps.fonttype": 42}
COLUMN_INCHES = 3.5  # IEEE two-column \columnwidth (IEEEtran: 3.5 in)
TEXT_INCHES = 7.16  # IEEE two-column \textwidth (IEEEtran: 7.16 in)
PAPER_FONT_PT = 8.0


@dataclass(frozen=True)
class FigureStyle:
    """How large a figure is and how its text is set.

    ``column_inches``/``text_inches``: the width of a one-panel and of a wider figure (None: sized
    by its panels); ``small``/``tiny``: font sizes of legends and annotations (a size name or
    points); ``titles``: whether titles are drawn inside the figure."""

    name: str
    column_inches: float | None
    text_inches: float | None
    small: str | float
    tiny: str | float
    titles: bool
    rc: tuple[tuple[str, object], ...] = ()

    def width(self, panels: int) -> float | None:
        """The figure width of ``panels`` panels side by side (None: the caller's own size)."""
        return self.column_inches if panels <= 1 else self.text_inches


SCREEN = FigureStyle("screen", None, None, "small", "x-small", True)
PAPER = FigureStyle(
    "paper", COLUMN_INCHES, TEXT_INCHES, PAPER_FONT_PT, PAPER_FONT_PT, False,
    rc=tuple({"font.size": PAPER_FONT_PT, "axes.titlesize": PAPER_FONT_PT, "axes.labelsize": PAPER_FONT_PT,
              "xtick.labelsize": PAPER_FONT_PT, "ytick.labelsize": PAPER_FONT_PT, "legend.fontsize": PAPER_FONT_PT,
              "legend.title_fontsize": PAPER_FONT_PT, "figure.titlesize": PAPER_FONT_PT,
              "lines.markersize": 4.0, "lines.linewidth": 1.0, "axes.linewidth": 0.6}.items()),
)
STYLES: dict[str, FigureStyle] = {s.name: s for s in (SCREEN, PAPER)}


def figure_style(name: str) -> FigureStyle:
    """The style called ``name``; an unknown name is an error listing the styles."""
    if name not in STYLES:
        hint = did_you_mean(name, list(STYLES))
        raise ProtobenchError(f"--style {name}: unknown style{hint}; choose one of {', '.join(STYLES)}.")
    return STYLES[name]


@contextmanager
def drawing(style: FigureStyle) -> Iterator[None]:
    """Matplotlib settings while a figure of ``style`` is built and saved (Agg backend, Type 42)."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({**EMBEDDED_FONTS, **dict(style.rc)}):
        yield
