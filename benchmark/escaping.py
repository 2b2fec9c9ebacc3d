"""The one escaping rule of each output format the suite writes a label into (a method's display
name, a dataset, a variant, a source's name: text a lab or an adapter chose).

Every rule first makes the label one plain line (:func:`plain_label`): control characters (Unicode
category Cc: tab, newline, carriage return, NUL, DEL, C1) and the line and paragraph separators
become a space, and the bidirectional formatting characters (Unicode's Bidi_Control property:
U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what a reader sees around
them ("Trojan Source", CVE-2021-42574), are removed. Then:

- **Markdown** (:func:`markdown_text`): HTML escaped (``&``, ``<``, ``>``: a markdown renderer
  passes raw HTML through), and ``\\``, `````, ``[``, ``]`` backslash-escaped (no code span, no
  link); a table cell escapes ``|`` too (:func:`markdown_cell`, GitHub-flavoured tables);
- **LaTeX** (:func:`latex_text`): the ten special characters as their text commands, accented
  Latin letters as accent commands, Greek letters as math symbols, and any other character
  pdfLaTeX's default OT1 encoding cannot typeset as ``?``, so the text compiles under plain
  ``pdflatex``;
- **HTML** (:func:`html_text`): the bidirectional controls and the control characters but tab
  and newline removed, then ``html.escape`` with quotes (safe in attributes);
- **YAML**: :func:`plain_label` before ``yaml.safe_dump`` (which quotes and escapes the rest);
- **CSV**: benchmark/csv_cells.py (no formula cell; the csv module quotes newlines).
"""
from __future__ import annotations

import html
import unicodedata

#: Unicode's Bidi_Control characters (PropList.txt)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_LINE_BREAKS = frozenset("\u2028\u2029")
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
#: combining marks (NFD) → LaTeX's accent command (LaTeX2e for authors, "Accents"; OT1 has no ogonek)
_LATEX_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0304": "=", "\u0306": "u",
                  "\u0307": ".", "\u0308": '"', "\u030a": "r", "\u030b": "H", "\u030c": "v", "\u0327": "c"}
#: letters with no decomposition that OT1 still typesets (LaTeX2e for authors, "Non-English characters")
_LATEX_LETTERS = {"ß": r"\ss{}", "æ": r"\ae{}", "Æ": r"\AE{}", "œ": r"\oe{}", "Œ": r"\OE{}", "ø": r"\o{}",
                  "Ø": r"\O{}", "ł": r"\l{}", "Ł": r"\L{}", "ı": r"\i{}", "¡": r"!`", "¿": r"?`",
                  "\u00a0": "~", "–": "--", "—": "---", "‘": "`", "’": "'", "“": "``", "”": "''",
                  "±": r"\ensuremath{\pm}", "×": r"\ensuremath{\times}", "·": r"\ensuremath{\cdot}",
                  "…": r"\ldots{}", "°": r"\ensuremath{^\circ}", "−": r"\ensuremath{-}", "†": r"\dag{}",
                  "↑": r"\ensuremath{\uparrow}", "↓": r"\ensuremath{\downarrow}"}
#: Greek letters with a math command of their own (capitals like Alpha are Latin A)
_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lamda", "mu",
          "nu", "xi", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"}
_GREEK_CAPITALS = {"gamma", "delta", "theta", "lamda", "xi", "pi", "sigma", "upsilon", "phi", "psi", "omega"}


def plain_label(text: object) -> str:
    """``text`` as one line with no control or bidirectional formatting character (see the module)."""
    out = []
    for char in str(text):
        if char in BIDI_CONTROLS:
            continue
        out.append(" " if unicodedata.category(char) == "Cc" or char in _LINE_BREAKS else char)
    return "".join(out)


def markdown_text(text: object) -> str:
    """A label as markdown inline text that renders as itself (no HTML, code span or link)."""
    escaped = html.escape(plain_label(text).replace("\\", "\\\\"), quote=False)
    return escaped.replace("`", "\\`").replace("[", "\\[").replace("]", "\\]")


def escape_pipes(cell: str) -> str:
    """A composed markdown table cell (labels already :func:`markdown_text`, markup of the suite's)
    with ``|`` escaped, so it cannot split its row."""
    return cell.replace("|", r"\|")


def markdown_cell(text: object) -> str:
    """A label as one cell of a GitHub-flavoured markdown table."""
    return escape_pipes(markdown_text(text))


def _latex_char(char: str) -> str:
    if char in _LATEX_SPECIAL:
        return _LATEX_SPECIAL[char]
    if " " <= char <= "~":
        return char
    if char in _LATEX_LETTERS:
        return _LATEX_LETTERS[char]
    name = unicodedata.name(char, "")
    for case, prefix in (("small", "GREEK SMALL LETTER "), ("capital", "GREEK CAPITAL LETTER ")):
        letter = name.removeprefix(prefix).lower()
        if name.startswith(prefix) and letter in (_GREEK if case == "small" else _GREEK_CAPITALS):
            command = "lambda" if letter == "lamda" else letter
            return rf"\ensuremath{{\{command.capitalize() if case == 'capital' else command}}}"
    base, *marks = unicodedata.normalize("NFD", char)
    if " " <= base <= "~" and base.isalpha() and marks and all(m in _LATEX_ACCENTS for m in marks):
        text = base if base not in "ij" else "\\" + base  # dotless i and j under an accent
        for mark in marks:
            text = f"\\{_LATEX_ACCENTS[mark]}{{{text}}}"
        return text
    return "?"


def latex_text(text: object) -> str:
    """A label as LaTeX text that pdfLaTeX typesets with its default encoding (see the module)."""
    return "".join(_latex_char(char) for char in plain_label(text))


def html_text(value: object) -> str:
    """Any value as HTML text, safe in element content and in quoted attributes."""
    text = "" if value is None else str(value)
    kept = "".join(c for c in text if c not in BIDI_CONTROLS and (c in "\t\n" or unicodedata.category(c) != "Cc"))
    return html.escape(kept, quote=True)
